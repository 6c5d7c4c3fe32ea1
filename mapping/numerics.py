"""Fixed-point numerics shared bit for bit by the golden model and the hardware.

Bit layout
----------
Every stored tensor element is a 16-bit two's-complement word (``WORD_BITS``).
Its real value is ``word / 2**frac`` where ``frac`` depends on the tensor kind
(:class:`Formats`): activations, weights, biases and errors each have their own.

Products of two words are exact (``fa + fb`` fractional bits) and are summed
exactly in accumulators of ``ACC_BITS`` bits; the mapping refuses any layer
whose worst-case sum could exceed that width, so accumulation never wraps and
never saturates, and the sum is the same whatever order the hardware adds in.

Partial sums (the running sums that pass from one slice of a layer to the next: an ICP
layer's forward sums, over the input channels of the slices so far, and an OCP layer's
input-error sums, over the output channels of the slices from the last one back) travel at
``Formats.psum_bits`` (:data:`PSUM_BITS`). At ``ACC_BITS`` they are exact. At 32 every
partial sum is saturated to the signed 32-bit range as it leaves its slice (a clip, no
rounding: the low bits are kept), and the next slice adds its own exact sum to the clipped
value; the last slice's sum is exact again. In flow order, with ``chunk_k`` the exact sum
over slice k's channels (FP: input channels in increasing order; EB: output channels from the
last slice's down to the first's):

    running = saturate(... saturate(saturate(chunk_0, 32) + chunk_1, 32) ..., 32) + chunk_last

So the cuts between slices (the mapping's, ``golden.psum_cuts``) are part of the definition,
but a clip changes a result only where a partial sum reaches ``2**31`` (2048 in real units
with the default 8 + 12 fractional bits, where a complete sum already saturates the 16-bit
output 16 times over) and later channels bring it back. A grouped layer's sums of the groups
that end before a cut also cross it, clipped the same way.

An accumulator goes back to a 16-bit word in exactly one place per tensor,
with :func:`requantize` (stochastic rounding, ``floor((acc + r) / 2**shift)`` with
``r`` uniform in ``[0, 2**shift)``, then saturation to the 16-bit range). Exactly:

- ``shift > 0`` (at most ``MAX_SHIFT`` = 32): ``r`` is the low ``shift`` bits of the
  32-bit noise word, ``r = noise(seed, tensor, sample, index) & (2**shift - 1)``; ``r`` is
  added to the exact wide accumulator, the sum is shifted right arithmetically by
  ``shift`` (floor division by ``2**shift``, towards minus infinity) and the result is
  saturated to ``[WORD_MIN, WORD_MAX]`` = ``[-32768, 32767]``.
- ``shift == 0``: saturation only (no noise).
- ``shift < 0``: no noise; the accumulator is first clipped to the signed ``ACC_BITS``
  range ``[-2**47, 2**47 - 1]``, then multiplied by ``2**-shift`` exactly, then saturated
  to 16 bits. (The clip changes no result, both saturate; it keeps the product of this
  module's int64 arithmetic exact, and :class:`Formats` refuses any shift below
  ``-MAX_LEFT_SHIFT`` = -15, where a clipped accumulator's product would no longer fit
  int64. Of the default formats' shifts only MSE's loss error is negative, -4.)

The noise is a stateless function of ``(seed, tensor_id, sample, index)``
(:func:`noise`), where ``index`` is the element's row-major position in the whole
tensor of one sample (global channel numbers, never a slice's local ones) and
``sample`` is the global sample number (for weight updates: the mini-batch
number). Hardware that visits elements in any order, on any node, draws the same
noise as the golden model.

Hash, key and noise, exactly (every value an unsigned 32-bit integer, every ``>>`` a
logical shift, every ``^`` a bitwise xor):

- ``mix32(x)``: ``x = x mod 2**32``; then for each ``(t, (a, b))`` of ``MIX_ROUNDS`` =
  ``((16, (3, 11)), (13, (5, 19)), (15, (7, 24)), (16, (9, 21)))``, in that order:
  ``x = x ^ (x >> t)``, then ``x = (x + (x << a) + (x << b)) mod 2**32`` (that is
  ``x * (1 + 2**a + 2**b) mod 2**32``); finally ``x ^ (x >> 16)`` (``MIX_FINAL_XORSHIFT``),
  with no further round. ``mix32(0) = 0``, ``mix32(1) = 591172105``.
- ``stream_key(seed, tensor, sample) = mix32(mix32(seed ^ tensor) ^ (sample mod 2**32))``,
  the seed and tensor id taken modulo 2**32 by the inner ``mix32``.
- ``noise(seed, tensor, sample, index) = mix32(stream_key(seed, tensor, sample) ^ (index mod 2**32))``.
- ``tensor_id(position, kind) = position * TENSOR_KINDS + kind`` with ``TENSOR_KINDS`` = 8
  and the kinds ``FP_OUT`` = 0 (a layer's forward output), ``EB_OUT`` = 1 (the error of
  its input), ``WEIGHT_UPDATE`` = 2, ``BIAS_UPDATE`` = 3, ``LOSS_ERROR`` = 4 (5..7 unused);
  ``position`` is the layer's index in the network's list of layers (mapping/golden.py).

The hash is built from xorshifts and multiplications by constants with three set
bits, so a hardware rounding unit needs only adders: :func:`mix32` is the
specification the Amaranth unit implements.

Conversions from real values (round to nearest, ties to even, as ``numpy.round`` and
Python's ``round`` do on float64):

- :func:`quantize`: ``saturate(round_half_even(value * 2**frac))``;
- :func:`lr_constant`: ``round_half_even(lr / batch * 2**lr_frac)`` (``lr / batch`` in
  float64 first), refused unless in ``1 .. 2**16 - 1``.

Fixed-point softmax (:func:`softmax`, the CE loss error), on one sample's score words
``y_c`` (activation format):

- ``EXP_TABLE[k] = round_half_even(exp(-k / 64) * 2**15)`` in float64 for ``k = 0, 1, ...``
  up to and excluding the first ``k`` whose word is 0: 710 words, ``EXP_TABLE[0] = 32768``,
  ``EXP_TABLE[709] = 1`` (no word is within 0.0009 of a tie, so any faithfully rounded
  ``exp`` gives the same table);
- ``exp_index(d) = (d + 2**(sh - 1)) >> sh`` (nearest, ties up) with
  ``sh = act_frac - EXP_STEP_BITS`` = ``act_frac - 6`` when ``sh > 0``, else ``d << -sh``;
- ``d_c = max(y) - y_c``; ``e_c = EXP_TABLE[exp_index(d_c)]``, or 0 when the index is past
  the table (>= 710); ``S = sum(e_c)`` exactly (at least 2**15, the maximum's word);
  ``recip = 2**32 // S`` (``SOFTMAX_FRAC + RECIP_GUARD_BITS`` = 16 + 16);
  ``p_c = (e_c * recip) >> 16``, ``p`` with ``SOFTMAX_FRAC`` = 16 fractional bits.

Gradient sums (LGB, BGB)
------------------------
A weight's gradient over a mini-batch is a sum of terms, one per output pixel of every
sample: ``err[o] * x[c][window]`` (``act_frac + error_frac`` fractional bits) for a
weight, ``err[o]`` (``error_frac``) for a bias. ``Formats.grad_bits`` is the width of the
running sums. At ``ACC_BITS`` (the default) they are exact, as above. Narrower
(:data:`GRAD_BITS`), each term is rounded stochastically to the sums' ``grad_frac``
(``bias_grad_frac``) fractional bits as it is added, and every add saturates to
``grad_bits`` (:func:`accumulate`):

    sum = saturate(sum + ((term + r) >> shift), grad_bits)

in the order the terms arrive: samples in order, within a sample the output pixels in
raster order. ``shift`` is the difference of the fractional bits; the noise ``r`` is the
low ``shift`` bits of ``noise(seed, tensor_id(p, GRAD_SUM or BIAS_GRAD_SUM), s, pixel)
XOR ((index * GRAD_SCRAMBLE) mod 2**32)`` (:func:`grad_noise`), with ``pixel`` the
output pixel's row-major position (0 for a fully connected layer) and ``index`` the
weight's (bias's) row-major position in the whole layer tensor. One hash per pixel
serves every weight of a beat; each weight's own noise, over the pixels and samples it
sums, is that hash XOR a constant, so every weight is rounded without bias while the
hardware adds only an XOR and a short adder per term to the hash it already has per beat.
Saturation (instead of a refusal, as for the exact sums) clips an outsized gradient the
way gradient clipping would; the mapping sizes ``grad_frac`` so that it is rare
(docs/numerics.md).
"""

from dataclasses import dataclass, asdict

import numpy as np

WORD_BITS = 16
WORD_MIN = -(1 << (WORD_BITS - 1))
WORD_MAX = (1 << (WORD_BITS - 1)) - 1
ACC_BITS = 48
MAX_SHIFT = 32  # noise words are 32 bits wide
MAX_LEFT_SHIFT = 63 - ACC_BITS  # requantize shifts a clipped ACC_BITS value left inside int64

_M32 = np.uint64(0xFFFFFFFF)

# (xorshift, (shift-add terms)) rounds of mix32; each multiplier is 1 + 2**a + 2**b.
# Three rounds left the noise of elements i and i + 2 correlated (0.27 on bits 16..23, the
# weight update's top noise byte); the fourth brings every lag 1..64 and every window a
# rounding shift uses to the level of sampling noise (tests/test_numerics.py).
MIX_ROUNDS = ((16, (3, 11)), (13, (5, 19)), (15, (7, 24)), (16, (9, 21)))
MIX_FINAL_XORSHIFT = 16

# Tensor kinds inside a tensor id: tensor_id = layer_position * TENSOR_KINDS + kind.
FP_OUT, EB_OUT, WEIGHT_UPDATE, BIAS_UPDATE, LOSS_ERROR, GRAD_SUM, BIAS_GRAD_SUM = range(7)
TENSOR_KINDS = 8

# Widths of the gradient sums; ACC_BITS is exact, the others round each term (module docstring).
GRAD_BITS = (16, 24, 32, ACC_BITS)
# Widths of the partial sums between the slices of a layer; ACC_BITS is exact, 32 saturates
# (module docstring). Narrower ones would have to round: the link traffic they would save is
# measured in docs/numerics.md.
PSUM_BITS = (32, ACC_BITS)
# Integer bits (sign included) a narrow sum keeps by default: its fractional bits are the
# rest, at most the terms' own (docs/numerics.md has the gradients' measured range).
GRAD_INT_BITS = 8
# Odd multiplier that spreads a weight's index over the noise bits (2**32 / golden ratio).
GRAD_SCRAMBLE = 0x9E3779B1

# Losses of the last layer: MSE on the raw scores, or softmax cross-entropy (:func:`softmax`).
LOSSES = ("mse", "ce")

# Fixed-point softmax (:func:`softmax`). The exponent table is indexed by the score's distance
# below the maximum in steps of 2**-EXP_STEP_BITS: 6 bits keep the table in one 1024-word
# block RAM (710 words) and p within 0.4% of float softmax (docs/numerics.md).
EXP_STEP_BITS = 6
EXP_ONE_BITS = 15      # table words are unsigned, e^0 = 2**15
SOFTMAX_FRAC = 16      # fractional bits of p, before the loss error's stochastic rounding
RECIP_GUARD_BITS = 16  # recip = floor(2**(SOFTMAX_FRAC + RECIP_GUARD_BITS) / sum): p is off by < 1 LSB


def _exp_table():
    k = np.arange(1 << (EXP_ONE_BITS + 1))  # ends long after e^-k rounds to 0
    words = np.round(np.exp(-k / (1 << EXP_STEP_BITS)) * (1 << EXP_ONE_BITS)).astype(np.int64)
    return tuple(int(w) for w in words[:np.argmax(words == 0)])


# EXP_TABLE[k] = round(2**15 * e^(-k / 2**EXP_STEP_BITS)), ties to even, for every k it is
# nonzero; 0 beyond.
EXP_TABLE = _exp_table()


def exp_index(distance, act_frac):
    """Table index of a score ``distance`` (activation words) below the maximum, rounded to
    nearest (ties up) on the table's grid; an index past the table reads 0."""
    shift = act_frac - EXP_STEP_BITS
    if shift > 0:
        return (distance + (1 << (shift - 1))) >> shift
    return distance << -shift


def softmax(scores, act_frac):
    """Fixed-point softmax of one sample's score words: p with SOFTMAX_FRAC fractional bits.

    ``e_c = EXP_TABLE[exp_index(max - y_c)]`` (0 past the table; the maximum's is 2**15, so the
    sum ``S`` is at least 2**15), ``recip = floor(2**32 / S)``, ``p_c = (e_c * recip) >> 16``;
    every step exact in integers, so 0 <= p_c <= 2**16 (hw/node/loss.py computes the same).
    """
    scores = np.asarray(scores, dtype=np.int64)
    index = exp_index(scores.max() - scores, act_frac)
    table = np.array(EXP_TABLE + (0,), dtype=np.int64)
    e = table[np.minimum(index, len(EXP_TABLE))]
    recip = (1 << (SOFTMAX_FRAC + RECIP_GUARD_BITS)) // int(e.sum())
    return (e * recip) >> RECIP_GUARD_BITS


@dataclass(frozen=True)
class Formats:
    """Fractional bits of each tensor kind, and the rounding seed.

    Defaults, and why:
    - activations Q7.8: inputs are in [0, 1) and post-ReLU activations of the zoo's
      nets stay well inside +-128 while 1/256 resolution keeps small activations;
    - weights Q3.12: He-initialised weights are |w| < 1 almost always, +-8 leaves
      room for growth during training, 2**-12 resolves small updates with SR;
    - biases Q3.12, the same reasoning;
    - errors Q3.12: MSE errors start in [-1, 1] and shrink going backwards;
      stochastic rounding keeps the small ones unbiased;
    - learning-rate constants (lr / batch) are unsigned 16-bit with 16 fractional
      bits, so rates down to 2**-16 per sample are representable.

    ``loss`` (one of LOSSES) sets the last layer's loss, and so the loss error's rounding.

    ``psum_bits`` (one of PSUM_BITS) is the width of the partial sums between slices
    (module docstring, "Partial sums").

    ``grad_bits`` (one of GRAD_BITS) is the width of the gradient sums, ``grad_frac`` and
    ``bias_grad_frac`` their fractional bits (module docstring, "Gradient sums"). None
    takes the default: the terms' own fractional bits (exact) at ACC_BITS, else as many as
    ``grad_bits - GRAD_INT_BITS`` leaves, at most the terms' own. An ACC_BITS sum is exact:
    its fractional bits are the terms'.

    The rounding shifts follow (each from the accumulator's fractional bits to the word's):
    ``fp_shift = eb_shift = weight_frac``; ``weight_update_shift = grad_frac +
    lr_frac - weight_frac``; ``bias_update_shift = bias_grad_frac + lr_frac - bias_frac``;
    ``loss_shift = act_frac - error_frac`` (mse) or ``SOFTMAX_FRAC - error_frac`` (ce). A bias
    joins the FP sum shifted left by ``act_frac + weight_frac - bias_frac`` (>= 0, checked).
    """

    act_frac: int = 8
    weight_frac: int = 12
    bias_frac: int = 12
    error_frac: int = 12
    lr_frac: int = 16
    seed: int = 0x2545F491
    loss: str = "mse"
    grad_bits: int = ACC_BITS
    grad_frac: int = None
    bias_grad_frac: int = None
    psum_bits: int = ACC_BITS

    def __post_init__(self):
        for name in ("act_frac", "weight_frac", "bias_frac", "error_frac", "lr_frac"):
            value = getattr(self, name)
            if not 0 <= value < 2 * WORD_BITS:
                raise ValueError(f"formats: {name} = {value} is outside 0..{2 * WORD_BITS - 1}")
        if self.bias_frac > self.act_frac + self.weight_frac:
            raise ValueError(
                f"formats: bias_frac = {self.bias_frac} exceeds act_frac + weight_frac = "
                f"{self.act_frac + self.weight_frac}; the bias could not be aligned exactly")
        if not 0 <= self.seed < 1 << 32:
            raise ValueError(f"formats: seed = {self.seed} is not a 32-bit unsigned value")
        if self.loss not in LOSSES:
            raise ValueError(f"formats: loss = {self.loss!r} is not one of {', '.join(LOSSES)}")
        if self.grad_bits not in GRAD_BITS:
            raise ValueError(f"formats: grad_bits = {self.grad_bits!r} is not one of "
                             f"{', '.join(map(str, GRAD_BITS))}")
        if self.psum_bits not in PSUM_BITS:
            raise ValueError(f"formats: psum_bits = {self.psum_bits!r} is not one of "
                             f"{', '.join(map(str, PSUM_BITS))}")
        for name, exact in (("grad_frac", self.act_frac + self.error_frac), ("bias_grad_frac", self.error_frac)):
            value = getattr(self, name)
            if value is None:
                value = exact if self.grad_bits == ACC_BITS else max(0, min(exact, self.grad_bits - GRAD_INT_BITS))
                object.__setattr__(self, name, value)
            if self.grad_bits == ACC_BITS and value != exact:
                raise ValueError(f"formats: {name} = {value} with grad_bits = {ACC_BITS}: the exact sums have "
                                 f"the terms' {exact} fractional bits")
            if not 0 <= value <= exact:
                raise ValueError(f"formats: {name} = {value} is outside 0..{exact} (the terms' fractional bits)")
        for name in ("fp_shift", "eb_shift", "weight_update_shift", "bias_update_shift", "loss_shift"):
            if getattr(self, name) < -MAX_LEFT_SHIFT:  # requantize's int64 would wrap
                raise ValueError(f"formats: {name} = {getattr(self, name)} shifts left by more than "
                                 f"{MAX_LEFT_SHIFT} bits, beyond a {ACC_BITS}-bit value's room in 64")

    # Shifts of the single rounding point of each tensor kind.
    @property
    def fp_shift(self):
        return self.weight_frac

    @property
    def eb_shift(self):
        return self.weight_frac

    @property
    def grad_shift(self):
        """Bits a weight-gradient term loses on its way into a narrow sum (0: exact)."""
        return self.act_frac + self.error_frac - self.grad_frac

    @property
    def bias_grad_shift(self):
        return self.error_frac - self.bias_grad_frac

    @property
    def weight_update_shift(self):
        return self.grad_frac + self.lr_frac - self.weight_frac

    @property
    def bias_update_shift(self):
        return self.bias_grad_frac + self.lr_frac - self.bias_frac

    @property
    def loss_shift(self):
        """From the scores' (MSE) or the softmax's (CE) fractional bits to the error's."""
        return (self.act_frac if self.loss == "mse" else SOFTMAX_FRAC) - self.error_frac

    def to_dict(self):
        return asdict(self)


def rounder_latency(shift):
    """Cycles through the hardware's stochastic rounder (hw/arith/rounding.py): two per mix
    round, two for the key and the add; a pass-through register when nothing is rounded."""
    return 2 * len(MIX_ROUNDS) + 2 if shift > 0 else 1


def tensor_id(layer_position, kind):
    return layer_position * TENSOR_KINDS + kind


def mix32(x):
    """Bijective 32-bit mixer; ``x`` is a scalar or an array of unsigned ints, taken mod 2**32.

    Each round of ``MIX_ROUNDS``: xorshift right, then times ``1 + 2**a + 2**b`` mod 2**32;
    then one final xorshift right by ``MIX_FINAL_XORSHIFT`` (module docstring)."""
    x = np.asarray(x, dtype=np.uint64) & _M32
    for xorshift, (a, b) in MIX_ROUNDS:
        x = x ^ (x >> np.uint64(xorshift))
        x = (x + (x << np.uint64(a)) + (x << np.uint64(b))) & _M32
    return x ^ (x >> np.uint64(MIX_FINAL_XORSHIFT))


def stream_key(seed, tensor, sample):
    """Per (tensor, sample) key, ``mix32(mix32(seed ^ tensor) ^ (sample mod 2**32))``:
    computed once per sample by the hardware."""
    return mix32(mix32(np.uint64(seed) ^ np.uint64(tensor)) ^ np.uint64(sample & 0xFFFFFFFF))


def noise(seed, tensor, sample, index):
    """32-bit rounding noise of the elements at flat positions ``index``:
    ``mix32(stream_key(seed, tensor, sample) ^ (index mod 2**32))``."""
    index = np.asarray(index, dtype=np.uint64) & _M32
    return mix32(stream_key(seed, tensor, sample) ^ index)


def grad_noise(seed, tensor, sample, pixels, index):
    """32-bit noise of the gradient terms of the weights at ``index`` (row-major in the layer
    tensor) and output ``pixels`` (row-major): one row per pixel, ``pixels`` x ``index``."""
    index = np.asarray(index, dtype=np.uint64) & _M32
    per_pixel = noise(seed, tensor, sample, np.asarray(pixels, dtype=np.uint64))
    scramble = (index * np.uint64(GRAD_SCRAMBLE)) & _M32
    return per_pixel.reshape(-1, *([1] * index.ndim)) ^ scramble


def accumulate(sums, terms, shift, bits, seed, tensor, sample, index):
    """The running gradient ``sums`` (int64, any shape) after one sample's exact ``terms``
    (pixels x sums' shape, raster order) are added, each rounded with ``shift`` bits of
    :func:`grad_noise` and every add saturated to ``bits`` (module docstring). ``bits`` =
    ACC_BITS adds exactly (``shift`` must be 0); ``index``: the sums' positions in the tensor."""
    terms = np.asarray(terms, dtype=np.int64)
    if bits == ACC_BITS:
        if shift:
            raise ValueError(f"accumulate: {ACC_BITS}-bit sums are exact, not rounded by {shift} bits")
        return sums + terms.sum(axis=0)
    if shift:
        r = grad_noise(seed, tensor, sample, np.arange(len(terms)), index) & np.uint64((1 << shift) - 1)
        terms = (terms + r.astype(np.int64)) >> shift
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    running = sums + np.cumsum(terms, axis=0)
    if running.size == 0 or (running.min() >= lo and running.max() <= hi):
        return running[-1] if len(terms) else sums.copy()  # no add saturated: the plain sum
    for term in terms:  # some did: saturate each add in order
        sums = np.clip(sums + term, lo, hi)
    return sums


def saturate(x, bits=WORD_BITS):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(x, lo, hi)


def requantize(acc, shift, seed, tensor, sample, index=None):
    """Round a wide accumulator array to 16-bit words (see module docstring).

    ``shift`` > 0 adds the noise word's low ``shift`` bits, then shifts right arithmetically;
    0 passes through; < 0 clips to ``ACC_BITS`` and shifts left. Every case then saturates
    to 16 bits. ``index`` defaults to the row-major positions of ``acc``.
    """
    acc = np.asarray(acc, dtype=np.int64)
    if shift > MAX_SHIFT:
        raise ValueError(f"requantize: shift {shift} exceeds the {MAX_SHIFT}-bit noise word")
    if shift > 0:
        if index is None:
            index = np.arange(acc.size, dtype=np.uint64).reshape(acc.shape)
        r = (noise(seed, tensor, sample, index) & np.uint64((1 << shift) - 1)).astype(np.int64)
        acc = (acc + r) >> shift
    elif shift < 0:
        acc = saturate(acc, ACC_BITS) << (-shift)
    return saturate(acc).astype(np.int64)


def quantize(values, frac):
    """Real values to words (inputs, initial weights): ``value * 2**frac`` rounded to nearest,
    ties to even (numpy.round: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2), then saturated."""
    return saturate(np.round(np.asarray(values, dtype=np.float64) * (1 << frac))).astype(np.int64)


def dequantize(words, frac):
    return np.asarray(words, dtype=np.float64) / (1 << frac)


def lr_constant(lr, batch, formats):
    """The hardware's unsigned learning-rate constant round(lr / batch * 2**lr_frac), float64,
    ties to even (Python's round)."""
    value = int(round(lr / batch * (1 << formats.lr_frac)))
    if not 0 < value < 1 << WORD_BITS:
        raise ValueError(
            f"learning rate {lr} / batch {batch} = {lr / batch:g} is not representable as an "
            f"unsigned {WORD_BITS}-bit constant with {formats.lr_frac} fractional bits")
    return value


def acc_bits_needed(terms):
    """Worst-case bits of a sum of ``terms`` products of two words, sign included."""
    max_product = (1 << (WORD_BITS - 1)) ** 2
    return int(max_product * terms).bit_length() + 1
