"""The written fixed-point definition is complete: a re-implementation from the docstrings alone.

Everything below the constants uses only what the docstrings of mapping/numerics.py,
mapping/golden.py and mapping/tensor_ops.py state, none of their functions, in plain Python
integers (numpy arrays here only hold them, dtype object, so no int64 or numpy rounding
behaviour is borrowed). It is checked bit for bit against golden.train, golden.forward and
golden.backward (and, for the extremes a training run does not reach, against numerics and
golden's layer functions). A failure after a change to the model means the docstrings no
longer define it: change them, and this file with them. Only data comes from mapping: the
network description (positions are recounted here) and Formats' fields.
"""

from dataclasses import replace
import math

import numpy as np
import pytest

from mapping import golden
from mapping.network import Layer, infer
from mapping.numerics import Formats

# Constants as the docstrings state them.
WORD_BITS, ACC_BITS, MAX_SHIFT = 16, 48, 32
MIX_ROUNDS = ((16, (3, 11)), (13, (5, 19)), (15, (7, 24)), (16, (9, 21)))
MIX_FINAL_XORSHIFT = 16
TENSOR_KINDS = 8
FP_OUT, EB_OUT, WEIGHT_UPDATE, BIAS_UPDATE, LOSS_ERROR = 0, 1, 2, 3, 4
EXP_STEP_BITS, EXP_ONE_BITS, SOFTMAX_FRAC, RECIP_GUARD_BITS = 6, 15, 16, 16
M32 = (1 << 32) - 1


# --- numerics ---------------------------------------------------------------------------

def mix32(x):
    x &= M32
    for t, (a, b) in MIX_ROUNDS:
        x ^= x >> t
        x = (x + (x << a) + (x << b)) & M32
    return x ^ (x >> MIX_FINAL_XORSHIFT)


def stream_key(seed, tensor, sample):
    return mix32(mix32(seed ^ tensor) ^ (sample & M32))


def tensor_id(position, kind):
    return position * TENSOR_KINDS + kind


def saturate(v, bits=WORD_BITS):
    return min(max(v, -(1 << (bits - 1))), (1 << (bits - 1)) - 1)


def requantize(acc, shift, seed, tensor, sample):
    """``acc`` any shape of Python ints; index = row-major position."""
    assert shift <= MAX_SHIFT
    flat = acc.ravel()
    out = np.empty(flat.size, dtype=object)
    key = stream_key(seed, tensor, sample)
    for index, a in enumerate(flat):
        a = int(a)
        if shift > 0:
            r = mix32(key ^ (index & M32)) & ((1 << shift) - 1)
            a = (a + r) >> shift  # Python's >> on ints is floor division: arithmetic
        elif shift < 0:
            a = saturate(a, ACC_BITS) << -shift
        out[index] = saturate(a)
    return out.reshape(acc.shape)


def quantize(values, frac):
    flat = [saturate(round(float(v) * (1 << frac))) for v in np.ravel(values)]  # round: ties to even
    return np.array(flat, dtype=object).reshape(np.shape(values))


def exp_table():
    words, k = [], 0
    while (word := round(math.exp(-k / (1 << EXP_STEP_BITS)) * (1 << EXP_ONE_BITS))) != 0:
        words.append(word)
        k += 1
    return words


EXP_TABLE = exp_table()


def exp_index(d, act_frac):
    sh = act_frac - EXP_STEP_BITS
    return (d + (1 << (sh - 1))) >> sh if sh > 0 else d << -sh


def softmax(scores, act_frac):
    top = max(scores)
    e = [EXP_TABLE[i] if (i := exp_index(top - y, act_frac)) < len(EXP_TABLE) else 0 for y in scores]
    recip = (1 << (SOFTMAX_FRAC + RECIP_GUARD_BITS)) // sum(e)
    return [(ec * recip) >> RECIP_GUARD_BITS for ec in e]


class Shifts:
    def __init__(self, f):
        self.fp = self.eb = f.weight_frac
        self.weight_update = f.act_frac + f.error_frac + f.lr_frac - f.weight_frac
        self.bias_update = f.error_frac + f.lr_frac - f.bias_frac
        self.loss = (f.act_frac if f.loss == "mse" else SOFTMAX_FRAC) - f.error_frac
        self.bias_align = f.act_frac + f.weight_frac - f.bias_frac


# --- tensor operations (loops over Python ints) ------------------------------------------

def zeros(shape):
    return np.zeros(shape, dtype=object)  # object zeros are Python ints


def out_size(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def taps(h, w, k, s, p, r, q):
    """(i, j, input row, input col) of window (r, q) that fall inside the unpadded input."""
    for i in range(k):
        for j in range(k):
            row, col = r * s + i - p, q * s + j - p
            if 0 <= row < h and 0 <= col < w:
                yield i, j, row, col


def group_inputs(o, o_n, c_in, groups):
    """(c, input channel) pairs output ``o`` reads: c < IC / G, channel g(o) * IC / G + c."""
    cg = c_in // groups
    g = o // (o_n // groups)
    return [(c, g * cg + c) for c in range(cg)]


def conv_forward(x, w, s, p, bias, bias_shift, groups):
    c_in, h, wd = x.shape
    o_n, _, k, _ = w.shape
    y = zeros((o_n, out_size(h, k, s, p), out_size(wd, k, s, p)))
    for o in range(o_n):
        for r in range(y.shape[1]):
            for q in range(y.shape[2]):
                acc = sum(x[ch, row, col] * w[o, c, i, j]
                          for i, j, row, col in taps(h, wd, k, s, p, r, q)
                          for c, ch in group_inputs(o, o_n, c_in, groups))
                y[o, r, q] = acc + (0 if bias is None else bias[o] << bias_shift)
    return y


def conv_backward(err, w, in_shape, s, p, groups):
    dx = zeros(in_shape)
    _, h, wd = in_shape
    k = w.shape[2]
    for o, r, q in np.ndindex(err.shape):
        for i, j, row, col in taps(h, wd, k, s, p, r, q):
            for c, ch in group_inputs(o, err.shape[0], in_shape[0], groups):
                dx[ch, row, col] += err[o, r, q] * w[o, c, i, j]
    return dx


def conv_weight_grad(x, err, k, s, p, groups):
    dw = zeros((err.shape[0], x.shape[0] // groups, k, k))
    for o, r, q in np.ndindex(err.shape):
        for i, j, row, col in taps(x.shape[1], x.shape[2], k, s, p, r, q):
            for c, ch in group_inputs(o, err.shape[0], x.shape[0], groups):
                dw[o, c, i, j] += err[o, r, q] * x[ch, row, col]
    return dw


def maxpool_forward(x, k, s, p):
    c_n, h, w = x.shape
    y = zeros((c_n, out_size(h, k, s, p), out_size(w, k, s, p)))
    arg = zeros(y.shape)
    for c, r, q in np.ndindex(y.shape):
        best = None
        for _, _, row, col in taps(h, w, k, s, p, r, q):  # raster order; padding never wins
            if best is None or x[c, row, col] > best:  # strict: the first maximum wins
                best, arg[c, r, q] = x[c, row, col], row * w + col
        y[c, r, q] = best
    return y, arg


def maxpool_backward(err, arg, in_shape):
    dx = zeros((in_shape[0], in_shape[1] * in_shape[2]))
    for c, r, q in np.ndindex(err.shape):
        dx[c, arg[c, r, q]] += err[c, r, q]
    return np.vectorize(saturate, otypes=[object])(dx).reshape(in_shape)


def kernels(info, w):
    """Conv weights as they are, linear (OUT, IN) as (OUT, IN, 1, 1) kernels."""
    return w if info.type == "conv2d" else w.reshape(*w.shape, 1, 1)


def geometry(info):
    return (info.layer.stride, info.layer.padding) if info.type == "conv2d" else (1, 0)


def groups_of(info):
    return info.layer.groups if info.type == "conv2d" else 1


# --- training ---------------------------------------------------------------------------

def restricted(t, lo, hi):
    part = zeros(t.shape)
    part[lo:hi] = t[lo:hi]
    return part


def clipped_sum(chunks, bits):
    """numerics' "Partial sums": saturated to ``bits`` after every chunk but the last."""
    total = chunks[0]
    for chunk in chunks[1:]:
        total = np.vectorize(lambda v: saturate(v, bits), otypes=[object])(total) + chunk
    return total


def chunks_of(t, cuts, name, mode, f):
    """``t`` restricted to each slice's channels where the layer is cut by ``mode`` and the
    partial sums are narrow, in channel order; ``[t]`` otherwise."""
    cut_mode, channels = cuts.get(name, (mode, ()))
    if f.psum_bits == ACC_BITS or cut_mode != mode or not channels:
        return [t]
    bounds = (0, *channels, t.shape[0])
    return [restricted(t, lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def forward(network, params, image, f, sample, cuts):
    sh = Shifts(f)
    acts, args = [quantize(image, f.act_frac)], {}
    for position, info in enumerate(network.layers):
        x = acts[-1]
        if info.type in ("conv2d", "linear"):
            w, b = params[info.name]
            s, p = geometry(info)
            acc = clipped_sum([conv_forward(part, kernels(info, w), s, p, None, 0, groups_of(info))
                               for part in chunks_of(x, cuts, info.name, "icp", f)], f.psum_bits)
            if b is not None:
                acc = acc + np.array([[[int(v) << sh.bias_align]] for v in b], dtype=object)
            y = requantize(acc, sh.fp, f.seed, tensor_id(position, FP_OUT), sample)
        elif info.type == "relu":
            y = np.vectorize(lambda v: max(v, 0), otypes=[object])(x)
        elif info.type == "maxpool":
            y, args[position] = maxpool_forward(x, info.layer.kernel, info.layer.stride, info.layer.padding)
        else:  # flatten, row-major
            y = x.reshape(-1, 1, 1)
        acts.append(y)
    return acts, args


def loss_error(y, label, f, position, sample):
    onehot = [int(c == label) for c in range(y.size)]
    scores = [int(v) for v in y.ravel()]
    if f.loss == "ce":
        acc = [pc - (oc << SOFTMAX_FRAC) for pc, oc in zip(softmax(scores, f.act_frac), onehot)]
    else:
        acc = [yc - (oc << f.act_frac) for yc, oc in zip(scores, onehot)]
    return requantize(np.array(acc, dtype=object).reshape(y.shape), Shifts(f).loss, f.seed,
                      tensor_id(position, LOSS_ERROR), sample)


def reported_loss(y, label, f):
    real = [int(v) / (1 << f.act_frac) for v in y.ravel()]
    if f.loss == "ce":
        top = max(real)
        return top + math.log(math.fsum(math.exp(v - top) for v in real)) - real[label]
    return 0.5 * math.fsum((v - (c == label)) ** 2 for c, v in enumerate(real))


def backward(network, params, acts, args, label, f, sample, cuts):
    """(grads {layer: (dW, db)}, errors) with errors[i] the error of acts[i] (None if not computed)."""
    sh = Shifts(f)
    layers = network.layers
    weighted = [i for i, info in enumerate(layers) if info.type in ("conv2d", "linear")]
    errors = [None] * len(layers) + [loss_error(acts[-1], label, f, len(layers) - 1, sample)]
    grads = {}
    for position in range(len(layers) - 1, weighted[0] - 1, -1):
        info, x, err = layers[position], acts[position], errors[position + 1]
        if info.type in ("conv2d", "linear"):
            w, b = params[info.name]
            s, p = geometry(info)
            k = kernels(info, w).shape[2]
            grads[info.name] = (conv_weight_grad(x, err, k, s, p, groups_of(info)).reshape(w.shape),
                                None if b is None else err.sum(axis=(1, 2)))
        if position == weighted[0]:
            break  # nobody consumes the first weighted layer's input error
        if info.type in ("conv2d", "linear"):
            s, p = geometry(info)
            acc = clipped_sum([conv_backward(part, kernels(info, params[info.name][0]), x.shape, s, p, groups_of(info))
                               for part in chunks_of(err, cuts, info.name, "ocp", f)[::-1]], f.psum_bits)
            dx = requantize(acc, sh.eb, f.seed, tensor_id(position, EB_OUT), sample)
        elif info.type == "relu":
            dx = np.where(np.vectorize(lambda v: v > 0)(x), err, 0).astype(object)
        elif info.type == "maxpool":
            dx = maxpool_backward(err, args[position], x.shape)
        else:
            dx = err.reshape(x.shape)
        errors[position] = dx
    return grads, errors


def sgd_update(network, params, gsums, lr_c, f, minibatch):
    sh = Shifts(f)
    new = {}
    for position, info in enumerate(network.layers):
        if info.name not in params:
            continue
        shifts_kinds = ((sh.weight_update, WEIGHT_UPDATE), (sh.bias_update, BIAS_UPDATE))
        new[info.name] = tuple(
            None if v is None else np.vectorize(saturate, otypes=[object])(
                v - requantize(g * lr_c, shift, f.seed, tensor_id(position, kind), minibatch))
            for v, g, (shift, kind) in zip(params[info.name], gsums[info.name], shifts_kinds))
    return new


def train(network, params, inputs, labels, batch, lr, f, fp_stale, cuts):
    """Yields per sample (s, FP params, EB params, acts, errors, grads, loss); returns the final params."""
    lr_c = round(lr / batch * (1 << f.lr_frac))  # Python's round: ties to even
    assert 0 < lr_c < 1 << 16
    versions = {0: params}
    gsums = {name: tuple(None if v is None else zeros(v.shape) for v in pair) for name, pair in params.items()}
    for s, (image, label) in enumerate(zip(inputs, labels)):
        m = s // batch
        fp_params = {name: versions[max(0, (s - fp_stale.get(name, 0)) // batch)][name] for name in params}
        acts, args = forward(network, fp_params, image, f, s, cuts)
        grads, errors = backward(network, versions[m], acts, args, label, f, s, cuts)
        yield s, fp_params, versions[m], acts, errors, grads, reported_loss(acts[-1], label, f)
        for name, pair in grads.items():
            gsums[name] = tuple(None if t is None else t + g for t, g in zip(gsums[name], pair))
        if s % batch == batch - 1:
            versions[m + 1] = sgd_update(network, versions[m], gsums, lr_c, f, m)
            gsums = {name: tuple(None if v is None else zeros(v.shape) for v in pair)
                     for name, pair in params.items()}
    return versions[len(inputs) // batch]


# --- the check --------------------------------------------------------------------------

def network(groups=1):
    """Every trainable layer kind: a strided, padded conv with EB (conv2, bias-less, of
    ``groups`` groups), a pool whose last row and column no window reads, an overlapping
    padded pool, flatten, linear."""
    def conv(name, out, k, stride, pad, bias=True, groups=1):
        return Layer("conv2d", name, out_channels=out, kernel=k, stride=stride, padding=pad, bias=bias,
                     groups=groups)
    return infer("definition" if groups == 1 else f"definition-g{groups}", (1, 10, 10), [
        conv("conv1", 4, 3, 1, 1), Layer("relu", "relu1"),
        conv("conv2", 4, 3, 2, 1, bias=False, groups=groups), Layer("relu", "relu2"),  # (4, 5, 5)
        Layer("maxpool", "pool1", kernel=2, stride=2),                      # (4, 2, 2)
        Layer("maxpool", "pool2", kernel=3, stride=1, padding=1),           # (4, 2, 2)
        Layer("flatten", "flatten"), Layer("linear", "fc1", out_channels=6), Layer("relu", "relu3"),
        Layer("linear", "fc2", out_channels=3),
    ])


def random_words(rng, shape, scale):
    return np.round(rng.normal(0, scale, shape)).astype(np.int64)


def to_objects(params):
    return {name: tuple(None if v is None else v.astype(object) for v in pair) for name, pair in params.items()}


def as_words(params):
    return {name: tuple(None if v is None else v.astype(np.int64) for v in pair) for name, pair in params.items()}


def same(ours, theirs):
    if ours is None or theirs is None:
        return ours is None and theirs is None
    return ours.shape == theirs.shape and all(int(a) == int(b) for a, b in zip(ours.ravel(), theirs.ravel()))


# Layers cut between slices, for the narrow partial sums: conv2 and fc2 by output channels
# (their EB sums, from the last channels back), fc1 by input channels (its FP sums).
CUTS = {"conv2": ("ocp", (1,)), "fc1": ("icp", (8,)), "fc2": ("ocp", (1,))}


@pytest.mark.parametrize("formats, groups, cuts, gain", [
    (Formats(), 1, {}, 1),                                                  # MSE: loss error shifted left 4
    (Formats(loss="ce"), 1, {}, 1),                                         # exp_index rounds 2 bits, ties up
    (Formats(act_frac=5, error_frac=11, seed=12345, loss="ce"), 1, {}, 1),  # exp_index shifts left
    (Formats(act_frac=10, error_frac=9, seed=7, loss="mse"), 1, {}, 1),     # MSE error rounded stochastically
    (Formats(), 2, {}, 1),                                                  # conv2 grouped: two towers
    (Formats(loss="ce", seed=5), 4, {}, 1),                                 # conv2 one channel per group
    # 32-bit partial sums: weights twice the usual, activations with 14 fractional bits and fc1's
    # weights -max on its first slice's inputs and +max on its second's, so that its sums leave the
    # first slice clipped and the second brings them back into range
    (Formats(act_frac=14, psum_bits=32), 1, CUTS, 2),
], ids=["mse", "ce", "ce-act5", "mse-act10", "groups2", "groups4", "psum32"])
def test_the_docstrings_reimplemented_train_bit_for_bit_like_the_golden_model(formats, groups, cuts, gain):
    net, rng = network(groups), np.random.default_rng(3)
    samples, batch, lr, fp_stale = 6, 2, 0.1, {"conv2": 1, "fc2": 2}
    # Inputs on a grid of 2**-(act_frac + 1): half of them are exact rounding ties.
    inputs = rng.integers(0, 1 << (formats.act_frac + 1), (samples, 1, 10, 10)) / (1 << (formats.act_frac + 1))
    labels = rng.integers(0, 3, samples)
    params = {}
    for info in net.weighted_layers:
        k = info.layer.kernel if info.type == "conv2d" else None
        w = (info.out_channels, info.in_channels // groups_of(info)) + ((k, k) if k else ())
        b = (info.out_channels,) if info.layer.bias else None
        scale = gain * 0.7 * math.sqrt(2 / math.prod(w[1:])) * (1 << formats.weight_frac)
        params[info.name] = (np.clip(random_words(rng, w, scale), -(1 << 15), (1 << 15) - 1),
                             None if b is None else random_words(rng, b, 0.1 * (1 << formats.bias_frac)))
    if cuts:
        w, b = params["fc1"]
        row = np.where(np.arange(w.shape[1]) < cuts["fc1"][1][0], -1, 1) * ((1 << (WORD_BITS - 1)) - 1)
        params["fc1"] = (np.tile(row, (w.shape[0], 1)), b)

    want, record = golden.train(net, params, inputs, labels, batch=batch, lr=lr, formats=formats,
                                fp_stale=fp_stale, psum_cuts=cuts)
    arith = golden.arithmetic("fixed", formats, cuts)
    run = train(net, to_objects(params), inputs, labels, batch, lr, formats, fp_stale, cuts)
    while True:
        try:
            s, fp_params, eb_params, acts, errors, grads, loss = next(run)
        except StopIteration as stop:
            final = stop.value
            break
        # Every tensor of the sample, against the golden model run on the same weights.
        trace = golden.forward(net, as_words(fp_params), inputs[s], arith, s)
        for i, (ours, theirs) in enumerate(zip(acts, trace.acts)):
            assert same(ours, theirs), f"sample {s}: FP output of layer {i - 1} differs"
        their_grads, their_errors = golden.backward(net, as_words(eb_params), trace, labels[s], arith, s)
        for i, (ours, theirs) in enumerate(zip(errors, their_errors)):
            assert same(ours, theirs), f"sample {s}: error of layer {i}'s input differs"
        for name, pair in grads.items():
            assert all(same(a, b) for a, b in zip(pair, their_grads[name])), f"sample {s}: PG of {name}"
        assert loss == pytest.approx(record.loss[s], rel=1e-12, abs=1e-15), f"sample {s}: loss"
    for name, pair in final.items():
        assert all(same(a, b) for a, b in zip(pair, want[name])), f"final params of {name} differ"
    # The updates changed the weights, so the comparison covered them.
    assert any(not np.array_equal(want[name][0], params[name][0]) for name in params)
    if cuts:  # and some partial sum was clipped: exact ones train otherwise
        _, exact = golden.train(net, params, inputs, labels, batch=batch, lr=lr,
                                formats=replace(formats, psum_bits=ACC_BITS), fp_stale=fp_stale)
        assert (record.loss != exact.loss).any()


def test_the_docstrings_constants_and_rounding_edges():
    """What a training run may not reach: the written table, hash values and requantize's
    extremes (a clip to ACC_BITS before a left shift, the widest noise, negative ties)."""
    from mapping import numerics  # the definition under test, compared with, not used

    assert tuple(EXP_TABLE) == numerics.EXP_TABLE and len(EXP_TABLE) == 710
    assert [mix32(x) for x in (0, 1)] == [0, 591172105]
    assert round(0.5) == 0 and round(1.5) == 2 and round(-2.5) == -2  # ties to even, as written
    reals = [0.5, 1.5, -2.5, -0.5, 1e9]
    assert list(quantize(reals, 0)) == list(numerics.quantize(reals, 0))
    accs = np.array([-(1 << 50), -(1 << 47) - 1, -5, -4, -3, -1, 0, 1, 3, 1 << 20, (1 << 47) + 5, 1 << 50],
                    dtype=object)
    for shift in (-16, -4, -1, 0, 1, 2, 13, 24, 32):
        want = numerics.requantize(accs.astype(np.int64), shift, 99, 77, 5)
        assert same(requantize(accs, shift, 99, 77, 5), want), f"shift {shift}"
    # Max pool: equal inputs (the first cell wins every window), four windows route to one
    # cell, and the total saturates once: 20000 + 20000 - 20000 + 5, not 32767 - 20000 + 5.
    net, arith = network(), golden.arithmetic("fixed")
    pool = net["pool2"]
    for errs in ([20000, 20000, -20000, 5], [20000, 20000, 20000, -100]):
        x, err, argmax = np.full(pool.in_shape, 7), np.resize(errs, pool.out_shape), {}
        y = golden.layer_forward(pool, x, None, arith, 0, argmax)
        ours_y, ours_arg = maxpool_forward(x.astype(object), 3, 1, 1)
        assert same(ours_y, y) and not ours_arg.any()
        assert same(maxpool_backward(err.astype(object), ours_arg, pool.in_shape),
                    golden.layer_backward(pool, x, err, None, arith, 0, argmax))
    for act_frac in (4, 6, 8, 11):
        scores = [int(v) for v in np.random.default_rng(act_frac).integers(-3000, 3000, 10)]
        assert softmax(scores, act_frac) == [int(p) for p in numerics.softmax(scores, act_frac)]
