"""Golden training model: forward (FP), error back-propagation (EB), weight gradients (PG), SGD.

The single source of truth that ``sim/`` and ``tests/`` compare the hardware with.
Two modes run the same layer code and differ only in an arithmetic object: float64
(no rounding) and fixed point (:class:`FixedArithmetic`), whose rounding points are
the whole fixed-point definition below. Everything exact is done by
:mod:`mapping.tensor_ops`; every rounding by :func:`mapping.numerics.requantize`.

Fixed-point definition (bit for bit what the hardware computes)
---------------------------------------------------------------
Words are 16-bit two's complement (held in int64 arrays); the real value of a word is
``word / 2**frac`` with ``frac`` from :class:`~mapping.numerics.Formats`: activations
``act_frac``, weights ``weight_frac``, biases ``bias_frac``, errors ``error_frac``.
``s`` is the global sample number (0, 1, ...), ``m = s // batch`` its mini-batch,
``p`` the layer's position: its index in ``network.layers`` counting from 0, where every
layer counts (conv2d, relu, maxpool, flatten, linear) and the input image is not a layer
(in zoo.tiny conv1 is 0, relu1 1, pool1 2, conv2 3, ..., fc 7).
``R(acc, shift, kind, n)`` is ``requantize(acc, shift, seed, tensor_id(p, kind), n)``
(mapping/numerics.py: noise, stochastic rounding, saturation to 16 bits) with index = the
element's row-major position in the whole tensor: (OC, OH, OW) for FP_OUT, the layer's
input shape (C, H, W) for EB_OUT, the class number for LOSS_ERROR, the weight array
(OC, IC / G, K, K) or (OUT, IN) for WEIGHT_UPDATE (and GRAD_SUM), the output channel for
BIAS_UPDATE (and BIAS_GRAD_SUM).
A linear layer is a 1x1 convolution (stride 1, no padding) on its (IN, 1, 1) input with
kernels (OUT, IN, 1, 1); its weights (OUT, IN) and their gradients are indexed row-major.
``conv`` (conv_forward), ``conv_backward``, ``conv_weight_grad``, ``bias_grad`` and the max-pool
windows are defined in mapping/tensor_ops.py (cross-correlation, zero padding, stride, groups).

Grouped convolution (a conv2d layer's ``groups`` G > 1, AlexNet's two towers): the weights
are (OC, IC / G, K, K) and output channel o reads only the IC / G input channels of its group
g = o // (OC / G), with w[o, c] the weight of input channel g * (IC / G) + c
(mapping/tensor_ops.py). Every row below holds as written: FP, EB and PG sum exactly over
the group's products only (a product of two channels of different groups is not a zero
term, it does not exist), and every rounding point rounds the same exact sum with the same
noise index as it would the G ordinary convolutions concatenated: FP_OUT and EB_OUT index
the whole (OC, OH, OW) output and (C, H, W) input, GRAD_SUM and WEIGHT_UPDATE the
(OC, IC / G, K, K) weight array, row-major. So a grouped layer is bit for bit the G
ordinary layers of its groups side by side, with the noise of the whole layer's tensors.

  input image        x = quantize(image, act_frac)          round to nearest (ties to even), saturate
  conv/linear FP     y = R(conv(x, W) + (b << act+weight-bias), fp_shift, FP_OUT, s)   (OC, OH, OW)
                     (no bias term for a layer without bias)
                     with narrow partial sums (psum_bits < ACC_BITS) and an ICP layer cut
                     between slices at input channels c_1 < ... < c_k (psum_cuts), conv(x, W)
                     is the clipped running sum of numerics' "Partial sums" over the chunks
                     conv(x restricted to channels [c_j, c_j+1), W), in channel order
  relu FP            max(x, 0)                              exact
  maxpool FP         window maximum, ties -> first in raster order, padding never wins
  flatten            reshape (C, H, W) -> (C*H*W, 1, 1), row-major: (c, h, v) -> c*H*W + h*W + v
  loss error         at the last layer (p its position), onehot = 1 at the label, 0 elsewhere,
                     shape (classes, 1, 1), by ``loss`` (Formats):
                     mse: e = R(y - (onehot << act_frac), loss_shift, LOSS_ERROR, s)
                     ce:  e = R(softmax(y) - (onehot << SOFTMAX_FRAC), loss_shift, LOSS_ERROR, s),
                          softmax bit for bit as numerics.softmax defines it
  relu EB            e where the relu's input word (its FP pre-activation) is > 0, else 0
  maxpool EB         every output error added exactly to its window's argmax (from FP), then
                     each input element's total saturated to 16 bits once
  flatten EB         reshape back to (C, H, W)
  conv/linear EB     R(conv_backward(e, W), eb_shift, EB_OUT, s); not computed for the
                     first weighted layer (nobody consumes it) nor any layer before it
                     with narrow partial sums and an OCP layer cut at output channels
                     c_1 < ... < c_k, the clipped running sum over the chunks
                     conv_backward(e restricted to channels [c_j, c_j+1), W), from the
                     last chunk down to the first
  PG                 G_m = sum over the samples of mini-batch m of conv_weight_grad(x, e)
                     (act+error fractional bits) and of bias_grad(e) (error bits), exact;
                     x is the layer's input as FP produced it, e the (rounded) error of its
                     output; every running sum, like every FP/EB accumulator, must stay within
                     ACC_BITS (else OverflowError naming the layer). With narrow sums
                     (grad_bits < ACC_BITS) each term, a pixel's conv_weight_terms /
                     bias_terms, is rounded into the sum and every add saturates:
                     numerics.accumulate, tensors GRAD_SUM / BIAS_GRAD_SUM, sample s
  update             W = saturate(W - R(G_m * lr_c, weight_update_shift, WEIGHT_UPDATE, m)),
                     b = saturate(b - R(G_m * lr_c, bias_update_shift, BIAS_UPDATE, m)),
                     lr_c = lr_constant(lr, batch); |G_m| < 2**47 and lr_c < 2**16 keep
                     the product inside int64. The step is saturated by R, then W - step again.
  loss (reported)    float64 from the output words, y_c = word_c / 2**act_frac, per sample:
                     mse: 0.5 * sum_c (y_c - onehot_c)**2;
                     ce: t + log(sum_c exp(y_c - t)) - y_label with t = max_c y_c.
                     A report, not hardware bits: summed in numpy's order, so equal to the
                     formula to float64 rounding (the board reports MSE's integer sum of
                     squares, compared with this to 1e-12).

Order of :func:`train`: for s = 0, 1, ...: FP of sample s (with the weight versions below),
its loss and loss error, EB from the last layer down to the first weighted layer and PG,
added to mini-batch m's sums; after the last sample of a mini-batch (s % batch = batch - 1)
the update of mini-batch m. Apart from which weight version each step reads, the order
changes no bit: every R's noise depends only on (tensor, sample or mini-batch, index).

:func:`init_params` and :func:`random_data` are not part of the definition: they make the
tests' and the board host's initial words in Python, which the hardware receives as data.

Float mode is the same with no rounding, no saturation, the exact softmax and
``W -= lr / batch * G_m``.

Weight versions (docs/weight_versions.md, the paper's "slightly unaligned" update)
----------------------------------------------------------------------------------
Version 0 is the initial parameters; version m+1 is version m after the update of
mini-batch m. With ``fp_stale`` = k for a layer, FP of sample s on that layer uses
version ``max(0, (s - k) // batch)`` (its first k samples of each mini-batch were
already in the pipeline before the update landed), EB of sample s uses ``s // batch``
and PG of sample s accumulates into mini-batch ``s // batch``. The masks, argmaxes
and input activations PG and EB use are those FP produced. k = 0 is aligned SGD.

``eb_stale`` = e (every layer) moves EB of sample s to version ``max(0, (s - e) // batch)``;
PG still accumulates into mini-batch ``s // batch`` and each update still starts from the
newest version. e = 1 is the rule of an update that does not stop the engines (EB of a
mini-batch's first sample runs while the update is written to a second copy of the
weights, FP one sample staler: docs/weight_versions.md); the hardware builds it as an option
(``overlapped_update``, ``Mapping.eb_stale``).
"""

from dataclasses import dataclass
import math

import numpy as np

from . import numerics, tensor_ops
from .errors import SpecError
from .numerics import BIAS_GRAD_SUM, BIAS_UPDATE, EB_OUT, FP_OUT, GRAD_SUM, LOSS_ERROR, WEIGHT_UPDATE

MODES = ("fixed", "float")
WEIGHTED_TYPES = ("conv2d", "linear")


class FloatArithmetic:
    """float64: every rounding point is the identity."""

    mode = "float"
    dtype = np.float64
    bias_shift = 0
    psum_cuts = {}  # exact sums: where the slices cut them changes nothing

    def __init__(self, loss="mse"):
        self.loss = loss

    def encode(self, values):
        return np.asarray(values, dtype=np.float64)

    def decode(self, values):
        return values

    def round(self, acc, kind, info, sample):
        return acc

    def saturate(self, values):
        return values

    def loss_error(self, y, onehot, info, sample):
        return (_float_softmax(y) if self.loss == "ce" else y) - onehot

    def check(self, acc, info, what):
        pass

    def partial_sums(self, chunks):
        return sum(chunks[1:], chunks[0])

    def accumulate(self, sums, grads, info, x, err, sample):
        return tuple(None if total is None else total + g for total, g in zip(sums, grads))

    def step(self, lr, batch):
        return lr / batch


class FixedArithmetic:
    """The fixed-point rounding points; see the module docstring for the definition."""

    mode = "fixed"
    dtype = np.int64

    def __init__(self, formats, psum_cuts=None):
        self.formats = f = formats
        # Exact partial sums are the same wherever the slices cut them.
        self.psum_cuts = (psum_cuts or {}) if f.psum_bits < numerics.ACC_BITS else {}
        self.loss = f.loss
        self.bias_shift = f.act_frac + f.weight_frac - f.bias_frac
        self.shifts = {FP_OUT: f.fp_shift, EB_OUT: f.eb_shift, LOSS_ERROR: f.loss_shift,
                       WEIGHT_UPDATE: f.weight_update_shift, BIAS_UPDATE: f.bias_update_shift}

    def encode(self, values):
        """Real inputs to activation words; exact for values on the grid."""
        return numerics.quantize(values, self.formats.act_frac)

    def decode(self, words):
        return numerics.dequantize(words, self.formats.act_frac)

    def round(self, acc, kind, info, sample):
        return numerics.requantize(acc, self.shifts[kind], self.formats.seed,
                                   numerics.tensor_id(info.position, kind), sample)

    def saturate(self, values):
        return numerics.saturate(values)

    def loss_error(self, y, onehot, info, sample):
        f = self.formats
        if self.loss == "ce":
            y, frac = numerics.softmax(y.ravel(), f.act_frac).reshape(y.shape), numerics.SOFTMAX_FRAC
        else:
            frac = f.act_frac
        return self.round(y - (onehot.astype(np.int64) << frac), LOSS_ERROR, info, sample)

    def check(self, acc, info, what):
        # The hardware's accumulators are ACC_BITS wide and never wrap: refuse instead.
        peak = int(np.abs(acc).max(initial=0))
        if peak >= 1 << (numerics.ACC_BITS - 1):
            raise OverflowError(f"layer '{info.name}': {what} accumulator reaches {peak}, beyond "
                                f"the signed {numerics.ACC_BITS}-bit range")

    def partial_sums(self, chunks):
        """The sum of ``chunks`` (exact sums, in the order the slices add them), clipped to
        ``psum_bits`` after every chunk but the last (numerics, "Partial sums")."""
        total = chunks[0]
        for chunk in chunks[1:]:
            total = numerics.saturate(total, self.formats.psum_bits) + chunk
        return total

    def accumulate(self, sums, grads, info, x, err, sample):
        """The gradient sums (dW, db) after one sample, whose exact gradients are ``grads``
        (its input ``x`` and output error ``err`` give the terms a narrow sum rounds)."""
        f = self.formats
        if f.grad_bits == numerics.ACC_BITS:
            new = tuple(None if total is None else total + g for total, g in zip(sums, grads))
            for total in new:
                if total is not None:
                    self.check(total, info, "PG")
            return new
        weights, bias = sums
        stride, padding = conv_geometry(info)
        terms = tensor_ops.conv_weight_terms(x, err, info.kernel if info.type == "conv2d" else 1, stride, padding,
                                             conv_groups(info))
        parts = [(weights, terms.reshape(len(terms), *weights.shape), f.grad_shift, GRAD_SUM)]
        if bias is not None:
            parts.append((bias, tensor_ops.bias_terms(err), f.bias_grad_shift, BIAS_GRAD_SUM))
        return tuple(numerics.accumulate(total, t, shift, f.grad_bits, f.seed, numerics.tensor_id(info.position, kind),
                                         sample, np.arange(total.size).reshape(total.shape))
                     for total, t, shift, kind in parts) + ((None,) if bias is None else ())

    def step(self, lr, batch):
        try:
            return numerics.lr_constant(lr, batch, self.formats)
        except ValueError as error:  # a user's training option, not a bug
            raise SpecError(str(error)) from None


def arithmetic(mode, formats=None, psum_cuts=None):
    """The arithmetic of ``mode``: "fixed" (``formats`` default to ``Formats()``, ``psum_cuts``
    as :func:`train` takes them) or "float"; both apply ``formats.loss``."""
    formats = formats if formats is not None else numerics.Formats()
    if mode == "fixed":
        return FixedArithmetic(formats, psum_cuts)
    if mode == "float":
        return FloatArithmetic(formats.loss)
    raise SpecError(f"golden model: mode '{mode}' is not one of {', '.join(MODES)}")


# --- parameters -------------------------------------------------------------------------

def param_shapes(info):
    """(weight shape, bias shape or None) of a conv2d or linear layer: a conv2d layer of G
    groups has (OC, IC / G, K, K) weights, each output channel's over its group's inputs."""
    if info.type == "conv2d":
        w = (info.out_channels, info.in_channels // info.layer.groups, info.kernel, info.kernel)
    else:
        w = (info.out_channels, info.in_channels)
    return w, ((info.out_channels,) if info.layer.bias else None)


# Scale of the He-normal initial weights. He's full scale puts lr times the largest curvature
# of one sample's loss above the stability bound of the pipelined (stale) update at the
# learning rates the zoo trains with; half of it trains like aligned SGD (docs/numerics.md).
INIT_SCALE = 0.5


def init_params(network, rng, formats=None, scale=INIT_SCALE):
    """He-normal weights times ``scale`` and zero biases; words of ``formats`` when given, else float64."""
    params = {}
    for info in network.weighted_layers:
        wshape, bshape = param_shapes(info)
        fan_in = math.prod(wshape[1:])
        w = rng.normal(0.0, scale * math.sqrt(2.0 / fan_in), wshape)
        params[info.name] = (w, None if bshape is None else np.zeros(bshape))
    return params if formats is None else to_fixed(params, formats)


def _convert(params, weight, bias):
    return {name: (weight(w), None if b is None else bias(b)) for name, (w, b) in params.items()}


def to_fixed(params, formats):
    """Real parameters to words (round to nearest, saturate)."""
    return _convert(params, lambda w: numerics.quantize(w, formats.weight_frac),
                    lambda b: numerics.quantize(b, formats.bias_frac))


def to_float(params, formats):
    """Parameter words to their exact real values."""
    return _convert(params, lambda w: numerics.dequantize(w, formats.weight_frac),
                    lambda b: numerics.dequantize(b, formats.bias_frac))


def _checked_params(network, params, arith):
    """A private copy of ``params`` in the arithmetic's dtype, after checking every shape."""
    where = f"params for network {network.name}"
    names = [info.name for info in network.weighted_layers]
    for name in params:
        if name not in names:
            raise SpecError(f"{where}: '{name}' is not a weighted layer (those are {', '.join(names)})")
    checked = {}
    for info in network.weighted_layers:
        if info.name not in params:
            raise SpecError(f"{where}: layer '{info.name}' is missing")
        pair = params[info.name]
        for value, shape, what in zip(pair, param_shapes(info), ("weights", "bias")):
            if (value is None) != (shape is None):
                raise SpecError(f"{where}: layer '{info.name}' {what} should be "
                                f"{'None' if shape is None else f'an array of shape {shape}'}")
            if value is None:
                continue
            value = np.asarray(value)
            if value.shape != shape:
                raise SpecError(f"{where}: layer '{info.name}' {what} have shape {value.shape}, "
                                f"expected {shape}")
            if arith.mode == "fixed" and (value.dtype.kind not in "iu" or value.size and (
                    value.min() < numerics.WORD_MIN or value.max() > numerics.WORD_MAX)):
                raise SpecError(f"{where}: layer '{info.name}' {what} are not {numerics.WORD_BITS}-bit "
                                f"words (dtype {value.dtype}); convert real values with golden.to_fixed")
        checked[info.name] = tuple(None if v is None else np.array(v, dtype=arith.dtype) for v in pair)
    return checked


# --- one sample -------------------------------------------------------------------------

@dataclass
class Trace:
    """One sample's FP: ``acts[i]`` is the input of layer i, ``acts[-1]`` the network output;
    ``argmax[i]`` the window maxima of maxpool layer i (what the SFU keeps for EB)."""

    acts: list
    argmax: dict

    @property
    def output(self):
        return self.acts[-1]


def as_kernels(w):
    """Linear weights (OUT, IN) as the 1x1 convolution kernels they are."""
    return w if w.ndim == 4 else w[:, :, None, None]


def conv_geometry(info):
    """(stride, padding) of a conv2d or linear layer."""
    return (info.layer.stride, info.layer.padding) if info.type == "conv2d" else (1, 0)


def conv_groups(info):
    """The groups G of a conv2d layer (mapping/tensor_ops.py); 1 for a linear layer."""
    return info.layer.groups if info.type == "conv2d" else 1


def layer_forward(info, x, wb, arith, sample, argmax):
    """FP of one layer: ``x`` its input, ``wb`` its (W, b) or None; a max-pool stores its
    window maxima in ``argmax[info.position]``. What one hardware layer block computes."""
    t = info.type
    if t in WEIGHTED_TYPES:
        w, b = wb
        stride, padding = conv_geometry(info)
        parts = _chunks(x, arith, info, "icp")
        # The bias joins the last slice's sum, which is exact (the hardware adds it in the SFU).
        acc = arith.partial_sums([tensor_ops.conv_forward(part, as_kernels(w), stride, padding,
                                                          b if n == len(parts) - 1 else None, arith.bias_shift,
                                                          conv_groups(info))
                                  for n, part in enumerate(parts)])
        arith.check(acc, info, "FP")
        return arith.round(acc, FP_OUT, info, sample)
    if t == "relu":
        return tensor_ops.relu_forward(x)
    if t == "maxpool":
        layer = info.layer
        y, argmax[info.position] = tensor_ops.maxpool_forward(x, layer.kernel, layer.stride, layer.padding)
        return y
    if t == "flatten":
        return x.reshape(-1, 1, 1)
    raise AssertionError(f"layer type {t} passed check_trainable")


def layer_backward(info, x, err, wb, arith, sample, argmax):
    """EB of one layer: errors of its input ``x`` from the errors ``err`` of its output,
    with ``argmax`` as :func:`layer_forward` filled it."""
    t = info.type
    if t in WEIGHTED_TYPES:
        stride, padding = conv_geometry(info)
        acc = arith.partial_sums([tensor_ops.conv_backward(part, as_kernels(wb[0]), info.in_shape, stride, padding,
                                                           conv_groups(info))
                                  for part in _chunks(err, arith, info, "ocp")[::-1]])
        arith.check(acc, info, "EB")
        return arith.round(acc, EB_OUT, info, sample)
    if t == "relu":
        return tensor_ops.relu_backward(err, x)
    if t == "maxpool":
        # Overlapping windows can route several errors to one input: saturate the sum.
        return arith.saturate(tensor_ops.maxpool_backward(err, argmax[info.position], info.in_shape))
    if t == "flatten":
        return err.reshape(info.in_shape)
    raise AssertionError(f"layer type {t} passed check_trainable")


def _chunks(t, arith, info, mode):
    """``t`` (channels first) as one tensor per slice of layer ``info`` (``arith.psum_cuts``,
    where ``mode`` is the layer's), each zero outside its slice's channels; ``[t]`` uncut."""
    cut_mode, cuts = arith.psum_cuts.get(info.name, (mode, ()))
    if cut_mode != mode or not cuts:
        return [t]
    bounds = (0, *cuts, len(t))
    parts = []
    for lo, hi in zip(bounds, bounds[1:]):
        part = np.zeros_like(t)
        part[lo:hi] = t[lo:hi]
        parts.append(part)
    return parts


def _weight_grads(info, x, err, wb):
    """Exact per-sample gradients (dW, db) of a weighted layer."""
    w, b = wb
    stride, padding = conv_geometry(info)
    dw = tensor_ops.conv_weight_grad(x, err, as_kernels(w).shape[2], stride, padding,
                                     conv_groups(info)).reshape(w.shape)
    return dw, (None if b is None else tensor_ops.bias_grad(err))


def forward(network, params, image, arith, sample):
    """FP of one real-valued image (C, H, W) with ``params`` {layer: (W, b)}."""
    acts, argmax = [arith.encode(image)], {}
    for info in network.layers:
        acts.append(layer_forward(info, acts[-1], params.get(info.name), arith, sample, argmax))
    return Trace(acts, argmax)


def backward(network, params, trace, label, arith, sample):
    """EB and PG of one sample from its FP ``trace``, with ``params`` the EB weights.

    Returns (grads {layer: (dW, db)}, errors) where ``errors[i]`` is the error of
    ``trace.acts[i]`` (None where the model does not compute it).
    """
    layers = network.layers
    first = network.weighted_layers[0].position
    y = trace.output
    onehot = np.zeros(y.shape)
    onehot.flat[label] = 1.0
    errors = [None] * len(layers) + [arith.loss_error(y, onehot, layers[-1], sample)]
    grads = {}
    for info in reversed(layers[first:]):
        x, err = trace.acts[info.position], errors[info.position + 1]
        wb = params.get(info.name)
        if info.type in WEIGHTED_TYPES:
            grads[info.name] = _weight_grads(info, x, err, wb)
        if info.position > first:
            errors[info.position] = layer_backward(info, x, err, wb, arith, sample, trace.argmax)
    return grads, errors


def _float_softmax(y):
    e = np.exp(y - y.max())
    return e / e.sum()


def loss(output, label, arith):
    """The loss of one sample in real units: MSE against one-hot, 0.5 * sum((y - onehot)**2),
    or the cross-entropy -log softmax(y)[label] (computed in float in both modes)."""
    y = arith.decode(output).ravel()
    if arith.loss == "ce":
        top = y.max()
        return float(top + np.log(np.sum(np.exp(y - top))) - y[label])
    onehot = np.zeros(output.size)
    onehot[label] = 1.0
    return 0.5 * float(np.sum((y - onehot) ** 2))


def _sgd_update(network, params, gsums, step, arith, minibatch):
    """Parameters after the update of ``minibatch`` from its gradient sums ``gsums``.

    In fixed mode ``train`` has checked |gsums| < 2**(ACC_BITS-1) = 2**47 and
    lr_constant is < 2**16, so ``g * step`` cannot overflow int64.
    """
    new = {}
    for info in network.weighted_layers:
        pairs = zip(params[info.name], gsums[info.name], (WEIGHT_UPDATE, BIAS_UPDATE))
        new[info.name] = tuple(
            None if v is None else arith.saturate(v - arith.round(g * step, kind, info, minibatch))
            for v, g, kind in pairs)
    return new


# --- training ---------------------------------------------------------------------------

@dataclass
class TrainRecord:
    """Per-sample results of :func:`train`.

    ``loss[s]``: loss of sample s (real units, :func:`loss`). ``fp_version[layer][s]`` and
    ``eb_version[layer][s]``: weight version FP and EB of sample s used on that weighted
    layer (``eb_version`` has no entry for the first weighted layer, which runs no EB).
    """

    loss: np.ndarray
    fp_version: dict
    eb_version: dict
    start: int = 0           # global number of the first sample
    versions: dict = None    # weight versions stale FP may still need: pass to train(resume=...)

    @property
    def next_sample(self):
        return self.start + len(self.loss)


class Diverged(SpecError):
    """Float training produced a non-finite loss: the run cannot continue."""


def _stale_per_layer(network, fp_stale):
    names = [info.name for info in network.weighted_layers]
    if not isinstance(fp_stale, dict):
        fp_stale = dict.fromkeys(names, fp_stale)
    for name, value in fp_stale.items():
        if name not in names:
            raise SpecError(f"fp_stale: '{name}' is not a weighted layer of network {network.name} "
                            f"(those are {', '.join(names)})")
        _check_staleness(value, f"fp_stale of layer '{name}'")
    return {name: int(fp_stale.get(name, 0)) for name in names}


def psum_cuts(slices):
    """The cuts :func:`train` takes from a mapping's layer slices (objects with ``layer``,
    ``mode``, ``in_range`` and ``out_range``, in chain order): {layer: (mode, cuts)} for every
    layer split over two or more slices."""
    by_layer = {}
    for sl in slices:
        by_layer.setdefault(sl.layer, []).append(sl)
    cuts = {}
    for layer, parts in by_layer.items():
        if len(parts) > 1:
            ranges = [sl.in_range if sl.mode == "icp" else sl.out_range for sl in parts]
            cuts[layer] = (parts[0].mode, tuple(lo for lo, _ in ranges[1:]))
    return cuts


def _checked_psum_cuts(network, cuts):
    cuts = dict(cuts or {})
    layers = {info.name: info for info in network.weighted_layers}
    for name, (mode, channels) in cuts.items():
        if name not in layers:
            raise SpecError(f"psum_cuts: {name!r} is not a weighted layer of network {network.name}")
        info = layers[name]
        total = info.in_shape[0] if mode == "icp" else info.out_shape[0] if mode == "ocp" else None
        if total is None:
            raise SpecError(f"psum_cuts: layer {name!r} is cut by mode {mode!r}, not 'icp' or 'ocp'")
        if list(channels) != sorted(set(channels)) or not all(0 < c < total for c in channels):
            raise SpecError(f"psum_cuts: layer {name!r}: cuts {tuple(channels)} are not increasing "
                            f"channels within 1..{total - 1}")
    return cuts


def _check_staleness(value, what):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{what} must be an integer >= 0, got {value!r}")
    return int(value)


def _checked_data(network, inputs, labels, batch):
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    if inputs.ndim != 4 or inputs.shape[1:] != network.input_shape:
        raise SpecError(f"inputs have shape {inputs.shape}; network {network.name} needs "
                        f"(N,) + {network.input_shape}")
    if labels.shape != (len(inputs),) or labels.dtype.kind not in "iu" or labels.size and (
            labels.min() < 0 or labels.max() >= network.num_classes):
        raise SpecError(f"labels must be {len(inputs)} integers in 0..{network.num_classes - 1}")
    if not isinstance(batch, (int, np.integer)) or batch <= 0:
        raise SpecError(f"batch must be a positive integer, got {batch!r}")
    if len(inputs) % batch:
        raise SpecError(f"{len(inputs)} samples are not a whole number of mini-batches of {batch}")
    return inputs, labels


def _zero_grads(params):
    return {name: tuple(None if v is None else np.zeros_like(v) for v in pair)
            for name, pair in params.items()}


def train(network, params, inputs, labels, *, batch, lr, mode="fixed", formats=None, fp_stale=0,
          eb_stale=0, resume=None, psum_cuts=None):
    """Train on ``inputs`` (N, C, H, W) real values, ``labels`` (N,) class numbers, in order.

    ``params`` are words (fixed mode) or real values (float mode), as :func:`init_params`
    returns them; they are not modified. ``fp_stale`` is an int for every weighted
    layer or {layer: int} (missing layers 0), ``eb_stale`` an int: see "Weight versions" above.
    ``psum_cuts``: {layer: (mode, cuts)}, where the slices of a layer split it ("icp": its
    input channels, "ocp": its output channels, cuts the channels where a slice after the first
    begins, increasing), as :func:`psum_cuts` reads them from a mapping; they matter only with
    narrow partial sums (``formats.psum_bits``).
    ``resume``: the :class:`TrainRecord` of the previous call, whose final params
    ``params`` must be: the run continues at its next sample number and weight version
    (the same rounding noise and stale versions as one call over both inputs).
    Returns (final params, :class:`TrainRecord`); float mode raises :class:`Diverged`
    at the first non-finite loss.
    """
    network.check_trainable()
    if not network.weighted_layers:
        raise SpecError(f"network {network.name} has no conv2d or linear layer to train")
    arith = arithmetic(mode, formats, _checked_psum_cuts(network, psum_cuts))
    params = _checked_params(network, params, arith)
    stale = _stale_per_layer(network, fp_stale)
    eb_stale = _check_staleness(eb_stale, "eb_stale")
    inputs, labels = _checked_data(network, inputs, labels, batch)
    step = arith.step(lr, batch)
    first = network.weighted_layers[0].position
    n = len(inputs)
    start = 0 if resume is None else resume.next_sample
    if start % batch:
        raise SpecError(f"resume: sample {start} does not start a mini-batch of {batch}")
    versions = {0: params} if resume is None else dict(resume.versions)  # pruned once no FP needs one
    if resume is not None and not all(np.array_equal(a, b) for name in params for a, b in zip(
            params[name], versions[start // batch][name]) if a is not None):
        raise SpecError("resume: params are not the final params of the run being resumed")
    versions[start // batch] = params
    record = TrainRecord(np.zeros(n), {name: np.zeros(n, dtype=np.int64) for name in stale},
                         {info.name: np.zeros(n, dtype=np.int64)
                          for info in network.weighted_layers if info.position > first}, start)
    gsums = _zero_grads(params)
    for i in range(n):
        s = start + i
        m = s // batch
        # docs/weight_versions.md: FP of the first fp_stale samples of mini-batch m ran before
        # the update of mini-batch m-1 reached the layer; EB uses version m unless eb_stale.
        eb = max(0, (s - eb_stale) // batch)
        fp_params = {}
        for name, k in stale.items():
            version = record.fp_version[name][i] = max(0, (s - k) // batch)
            fp_params[name] = versions[version][name]
        for name in record.eb_version:
            record.eb_version[name][i] = eb
        with np.errstate(over="ignore", invalid="ignore"):
            trace = forward(network, fp_params, inputs[i], arith, s)
            record.loss[i] = loss(trace.output, labels[i], arith)
        if not math.isfinite(record.loss[i]):
            raise Diverged(f"training diverged: the loss of sample {s} is {record.loss[i]}")
        grads, errors = backward(network, versions[eb], trace, labels[i], arith, s)
        for info in network.weighted_layers:
            gsums[info.name] = arith.accumulate(gsums[info.name], grads[info.name], info,
                                                trace.acts[info.position], errors[info.position + 1], s)
        if s % batch == batch - 1:
            versions[m + 1] = _sgd_update(network, versions[m], gsums, step, arith, m)
            gsums = _zero_grads(params)
            oldest = max(0, (s + 1 - max(*stale.values(), eb_stale)) // batch)
            versions = {v: p for v, p in versions.items() if v >= oldest}
    record.versions = versions
    return versions[(start + n) // batch], record


def random_data(network, samples, seed):
    """Random images, labels and initial parameters for ``samples`` samples of ``network``
    (the chain tests and board bring-up train on them)."""
    rng = np.random.default_rng(seed)
    inputs = rng.random((samples, *network.input_shape))
    labels = rng.integers(0, network.num_classes, samples)
    return inputs, labels, init_params(network, rng, numerics.Formats())
