"""The golden training model: gradients, fixed-point accuracy, determinism, schedule, training."""

import re

import numpy as np
import pytest

from mapping import golden, numerics, tensor_ops, zoo
from mapping.errors import SpecError
from mapping.network import Layer, infer
from mapping.numerics import Formats

FLOAT = golden.arithmetic("float")
FIXED = golden.arithmetic("fixed")


def conv(name, out, k, stride=1, pad=0, bias=True, groups=1):
    return Layer("conv2d", name, out_channels=out, kernel=k, stride=stride, padding=pad, bias=bias,
                 groups=groups)


def pool(name, k, stride, pad=0):
    return Layer("maxpool", name, kernel=k, stride=stride, padding=pad)


def fc(name, out, bias=True):
    return Layer("linear", name, out_channels=out, bias=bias)


def relu(name):
    return Layer("relu", name)


def flatten():
    return Layer("flatten", "flatten")


def random_params(network, rng, bias_scale=0.1):
    """He-normal weights and small random biases (float)."""
    params = golden.init_params(network, rng)
    return {name: (w, None if b is None else rng.normal(0, bias_scale, b.shape))
            for name, (w, b) in params.items()}


def mse(output, label):
    target = np.zeros(output.size)
    target[label] = 1.0
    return 0.5 * np.sum((output.ravel() - target) ** 2)


# --- float gradients against finite differences -----------------------------------------

def gradient_networks(rng):
    """Small networks covering every layer type and geometry; channels and sizes random."""
    c = lambda: int(rng.integers(2, 5))  # noqa: E731
    odd = lambda: int(rng.integers(3, 6)) * 2 + 1  # noqa: E731
    return [
        # stride 2 with padding on odd sizes, overlapping max-pool with padding, 1x1 kernel
        infer("g-stride", (c(), odd(), odd() + 2), [
            conv("c1", c(), 3, stride=2, pad=1), relu("r1"), pool("p1", 3, 2, 1),
            conv("c2", c(), 1, bias=False), flatten(), fc("f1", 5)]),
        # even kernel, stride-1 overlapping pool, stride 2 with padding 2, two linear layers
        infer("g-deep", (c(), 7, 6), [
            conv("c1", c(), 2), pool("p1", 2, 1), relu("r1"), conv("c2", c(), 3, stride=2, pad=2),
            relu("r2"), flatten(), fc("f1", 6, bias=False), relu("r3"), fc("f2", 3)]),
        # layers before the first weighted layer run no EB; 5x5 kernel, padding 2
        infer("g-late", (c(), 9, 9), [
            pool("p0", 3, 3), relu("r0"), conv("c1", c(), 5, pad=2), relu("r1"), pool("p1", 2, 2, 1),
            flatten(), fc("f1", 4)]),
        # grouped: two groups strided and padded, then one channel per group (depthwise)
        infer("g-grouped", (4, 5, 4), [
            conv("c1", 4, 3, pad=1, groups=2), relu("r1"), conv("c2", 4, 3, stride=2, pad=1, groups=2),
            relu("r2"), conv("c3", 4, 3, pad=1, groups=4, bias=False), flatten(), fc("f1", 3)]),
    ]


def linear_piece(network, trace):
    """Which relu inputs are positive and which input wins each max-pool window."""
    return [np.concatenate([(trace.acts[info.position] > 0).ravel() for info in network
                            if info.type == "relu"])] + [trace.argmax[p].ravel() for p in sorted(trace.argmax)]


@pytest.mark.parametrize("index", range(4))
def test_float_gradients_match_finite_differences(index):
    """Every weight and bias gradient, by central differences of the MSE loss.

    With one parameter varying, the network output is piecewise linear in it and the
    loss piecewise quadratic, so central differences are exact up to round-off inside
    one linear piece; the test asserts that no perturbation leaves the piece (no relu
    kink or max-pool tie is crossed), which holds for continuous random values.
    """
    rng = np.random.default_rng(100 + index)
    network = gradient_networks(rng)[index]
    params = random_params(network, rng)
    image = rng.normal(0, 1, network.input_shape)
    label = int(rng.integers(network.num_classes))
    trace = golden.forward(network, params, image, FLOAT, 0)
    grads, errors = golden.backward(network, params, trace, label, FLOAT, 0)
    first = network.weighted_layers[0].position
    assert all(e is None for e in errors[:first + 1])
    assert all(e is not None for e in errors[first + 1:])
    piece = linear_piece(network, trace)
    h = 1e-5
    for info in network.weighted_layers:
        for which, value in enumerate(params[info.name]):
            if value is None:
                assert grads[info.name][which] is None
                continue
            numeric = np.zeros_like(value)
            for i in np.ndindex(value.shape):
                losses = []
                for delta in (h, -h):
                    shifted = value.copy()
                    shifted[i] += delta
                    pair = list(params[info.name])
                    pair[which] = shifted
                    t = golden.forward(network, {**params, info.name: tuple(pair)}, image, FLOAT, 0)
                    assert all((a == b).all() for a, b in zip(linear_piece(network, t), piece))
                    losses.append(mse(t.output, label))
                numeric[i] = (losses[0] - losses[1]) / (2 * h)
            analytic = grads[info.name][which]
            assert analytic.shape == value.shape
            rel = np.linalg.norm(analytic - numeric) / np.linalg.norm(numeric)
            assert rel < 1e-6, (network.name, info.name, which, rel)


def test_float_cross_entropy_error_is_softmax_minus_onehot_and_the_loss_gradient():
    rng = np.random.default_rng(8)
    network = zoo.tiny()
    params = random_params(network, rng)
    ce = golden.arithmetic("float", Formats(loss="ce"))
    trace = golden.forward(network, params, rng.random(network.input_shape), ce, 0)
    _, errors = golden.backward(network, params, trace, 3, ce, 0)
    y = trace.output.ravel()
    softmax = np.exp(y - y.max()) / np.exp(y - y.max()).sum()
    assert np.array_equal(errors[-1].ravel(), softmax - np.eye(10)[3])
    h = 1e-6
    numeric = [(golden.loss(y + h * d, 3, ce) - golden.loss(y - h * d, 3, ce)) / (2 * h) for d in np.eye(10)]
    assert np.abs(errors[-1].ravel() - numeric).max() < 1e-8
    assert golden.loss(y, 3, ce) == pytest.approx(-np.log(softmax[3]), abs=1e-12)


def test_fixed_cross_entropy_error_rounds_the_fixed_softmax():
    f = Formats(loss="ce")
    network, y = zoo.tiny(), np.array([300, -20, 0, 7, 512, 90, -600, 1, 2, 3]).reshape(10, 1, 1)
    e = golden.arithmetic("fixed", f).loss_error(y, np.eye(10)[4].reshape(10, 1, 1), network.layers[-1], 5)
    acc = numerics.softmax(y.ravel(), f.act_frac) - (np.eye(10, dtype=np.int64)[4] << numerics.SOFTMAX_FRAC)
    tensor = numerics.tensor_id(network.layers[-1].position, numerics.LOSS_ERROR)
    assert f.loss_shift == 4
    assert list(e.ravel()) == list(numerics.requantize(acc, 4, f.seed, tensor, 5))


def test_backward_errors_are_the_input_gradients():
    """errors[i] of a layer input equals d loss / d acts[i], checked by perturbing acts[i].

    The network pools conv outputs (no ties); a pool after a relu would see tied zeros,
    where a one-sided perturbation changes the winner.
    """
    rng = np.random.default_rng(5)
    network = gradient_networks(rng)[1]
    params = random_params(network, rng)
    trace = golden.forward(network, params, rng.normal(0, 1, network.input_shape), FLOAT, 0)
    _, errors = golden.backward(network, params, trace, 1, FLOAT, 0)
    h = 1e-5
    for start in range(1, len(network)):  # from the input of layer `start` to the loss
        tail = network.layers[start:]
        x = trace.acts[start]
        numeric = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            losses = []
            for delta in (h, -h):
                y = x.copy()
                y[i] += delta
                argmax = {}
                for info in tail:
                    y = golden.layer_forward(info, y, params.get(info.name), FLOAT, 0, argmax)
                losses.append(mse(y, 1))
            numeric[i] = (losses[0] - losses[1]) / (2 * h)
        assert np.linalg.norm(errors[start] - numeric) <= 1e-6 * np.linalg.norm(numeric), start


# --- fixed point against float ----------------------------------------------------------

def _padded_windows(x, kernel, stride, padding, fill):
    xp = np.pad(x, ((0, 0), (padding, padding), (padding, padding)), constant_values=fill)
    return tensor_ops.windows(xp, kernel, stride)  # (OH, OW, C, K, K)


def _maxpool_error_bound(info, x, dx, err, derr):
    """Bound on |fixed - float| input errors of a max-pool; see error_bounds."""
    layer, (c, h, w) = info.layer, info.in_shape
    xw = _padded_windows(x, layer.kernel, layer.stride, layer.padding, -np.inf)
    dw = _padded_windows(dx, layer.kernel, layer.stride, layer.padding, 0.0)
    pos = _padded_windows(np.broadcast_to(np.arange(h * w).reshape(1, h, w), (c, h, w)),
                          layer.kernel, layer.stride, layer.padding, -1)
    best, arg = tensor_ops.maxpool_forward(x, layer.kernel, layer.stride, layer.padding)
    dbest = np.take_along_axis(dx.reshape(c, -1), arg.reshape(c, -1), axis=1).reshape(arg.shape)
    low = (best - dbest).transpose(1, 2, 0)[..., None, None]
    candidates = (xw + dw >= low) & (pos >= 0)  # inputs that may hold the fixed maximum
    sure = candidates.sum(axis=(3, 4)) == 1
    share = np.where(sure, derr.transpose(1, 2, 0), np.abs(err).transpose(1, 2, 0) + derr.transpose(1, 2, 0))
    channel = np.broadcast_to(np.arange(c)[None, None, :, None, None], candidates.shape)
    out = np.zeros((c, h * w))
    np.add.at(out, (channel[candidates], pos[candidates]),
              np.broadcast_to(share[..., None, None], candidates.shape)[candidates])
    return out.reshape(c, h, w)


def error_bounds(network, params, qparams, ftrace, ferrors, formats):
    """Elementwise bounds on |fixed - float| of every activation and every computed error.

    Real values: float x, W, b, e; fixed x', W', b', e' (words / 2**frac). Every
    requantize is stochastic rounding, |R(a) - a| < 1 ulp of the result; the input
    image and the initial parameters are rounded to nearest (<= 1/2 ulp).
      input            d = 2**-(act_frac+1)
      conv/linear FP   y' - y = (R - exact) + W'(x' - x) + (W' - W) x + (b' - b)
                       d_y = conv(d_x, |W'|) + conv(|x|, |W' - W|) + |b' - b| + 2**-act_frac
      relu             1-Lipschitz: d_y = d_x;   max-pool: |max a' - max a| <= max|a' - a|
      loss error       e' = y' - onehot exactly (loss_shift < 0), so D = d_y
      conv/linear EB   D_x = conv_backward(D_y, |W'|) + conv_backward(|e|, |W' - W|) + 2**-error_frac
      relu EB          where |pre| > d_pre the masks agree and D_x = D_y (or 0 when masked);
                       elsewhere the masks may differ: D_x = |e| + D_y
      max-pool EB      a window whose float maximum beats every other input by more than
                       both bounds routes like the float model (adds D_y to that input);
                       otherwise it may route to any candidate input: each gets |e| + D_y
    This holds while no word saturates; the test asserts that too.
    """
    act_ulp, err_ulp = 2.0 ** -formats.act_frac, 2.0 ** -formats.error_frac
    d = [np.full(network.input_shape, act_ulp / 2)]
    for info in network:
        x, dx = ftrace.acts[info.position], d[-1]
        if info.type in golden.WEIGHTED_TYPES:
            (w, b), (qw, qb) = params[info.name], qparams[info.name]
            stride, padding = golden.conv_geometry(info)
            dy = (tensor_ops.conv_forward(dx, np.abs(golden.as_kernels(qw)), stride, padding)
                  + tensor_ops.conv_forward(np.abs(x), np.abs(golden.as_kernels(qw - w)), stride, padding)
                  + act_ulp)
            if b is not None:
                dy += np.abs(qb - b)[:, None, None]
        elif info.type == "maxpool":
            dy = tensor_ops.maxpool_forward(dx, info.kernel, info.layer.stride, info.layer.padding)[0]
        else:
            dy = dx.reshape(info.out_shape)
        d.append(dy)
    first = network.weighted_layers[0].position
    big_d = [None] * len(network) + [d[-1]]
    for info in reversed(network.layers[first + 1:]):
        x, err, derr = ftrace.acts[info.position], ferrors[info.position + 1], big_d[info.position + 1]
        if info.type in golden.WEIGHTED_TYPES:
            w, qw = params[info.name][0], qparams[info.name][0]
            stride, padding = golden.conv_geometry(info)
            dx = (tensor_ops.conv_backward(derr, np.abs(golden.as_kernels(qw)), info.in_shape, stride, padding)
                  + tensor_ops.conv_backward(np.abs(err), np.abs(golden.as_kernels(qw - w)), info.in_shape,
                                             stride, padding)
                  + err_ulp)
        elif info.type == "relu":
            sure = np.abs(x) > d[info.position]
            dx = np.where(sure, np.where(x > 0, derr, 0.0), np.abs(err) + derr)
        elif info.type == "maxpool":
            dx = _maxpool_error_bound(info, x, d[info.position], err, derr)
        else:
            dx = derr.reshape(info.in_shape)
        big_d[info.position] = dx
    return d, big_d


@pytest.mark.parametrize("name", ["tiny", "lenet-digits"])
def test_fixed_point_stays_within_the_derived_bound_of_float(name):
    network = zoo.NETWORKS[name]()
    formats = Formats()
    rng = np.random.default_rng(11)
    params = random_params(network, rng)
    qparams = golden.to_fixed(params, formats)
    qreal = golden.to_float(qparams, formats)
    fracs = {"act": formats.act_frac, "err": formats.error_frac}
    worst = {"act": [0.0, 0.0, 0.0], "err": [0.0, 0.0, 0.0]}  # max difference, max ratio, max bound
    for sample in range(6):
        image = rng.random(network.input_shape)
        label = int(rng.integers(network.num_classes))
        ftrace = golden.forward(network, params, image, FLOAT, sample)
        _, ferrors = golden.backward(network, params, ftrace, label, FLOAT, sample)
        qtrace = golden.forward(network, qparams, image, FIXED, sample)
        _, qerrors = golden.backward(network, qparams, qtrace, label, FIXED, sample)
        d, big_d = error_bounds(network, params, qreal, ftrace, ferrors, formats)
        for kind, fixed, real, bounds in (("act", qtrace.acts, ftrace.acts, d),
                                          ("err", qerrors, ferrors, big_d)):
            for i, (q, f, bound) in enumerate(zip(fixed, real, bounds)):
                if bound is None:
                    assert q is None and f is None
                    continue
                assert np.abs(q).max() < numerics.WORD_MAX, (kind, i)  # no saturation anywhere
                diff = np.abs(numerics.dequantize(q, fracs[kind]) - f)
                assert (diff <= bound).all(), (kind, i, (diff - bound).max())
                if i > 0:  # the input image's rounding is trivially within its half ulp
                    ratio = np.divide(diff, bound, out=np.zeros_like(diff), where=bound > 0)
                    worst[kind] = np.maximum(worst[kind], [diff.max(), ratio.max(), bound.max()])
    for kind, (observed, ratio, bound) in worst.items():
        print(f"{name} {kind}: max |fixed - float| = {observed:.3g}, at most {ratio:.2f} of its "
              f"elementwise bound (largest bound {bound:.3g})")


@pytest.mark.parametrize("name", ["tiny", "lenet-digits"])
def test_each_fixed_point_operation_is_within_one_ulp_of_float(name):
    """Layer by layer from the fixed model's own inputs, errors and weights (as reals):
    each rounding point (FP, EB) is off by less than one ulp of its format and every
    other operation (relu, max-pool, flatten, loss error) is exact. Float64 reproduces
    these fixed-point sums exactly, so this isolates the rounding."""
    network = zoo.NETWORKS[name]()
    formats = Formats()
    rng = np.random.default_rng(12)
    qparams = golden.to_fixed(random_params(network, rng), formats)
    qreal = golden.to_float(qparams, formats)
    act = lambda words: numerics.dequantize(words, formats.act_frac)  # noqa: E731
    error = lambda words: numerics.dequantize(words, formats.error_frac)  # noqa: E731
    first = network.weighted_layers[0].position
    for sample in range(4):
        label = int(rng.integers(network.num_classes))
        trace = golden.forward(network, qparams, rng.random(network.input_shape), FIXED, sample)
        _, errors = golden.backward(network, qparams, trace, label, FIXED, sample)
        onehot = np.zeros(trace.output.shape)
        onehot.flat[label] = 1
        assert (error(errors[-1]) == act(trace.output) - onehot).all()
        for info in network:
            i, weighted = info.position, info.type in golden.WEIGHTED_TYPES
            y = golden.layer_forward(info, act(trace.acts[i]), qreal.get(info.name), FLOAT, sample, {})
            diff = np.abs(act(trace.acts[i + 1]) - y)
            assert diff.max() < 2.0 ** -formats.act_frac if weighted else diff.max() == 0, info.name
            if i > first:
                e = golden.layer_backward(info, act(trace.acts[i]), error(errors[i + 1]), qreal.get(info.name),
                                          FLOAT, sample, trace.argmax)
                diff = np.abs(error(errors[i]) - e)
                assert diff.max() < 2.0 ** -formats.error_frac if weighted else diff.max() == 0, info.name


def test_fixed_point_tensors_are_words_and_gradients_exact_integers():
    network = zoo.tiny()
    params = golden.init_params(network, np.random.default_rng(0), Formats())
    trace = golden.forward(network, params, np.random.default_rng(1).random(network.input_shape), FIXED, 0)
    grads, errors = golden.backward(network, params, trace, 3, FIXED, 0)
    for array in trace.acts + [e for e in errors if e is not None]:
        assert array.dtype == np.int64
        assert numerics.WORD_MIN <= array.min() and array.max() <= numerics.WORD_MAX
    for dw, db in grads.values():
        assert dw.dtype == np.int64 and db.dtype == np.int64


def test_hardware_slicing_reproduces_the_golden_bits():
    """conv2 of lenet-digits computed the way nodes split it: FP as ICP partial sums over
    uneven input-channel slices (added in reverse order) rounded per output slice, EB as
    partial sums over output-channel slices rounded per input slice, every element with
    its global index. The words equal the golden model's."""
    network, formats = zoo.lenet_digits(), Formats()
    rng = np.random.default_rng(3)
    qparams = golden.to_fixed(random_params(network, rng), formats)
    sample = 17
    trace = golden.forward(network, qparams, rng.random(network.input_shape), FIXED, sample)
    _, errors = golden.backward(network, qparams, trace, 4, FIXED, sample)
    info = network["conv2"]
    p, x, err, (w, b) = info.position, trace.acts[info.position], errors[info.position + 1], qparams["conv2"]

    def rounded_slices(acc, kind, shift, slices):
        index = np.arange(acc.size).reshape(acc.shape)
        tensor = numerics.tensor_id(p, kind)
        return [(lo, hi, numerics.requantize(acc[lo:hi], shift, formats.seed, tensor, sample, index[lo:hi]))
                for lo, hi in slices]

    acc = b[:, None, None] << (formats.act_frac + formats.weight_frac - formats.bias_frac)
    for lo, hi in reversed([(0, 2), (2, 5), (5, 6)]):
        acc = acc + tensor_ops.conv_forward(x[lo:hi], w[:, lo:hi], 1, 1)
    for lo, hi, words in rounded_slices(acc, numerics.FP_OUT, formats.fp_shift, [(9, 16), (0, 3), (3, 9)]):
        assert (words == trace.acts[p + 1][lo:hi]).all()
    acc = sum(tensor_ops.conv_backward(err[lo:hi], w[lo:hi], info.in_shape, 1, 1)
              for lo, hi in [(11, 16), (0, 7), (7, 11)])
    for lo, hi, words in rounded_slices(acc, numerics.EB_OUT, formats.eb_shift, [(4, 6), (0, 4)]):
        assert (words == errors[p][lo:hi]).all()


def test_narrow_partial_sums_saturate_where_they_leave_a_slice():
    """An fc layer of six inputs cut after the third: three saturated products (3 * 2**30) leave
    the first slice clipped to 2**31 - 1, and the second slice's three negative ones bring the sum
    to -2**30 (-32768 once requantized) instead of the exact 0. EB of the same layer cut by output
    channels adds from the last slice back, so its clip is the mirror image."""
    network = infer("cut", (6, 1, 1), [flatten(), fc("fc", 1)])
    word = numerics.WORD_MAX
    params = {"fc": (np.array([[word, word, word, -word, -word, -word]]), np.zeros(1, dtype=np.int64))}
    image = np.full(network.input_shape, word / 2 ** Formats().act_frac)
    narrow = golden.arithmetic("fixed", Formats(psum_bits=32), {"fc": ("icp", (3,))})
    assert golden.forward(network, params, image, narrow, 0).output.ravel().tolist() == [numerics.WORD_MIN]
    assert golden.forward(network, params, image, FIXED, 0).output.ravel().tolist() == [0]
    uncut = golden.arithmetic("fixed", Formats(psum_bits=32), {})
    assert golden.forward(network, params, image, uncut, 0).output.ravel().tolist() == [0]

    info = network["fc"]
    err = np.full((6, 1, 1), word)
    weights = np.array([[word], [word], [word], [-word], [-word], [-word]])
    back = golden.arithmetic("fixed", Formats(psum_bits=32), {"fc": ("ocp", (3,))})
    wide = golden.layer_backward(info, None, err, (weights, None), FIXED, 0, {})
    clipped = golden.layer_backward(info, None, err, (weights, None), back, 0, {})
    # from the last slice back: -3 * 2**30 clipped to -2**31, plus 3 * 2**30
    assert wide.ravel().tolist() == [0] and clipped.ravel().tolist() == [numerics.WORD_MAX]


def test_partial_sum_cuts_come_from_the_slices_and_are_checked():
    class Slice:
        def __init__(self, layer, mode, in_range, out_range):
            self.layer, self.mode, self.in_range, self.out_range = layer, mode, in_range, out_range

    slices = [Slice("conv1", "ocp", (0, 1), (0, 2)), Slice("conv1", "ocp", (0, 1), (2, 4)),
              Slice("conv2", "icp", (0, 1), (0, 8)), Slice("conv2", "icp", (1, 3), (0, 8)),
              Slice("conv2", "icp", (3, 4), (0, 8)), Slice("fc", "icp", (0, 32), (0, 10))]
    assert golden.psum_cuts(slices) == {"conv1": ("ocp", (2,)), "conv2": ("icp", (1, 3))}
    network = zoo.tiny()
    inputs, labels, params = golden.random_data(network, 1, 0)
    for cuts, message in [({"conv9": ("icp", (1,))}, r"'conv9' is not a weighted layer of network tiny"),
                          ({"conv2": ("oc", (1,))}, r"layer 'conv2' is cut by mode 'oc', not 'icp' or 'ocp'"),
                          ({"conv2": ("icp", (3, 1))}, r"layer 'conv2': cuts \(3, 1\) are not increasing channels "
                                                       r"within 1..3"),
                          ({"conv2": ("ocp", (8,))}, r"layer 'conv2': cuts \(8,\) are not increasing channels "
                                                     r"within 1..7")]:
        with pytest.raises(SpecError, match=rf"^psum_cuts: {message}$"):
            golden.train(network, params, inputs, labels, batch=1, lr=0.01, psum_cuts=cuts)


def test_accumulator_overflow_is_refused_naming_the_layer():
    # 2**18 products of saturated words: the FP sum needs more than 48 bits.
    network = infer("wide", (4, 256, 256), [flatten(), fc("fc", 2)])
    params = {"fc": (np.full((2, 4 * 256 * 256), numerics.WORD_MAX), np.zeros(2, dtype=np.int64))}
    with pytest.raises(OverflowError, match=r"^layer 'fc': FP accumulator reaches \d+, beyond the signed "
                                            r"48-bit range$"):
        golden.forward(network, params, np.full(network.input_shape, 200.0), FIXED, 0)
    # PG: 2**18 pixels of a 1x1 conv, each saturated activation times a saturated error.
    network = infer("tall", (1, 512, 512), [conv("c1", 1, 1), flatten(), fc("fc", 2)])
    params = {"c1": (np.ones((1, 1, 1, 1), dtype=np.int64), np.zeros(1, dtype=np.int64)),
              "fc": (np.full((2, 512 * 512), numerics.WORD_MAX), np.zeros(2, dtype=np.int64))}
    with pytest.raises(OverflowError, match=r"^layer 'c1': PG accumulator reaches"):
        golden.train(network, params, np.full((1,) + network.input_shape, 200.0), [0], batch=1, lr=0.01)


# --- determinism ------------------------------------------------------------------------

def tiny_run(seed, fp_stale=1, samples=12, batch=4):
    """Fixed-point training of ``tiny`` on random data; the initial weights do not depend on seed."""
    network = zoo.tiny()
    rng = np.random.default_rng(21)
    params = golden.init_params(network, rng, Formats())
    inputs = rng.random((samples,) + network.input_shape)
    labels = rng.integers(0, 10, samples)
    return golden.train(network, params, inputs, labels, batch=batch, lr=0.1,
                        formats=Formats(seed=seed), fp_stale=fp_stale)


def test_same_seed_gives_identical_bits_and_another_seed_does_not():
    (p1, r1), (p2, r2), (p3, r3) = tiny_run(5), tiny_run(5), tiny_run(6)
    for name in p1:
        for a, b, c in zip(p1[name], p2[name], p3[name]):
            assert a.dtype == np.int64 and (a == b).all()
    assert (r1.loss == r2.loss).all()
    changed = sum(int((a != c).sum()) for name in p1 for a, c in zip(p1[name], p3[name]))
    assert changed > 0 and (r1.loss != r3.loss).any()


# --- pipelined schedule -----------------------------------------------------------------

def plain_sgd(network, params, inputs, labels, batch, lr, arith, fp_stale=0, eb_stale=0):
    """Textbook mini-batch SGD written out independently of golden.train; with staleness,
    FP of sample s runs on version max(0, (s - fp_stale) // batch) and EB on
    max(0, (s - eb_stale) // batch) of the list of every version."""
    versions = [params]
    for m in range(len(inputs) // batch):
        sums = {name: [None if v is None else np.zeros_like(v) for v in pair] for name, pair in params.items()}
        for s in range(m * batch, (m + 1) * batch):
            trace = golden.forward(network, versions[max(0, (s - fp_stale) // batch)], inputs[s], arith, s)
            grads, _ = golden.backward(network, versions[max(0, (s - eb_stale) // batch)], trace, labels[s], arith, s)
            for name, pair in grads.items():
                for j, g in enumerate(pair):
                    if g is not None:
                        sums[name][j] += g
        new = {}
        for info in network.weighted_layers:
            pair = []
            for value, g, kind in zip(params[info.name], sums[info.name],
                                      (numerics.WEIGHT_UPDATE, numerics.BIAS_UPDATE)):
                if value is None:
                    pair.append(None)
                elif arith.mode == "float":
                    pair.append(value - lr / batch * g)
                else:
                    f = arith.formats
                    shift = f.weight_update_shift if kind == numerics.WEIGHT_UPDATE else f.bias_update_shift
                    step = numerics.requantize(g * numerics.lr_constant(lr, batch, f), shift, f.seed,
                                               numerics.tensor_id(info.position, kind), m)
                    pair.append(numerics.saturate(value - step))
            new[info.name] = tuple(pair)
        params = new
        versions.append(params)
    return params


@pytest.mark.parametrize("mode", ["fixed", "float"])
def test_aligned_schedule_is_plain_minibatch_sgd(mode):
    network = zoo.tiny()
    rng = np.random.default_rng(31)
    formats = Formats()
    arith = golden.arithmetic(mode, formats)
    params = random_params(network, rng)
    if mode == "fixed":
        params = golden.to_fixed(params, formats)
    inputs = rng.random((12,) + network.input_shape)
    labels = rng.integers(0, 10, 12)
    trained, record = golden.train(network, params, inputs, labels, batch=4, lr=0.2, mode=mode)
    expected = plain_sgd(network, params, inputs, labels, 4, 0.2, arith)
    for name in expected:
        for a, b, start in zip(trained[name], expected[name], params[name]):
            assert (a == b).all() and (a != start).any()
    for name in record.fp_version:
        assert (record.fp_version[name] == np.arange(12) // 4).all()


@pytest.mark.parametrize("mode", ["fixed", "float"])
def test_stale_eb_is_sgd_on_the_versions_it_names(mode):
    # eb_stale = 1, FP one staler: the rule of an update that does not stop the engines
    network, batch, samples = zoo.tiny(), 2, 10
    rng = np.random.default_rng(32)
    arith = golden.arithmetic(mode, Formats())
    params = random_params(network, rng)
    if mode == "fixed":
        params = golden.to_fixed(params, Formats())
    inputs = rng.random((samples,) + network.input_shape)
    labels = rng.integers(0, 10, samples)
    trained, record = golden.train(network, params, inputs, labels, batch=batch, lr=0.2, mode=mode,
                                   fp_stale=3, eb_stale=1)
    expected = plain_sgd(network, params, inputs, labels, batch, 0.2, arith, fp_stale=3, eb_stale=1)
    eb_current, _ = golden.train(network, params, inputs, labels, batch=batch, lr=0.2, mode=mode, fp_stale=3)
    for name in expected:
        for a, b in zip(trained[name], expected[name]):
            assert (a == b).all()
    assert any((a != b).any() for name in trained for a, b in zip(trained[name], eb_current[name]))
    for name in record.eb_version:
        assert record.eb_version[name].tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 4]


def test_eb_stale_must_be_a_non_negative_integer():
    network = zoo.tiny()
    params = golden.init_params(network, np.random.default_rng(0), Formats())
    with pytest.raises(SpecError) as error:
        golden.train(network, params, np.zeros((1,) + network.input_shape), [0], batch=1, lr=0.1, eb_stale=-1)
    assert str(error.value) == "eb_stale must be an integer >= 0, got -1"


@pytest.mark.parametrize("stale", [1, 3, 6])
def test_stale_forward_versions_follow_the_formula(stale):
    batch, samples = 4, 16
    (aligned, _), (params, record) = tiny_run(9, 0, samples, batch), tiny_run(9, stale, samples, batch)
    s = np.arange(samples)
    for name in ("conv1", "conv2", "fc"):
        assert (record.fp_version[name] == np.maximum(0, (s - stale) // batch)).all()
    assert set(record.eb_version) == {"conv2", "fc"}  # conv1 is the first weighted layer: no EB
    for name in record.eb_version:
        assert (record.eb_version[name] == s // batch).all()
    assert any((a != b).any() for name in params for a, b in zip(params[name], aligned[name]))


@pytest.mark.parametrize("mode", ["fixed", "float"])
def test_staleness_of_one_layer_affects_only_what_it_should(mode):
    network, batch, formats = zoo.tiny(), 4, Formats()
    arith = golden.arithmetic(mode, formats)
    rng = np.random.default_rng(41)
    params = golden.init_params(network, rng, formats if mode == "fixed" else None)
    inputs = rng.random((8,) + network.input_shape)
    labels = rng.integers(0, 10, 8)
    run = lambda n, stale: golden.train(network, params, inputs[:n], labels[:n], batch=batch,  # noqa: E731
                                        lr=0.2, mode=mode, fp_stale=stale)
    _, aligned = run(8, 0)
    _, stale = run(8, {"conv2": 2})
    version1, _ = run(batch, 0)
    for name in ("conv1", "fc"):
        assert (stale.fp_version[name] == np.arange(8) // batch).all()
    assert stale.fp_version["conv2"].tolist() == [0, 0, 0, 0, 0, 0, 1, 1]
    # The first mini-batch uses version 0 everywhere either way.
    assert (stale.loss[:batch] == aligned.loss[:batch]).all()
    # Samples 4 and 5: version 1 except conv2, which still runs version 0.
    for s in (4, 5):
        mixed = {**version1, "conv2": params["conv2"]}
        trace = golden.forward(network, mixed, inputs[s], arith, s)
        assert golden.loss(trace.output, labels[s], arith) == stale.loss[s] != aligned.loss[s]
    # From sample 6 on, FP is aligned again, but the version-2 weights are not.
    trace = golden.forward(network, version1, inputs[6], arith, 6)
    assert golden.loss(trace.output, labels[6], arith) == stale.loss[6] == aligned.loss[6]


# --- training works ---------------------------------------------------------------------

def synthetic_digits(rng, per_class):
    """10 classes of 8x8 images: a random binary template per class plus noise, in [0, 1)."""
    templates = (rng.random((10, 1, 8, 8)) < 0.4).astype(float)
    labels = np.repeat(np.arange(10), per_class)
    images = np.clip(0.8 * templates[labels] + rng.normal(0, 0.15, (labels.size, 1, 8, 8)), 0, 0.99)
    return images, labels


@pytest.mark.parametrize("mode", ["float", "fixed"])
def test_lenet_digits_learns(mode):
    """Four epochs of 100 samples with the pipelined schedule (fp_stale=2).

    The classifier starts at a tenth of He scale so the initial outputs are near zero
    rather than O(1) (He scaling through two max-pools inflates them). Predicting 0.1
    for every class would give a loss of 0.45: the trained net must beat that clearly
    and classify the training set.
    """
    network, formats = zoo.lenet_digits(), Formats()
    arith = golden.arithmetic(mode, formats)
    rng = np.random.default_rng(51)
    images, labels = synthetic_digits(rng, 10)
    params = golden.init_params(network, rng, scale=1.0)  # 40 updates: He's full scale, a small fc2
    params["fc2"] = (params["fc2"][0] * 0.1, params["fc2"][1])
    if mode == "fixed":
        params = golden.to_fixed(params, formats)

    def evaluate(p):
        outputs = [golden.forward(network, p, x, arith, 0).output for x in images]
        return (np.mean([golden.loss(o, y, arith) for o, y in zip(outputs, labels)]),
                np.mean([o.ravel().argmax() == y for o, y in zip(outputs, labels)]))

    order = np.concatenate([rng.permutation(len(labels)) for _ in range(4)])
    trained, record = golden.train(network, params, images[order], labels[order], batch=10, lr=0.1,
                                   mode=mode, fp_stale=2)
    (before, _), (after, accuracy) = evaluate(params), evaluate(trained)
    print(f"{mode}: mean loss {before:.3f} -> {after:.3f}, accuracy {accuracy:.2f}")
    assert after < 0.3 * before and after < 0.25
    assert accuracy >= 0.9
    assert record.loss[-100:].mean() < 0.5 * record.loss[:100].mean()


# --- refused input ----------------------------------------------------------------------

def tiny_data(n=8):
    network = zoo.tiny()
    rng = np.random.default_rng(0)
    return network, golden.init_params(network, rng, Formats()), rng.random((n, 1, 8, 8)), np.arange(n) % 10


@pytest.mark.parametrize("change, message", [
    ({"batch": 3}, "8 samples are not a whole number of mini-batches of 3"),
    ({"batch": 0}, "batch must be a positive integer, got 0"),
    ({"fp_stale": {"pool1": 1}}, "fp_stale: 'pool1' is not a weighted layer of network tiny "
                                 "(those are conv1, conv2, fc)"),
    ({"fp_stale": -1}, "fp_stale of layer 'conv1' must be an integer >= 0, got -1"),
    ({"mode": "double"}, "golden model: mode 'double' is not one of fixed, float"),
    ({"lr": 1e-7}, "learning rate 1e-07 / batch 4 = 2.5e-08 is not representable as an unsigned "
                   "16-bit constant with 16 fractional bits"),
    ({"labels": np.full(8, 10)}, "labels must be 8 integers in 0..9"),
    ({"inputs": np.zeros((8, 1, 8, 7))},
     "inputs have shape (8, 1, 8, 7); network tiny needs (N,) + (1, 8, 8)"),
])
def test_bad_training_input_is_refused_in_one_line(change, message):
    network, params, inputs, labels = tiny_data()
    kwargs = {"inputs": inputs, "labels": labels, "batch": 4, "lr": 0.1, **change}
    with pytest.raises(SpecError) as info:
        golden.train(network, params, kwargs.pop("inputs"), kwargs.pop("labels"), **kwargs)
    assert str(info.value) == message


def test_bad_params_are_refused_in_one_line():
    network, params, inputs, labels = tiny_data()
    cases = [
        ({**params, "fc": (params["fc"][0][:, :-1], params["fc"][1])},
         "params for network tiny: layer 'fc' weights have shape (10, 31), expected (10, 32)"),
        ({k: v for k, v in params.items() if k != "conv2"},
         "params for network tiny: layer 'conv2' is missing"),
        ({**params, "conv1": (params["conv1"][0], None)},
         "params for network tiny: layer 'conv1' bias should be an array of shape (4,)"),
        ({**params, "relu1": params["fc"]},
         "params for network tiny: 'relu1' is not a weighted layer (those are conv1, conv2, fc)"),
        (golden.to_float(params, Formats()),
         "params for network tiny: layer 'conv1' weights are not 16-bit words (dtype float64); "
         "convert real values with golden.to_fixed"),
    ]
    for bad, message in cases:
        with pytest.raises(SpecError) as info:
            golden.train(network, bad, inputs, labels, batch=4, lr=0.1)
        assert str(info.value) == message


def test_unsupported_layers_are_refused():
    network = zoo.resnet18()
    with pytest.raises(SpecError, match=re.escape("layer 'bn1' is batchnorm")):
        golden.train(network, {}, np.zeros((1,) + network.input_shape), [0], batch=1, lr=0.1)


def test_parameter_conversion_round_trips():
    network, formats = zoo.lenet_digits(), Formats()
    words = golden.init_params(network, np.random.default_rng(2), formats)
    real = golden.to_float(words, formats)
    again = golden.to_fixed(real, formats)
    for name, (w, b) in words.items():
        assert w.dtype == np.int64 and (again[name][0] == w).all() and (again[name][1] == b).all()
        assert (b == 0).all()
    # He-normal times INIT_SCALE: the spread of the largest layer's weights matches it.
    w = real["fc1"][0]
    assert abs(w.std() / (golden.INIT_SCALE * np.sqrt(2 / w.shape[1])) - 1) < 0.05


# --- resuming and divergence -----------------------------------------------------------

def test_resumed_training_continues_noise_and_stale_versions_bit_for_bit():
    network = zoo.tiny()
    rng = np.random.default_rng(8)
    params = golden.init_params(network, rng, Formats())
    inputs, labels = rng.random((12,) + network.input_shape), rng.integers(0, 10, 12)
    run = dict(batch=2, lr=0.1, fp_stale={"conv1": 3, "conv2": 2, "fc": 1})
    whole, one = golden.train(network, params, inputs, labels, **run)
    half, first = golden.train(network, params, inputs[:6], labels[:6], **run)
    resumed, second = golden.train(network, half, inputs[6:], labels[6:], resume=first, **run)
    assert second.start == 6 and (second.fp_version["conv1"] == one.fp_version["conv1"][6:]).all()
    assert (np.concatenate([first.loss, second.loss]) == one.loss).all()
    for name, (w, b) in whole.items():
        assert (resumed[name][0] == w).all() and (resumed[name][1] == b).all()
    with pytest.raises(SpecError, match="^resume: params are not the final params of the run being resumed$"):
        golden.train(network, params, inputs[6:], labels[6:], resume=first, **run)


def test_float_divergence_stops_with_one_line():
    network = zoo.tiny()
    rng = np.random.default_rng(3)
    params = golden.init_params(network, rng)
    inputs, labels = rng.random((120,) + network.input_shape), rng.integers(0, 10, 120)
    with pytest.raises(golden.Diverged, match=r"^training diverged: the loss of sample \d+ is (nan|inf)$"):
        golden.train(network, params, inputs, labels, batch=1, lr=50.0, mode="float")


# --- narrow gradient sums ----------------------------------------------------------------

def pixel_terms(x, err, kernel, stride, padding):
    """Each output pixel's weight-gradient terms, by explicit loops (raster order)."""
    xp = np.pad(x, ((0, 0), (padding, padding), (padding, padding)))
    oc, oh, ow = err.shape
    return [err[:, oy, ox, None, None, None] * xp[None, :, oy * stride:oy * stride + kernel,
                                                 ox * stride:ox * stride + kernel]
            for oy in range(oh) for ox in range(ow)]


def group_by_group(op, x, err_or_w, groups, *args):
    """The reference of a grouped op: G ungrouped ones, each on its group's channels of both
    operands, concatenated in group order (tensor_ops' docstring states they are the same)."""
    return np.concatenate([op(a, b, *args) for a, b in zip(np.split(x, groups), np.split(err_or_w, groups))])


def plain_conv(x, w, stride, padding):
    """Cross-correlation by explicit loops over output channel and pixel: (OC, OH, OW)."""
    xp = np.pad(x, ((0, 0), (padding, padding), (padding, padding)))
    k = w.shape[2]
    oh, ow = (xp.shape[1] - k) // stride + 1, (xp.shape[2] - k) // stride + 1
    y = np.zeros((w.shape[0], oh, ow), dtype=np.int64)
    for o, r, q in np.ndindex(y.shape):
        y[o, r, q] = np.sum(xp[:, r * stride:r * stride + k, q * stride:q * stride + k] * w[o])
    return y


@pytest.mark.parametrize("groups, c_in, c_out, kernel, stride, padding", [
    (2, 4, 6, 3, 1, 1), (3, 6, 3, 3, 2, 1), (4, 4, 8, 5, 2, 2), (2, 2, 2, 1, 1, 0), (1, 3, 5, 3, 2, 0)])
def test_grouped_convolution_is_its_groups_side_by_side(groups, c_in, c_out, kernel, stride, padding):
    """FP, EB, PG and PG's per-pixel terms of a grouped convolution against the G ordinary ones
    of its groups concatenated; FP and PG's terms also against explicit loops."""
    rng = np.random.default_rng(groups * 100 + c_in)
    x = rng.integers(-99, 99, (c_in, 9, 8))
    w = rng.integers(-99, 99, (c_out, c_in // groups, kernel, kernel))
    y = tensor_ops.conv_forward(x, w, stride, padding, groups=groups)
    assert np.array_equal(y, group_by_group(plain_conv, x, w, groups, stride, padding))
    err = rng.integers(-99, 99, y.shape)
    dx = tensor_ops.conv_backward(err, w, x.shape, stride, padding, groups=groups)
    eb = np.concatenate([tensor_ops.conv_backward(e, wg, (c_in // groups, 9, 8), stride, padding)
                         for e, wg in zip(np.split(err, groups), np.split(w, groups))])
    assert np.array_equal(dx, eb)
    # EB is the transpose of FP: <conv(x), err> = <x, conv_backward(err)> for every x.
    assert int(np.sum(y * err)) == int(np.sum(x * dx))
    dw = tensor_ops.conv_weight_grad(x, err, kernel, stride, padding, groups=groups)
    pg = np.concatenate([tensor_ops.conv_weight_grad(xg, e, kernel, stride, padding)
                         for xg, e in zip(np.split(x, groups), np.split(err, groups))])
    assert np.array_equal(dw, pg) and dw.shape == w.shape
    terms = tensor_ops.conv_weight_terms(x, err, kernel, stride, padding, groups=groups)
    loops = np.concatenate([np.array(pixel_terms(xg, e, kernel, stride, padding))
                            for xg, e in zip(np.split(x, groups), np.split(err, groups))], axis=1)
    assert np.array_equal(terms, loops) and np.array_equal(terms.sum(axis=0), dw)


def test_grouped_layer_is_bit_for_bit_its_block_diagonal_ungrouped_layer():
    """Fixed point: a grouped conv layer computes exactly what the ungrouped layer with the
    cross-group weights zero computes (same tensors, so the same rounding noise), and its
    gradients are that layer's on the group blocks; the off-group gradients, which the
    grouped layer has no weights for, are not zero, so the two differ from the first update."""
    rng = np.random.default_rng(11)
    layers = lambda g: [conv("c1", 4, 3, pad=1), relu("r1"), conv("c2", 6, 3, stride=2, pad=1, groups=g),  # noqa: E731
                        relu("r2"), flatten(), fc("f1", 3)]
    grouped, plain = infer("grouped", (2, 6, 6), layers(2)), infer("plain", (2, 6, 6), layers(1))
    params = golden.init_params(grouped, rng, Formats())
    w = params["c2"][0]
    full = np.zeros((6, 4, 3, 3), dtype=np.int64)
    full[:3, :2], full[3:, 2:] = w[:3], w[3:]
    blocked = {**params, "c2": (full, params["c2"][1])}
    image = rng.random(grouped.input_shape)
    trace, plain_trace = (golden.forward(n, p, image, FIXED, 7) for n, p in ((grouped, params), (plain, blocked)))
    assert all(np.array_equal(a, b) for a, b in zip(trace.acts, plain_trace.acts))
    (grads, errors), (plain_grads, plain_errors) = (golden.backward(n, p, t, 2, FIXED, 7) for n, p, t in (
        (grouped, params, trace), (plain, blocked, plain_trace)))
    assert all(np.array_equal(a, b) for a, b in zip(errors[1:], plain_errors[1:]))
    dw = plain_grads["c2"][0]
    assert np.array_equal(grads["c2"][0], np.concatenate([dw[:3, :2], dw[3:, 2:]]))
    assert np.abs(dw[:3, 2:]).sum() > 0


def test_weight_terms_sum_to_the_gradient():
    rng = np.random.default_rng(3)
    x, err = rng.integers(-50, 50, (3, 9, 8)), rng.integers(-50, 50, (4, 5, 4))
    terms = tensor_ops.conv_weight_terms(x, err, 3, 2, 1)
    assert np.array_equal(terms, np.array(pixel_terms(x, err, 3, 2, 1)))
    assert np.array_equal(terms.sum(axis=0), tensor_ops.conv_weight_grad(x, err, 3, 2, 1))


@pytest.mark.parametrize("grad_bits", [16, 24])
def test_narrow_gradient_sums_follow_the_definition(grad_bits):
    """golden.train with narrow sums against mini-batch SGD written out here: each pixel's
    terms rounded with numerics.grad_noise and added with saturation, pixel by pixel."""
    rng = np.random.default_rng(11)
    network = infer("narrow", (2, 9, 9), [conv("c1", 3, 3, stride=2, pad=1), relu("r1"), flatten(),
                                          fc("f1", 4)])
    f = Formats(grad_bits=grad_bits)
    params = golden.to_fixed(random_params(network, rng), f)
    inputs, labels, batch, lr = rng.random((4, 2, 9, 9)), rng.integers(0, 4, 4), 2, 0.05
    arith = golden.arithmetic("fixed", f)
    expected = params
    for m in range(2):
        sums = {name: [None if v is None else np.zeros_like(v) for v in pair] for name, pair in params.items()}
        for s in range(m * batch, (m + 1) * batch):
            trace = golden.forward(network, expected, inputs[s], arith, s)
            _, errors = golden.backward(network, expected, trace, labels[s], arith, s)
            for info in network.weighted_layers:
                x, err = trace.acts[info.position], errors[info.position + 1]
                k, stride, pad = (3, 2, 1) if info.type == "conv2d" else (1, 1, 0)
                wshape = sums[info.name][0].shape
                for kind, shift, j, per_pixel in (
                        (numerics.GRAD_SUM, f.grad_shift, 0,
                         [t.reshape(wshape) for t in pixel_terms(x, err, k, stride, pad)]),
                        (numerics.BIAS_GRAD_SUM, f.bias_grad_shift, 1, list(err.reshape(len(err), -1).T))):
                    total = sums[info.name][j]
                    for q, term in enumerate(per_pixel):
                        r = numerics.grad_noise(f.seed, numerics.tensor_id(info.position, kind), s, [q],
                                                np.arange(total.size).reshape(total.shape))[0]
                        rounded = (term + (r & np.uint64((1 << shift) - 1)).astype(np.int64)) >> shift
                        total = np.clip(total + rounded, -(1 << (grad_bits - 1)), (1 << (grad_bits - 1)) - 1)
                    sums[info.name][j] = total
        step = numerics.lr_constant(lr, batch, f)
        expected = {info.name: tuple(
            numerics.saturate(v - numerics.requantize(g * step, shift, f.seed, numerics.tensor_id(info.position, kind), m))
            for v, g, kind, shift in zip(expected[info.name], sums[info.name],
                                         (numerics.WEIGHT_UPDATE, numerics.BIAS_UPDATE),
                                         (f.weight_update_shift, f.bias_update_shift)))
            for info in network.weighted_layers}
    got, _ = golden.train(network, params, inputs, labels, batch=batch, lr=lr, formats=f)
    exact, _ = golden.train(network, params, inputs, labels, batch=batch, lr=lr)
    for name in got:
        for a, b in zip(got[name], expected[name]):
            assert np.array_equal(a, b)
    assert any(not np.array_equal(a, b) for name in got for a, b in zip(got[name], exact[name]))


def test_32_bit_sums_of_exact_terms_train_as_the_exact_sums():
    """At 32 bits the terms keep all 20 fractional bits: nothing rounds and, at these values,
    nothing saturates, so the run is the exact one bit for bit."""
    network = zoo.get("tiny")
    inputs, labels, params = golden.random_data(network, 4, seed=2)
    a, _ = golden.train(network, params, inputs, labels, batch=2, lr=0.05, formats=Formats(grad_bits=32))
    b, _ = golden.train(network, params, inputs, labels, batch=2, lr=0.05)
    assert all(np.array_equal(x, y) for name in a for x, y in zip(a[name], b[name]) if x is not None)
