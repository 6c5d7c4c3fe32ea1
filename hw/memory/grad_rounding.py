"""Gradient terms rounded into narrow LGB and BGB sums: ``numerics.accumulate`` in hardware.

With ``Formats.grad_bits`` below ACC_BITS every term the PG engine produces is rounded to
the sums' fractional bits before it is added (``mapping/numerics.py``, "Gradient sums"):

    term' = (term + r) >> shift,   r = (noise(seed, tensor, s, pixel) ^ (index * GRAD_SCRAMBLE)) & (2**shift - 1)

The unit sits between the PG engine and the gradient sink (LGB, or the split between the LGB
and the hosts' BGBs), so every copy of a weight's gradient is rounded once, where it is made.
It follows PG's beats: per output pixel in raster order the steps (g, i), g-major, i-minor
(``hw.engines.pg_engine``), ``rows`` = G*v of them for weights (``row`` = g*v + i) and for
biases (``row`` = g, the same G*v beats); the pixel ``q`` and the sample ``s`` (from 0) are
counted. The noise word is one hash per beat, ``mix32(key(s) ^ q)``, computed in 2R pipeline
stages like hw.arith.rounding's; each lane adds only its scramble: the index of lane (p, j)
is the beat's base index + ``p * bank_stride + j``, so its low ``shift`` bits of
``index * GRAD_SCRAMBLE`` are those of the base's product (a register stepped per beat) plus
a constant, a ``shift``-bit adder and an XOR per lane, then the term's own add.

Padded terms (channels past the slice's in the last group or pass) are zero products, and
``(0 + r) >> shift`` is 0 for every ``r < 2**shift``: they stay zero.

A stalling pipeline (one enable, as hw.arith.rounding.StochasticRounder without
``credited``): ``latency`` cycles from an accepted beat to its output with a ready consumer;
the beats and their order are unchanged, only the values are rounded (in the same layout,
sign-extended).
"""

from amaranth.hdl import Assert, Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping import numerics
from mapping.memories import bias_steps

from ..arith.pipeline import Pipeline
from ..arith.rounding import SAMPLE_BITS, low_bits, mix_final, mix_round
from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter
from ..base.layouts import flat_elements


class GradientRounder(wiring.Component):
    """Round a slice's gradient beats (``layout``: ``grads_layout`` or ``bias_grads_layout``)
    into a narrow sum's grid.

    ``groups`` G and ``passes`` v: PG's steps per pixel; ``pixels``: output pixels per sample;
    ``banks`` P and ``words`` per bank: the beat's lanes; ``bias``: the beat's ``row`` is the
    group, not the step. ``base``: the index of lane (0, 0) at step (0, 0); ``group_stride``,
    ``pass_stride``: what a group and a pass add to it; ``bank_stride``: from one bank's lane 0
    to the next's. ``shift`` (> 0), ``seed``, ``tensor``: the rounding, as in
    ``numerics.accumulate``.
    """

    def __init__(self, *, layout, groups, passes, pixels, banks, words, base, group_stride, pass_stride,
                 bank_stride, shift, seed, tensor, bias=False):
        positive(self, "gradient rounder", groups=groups, passes=passes, pixels=pixels, banks=banks, words=words)
        if not 0 < shift <= numerics.MAX_SHIFT:
            refuse(self, f"gradient rounder: shift = {shift} is not in 1..{numerics.MAX_SHIFT}")
        self.groups, self.passes, self.pixels, self.banks, self.words = groups, passes, pixels, banks, words
        self.base, self.group_stride, self.pass_stride, self.bank_stride = base, group_stride, pass_stride, bank_stride
        self.shift, self.seed, self.tensor, self.bias = shift, seed, tensor, bias
        self.latency = 2 * len(numerics.MIX_ROUNDS) + 1
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    @classmethod
    def from_slice(cls, layer_slice, formats, layout, *, bias=False):
        """The rounder of a slice's weight (or, ``bias``, bias) gradient beats."""
        s = layer_slice
        kk = s.kernel * s.kernel
        groups, tiles = -(-s.out_channels // s.fp.ces), s.fp.tiles
        passes = -(-s.in_channels // tiles)
        common = dict(layout=layout, pixels=s.out_shape[1] * s.out_shape[2], seed=formats.seed, bias=bias)
        if bias:
            groups, passes = bias_steps(s)
            return cls(words=1, base=s.sfu_range[0], banks=s.bias_banks, group_stride=s.bias_banks, pass_stride=0,
                       bank_stride=1,
                       shift=formats.bias_grad_shift, tensor=numerics.tensor_id(s.position, numerics.BIAS_GRAD_SUM),
                       groups=groups, passes=passes, **common)
        in_total = s.in_shape[0] // s.groups  # the weights are (OC, IC / G, K, K)
        return cls(words=tiles * kk, base=(s.out_range[0] * in_total + s.group_in_range[0]) * kk,
                   group_stride=s.fp.ces * in_total * kk, pass_stride=tiles * kk, bank_stride=in_total * kk,
                   shift=formats.grad_shift, tensor=numerics.tensor_id(s.position, numerics.GRAD_SUM),
                   banks=s.fp.ces, groups=groups, passes=passes, **common)

    def _scrambled(self, index):
        """The low ``shift`` bits of ``index * GRAD_SCRAMBLE``, an elaboration-time constant."""
        return (index * numerics.GRAD_SCRAMBLE) % (1 << self.shift)

    def elaborate(self, platform):
        m = Module()
        shift = self.shift
        accept = self.i.valid & self.i.ready

        # PG's position: step (g, i) of pixel q of sample s, and the scrambled base index of
        # the step, stepped with it (all modulo 2**shift).
        step = ModuloCounter(m, self.groups * self.passes, accept)
        pass_ = ModuloCounter(m, self.passes, accept)
        pixel = ModuloCounter(m, self.pixels, accept & step.last)
        sample = Signal(SAMPLE_BITS)
        group = Signal(range(self.groups))
        scrambled = Signal(shift, init=self._scrambled(self.base))
        with m.If(accept):
            with m.If(step.last):
                m.d.sync += [group.eq(0), scrambled.eq(self._scrambled(self.base))]
            with m.Elif(pass_.last):
                m.d.sync += [group.eq(group + 1), scrambled.eq(
                    scrambled + self._scrambled(self.group_stride - (self.passes - 1) * self.pass_stride))]
            with m.Else():
                m.d.sync += scrambled.eq(scrambled + self._scrambled(self.pass_stride))
            with m.If(step.last & pixel.last):
                m.d.sync += sample.eq(sample + 1)
        row = group if self.bias else group * self.passes + pass_.value
        with m.If(self.i.valid):
            m.d.sync += Assert(self.i.payload.row == row, "gradient rounder: a beat out of PG's step order")

        pipe = Pipeline()
        stage, delay = pipe.stage, pipe.delay
        key = Const(int(numerics.mix32(self.seed ^ self.tensor)), 32) ^ sample
        for xorshift, (a, b) in numerics.MIX_ROUNDS:
            key = stage(mix_round(key, xorshift, a, b))
        noise = mix_final(key) ^ delay(pixel.value, len(numerics.MIX_ROUNDS))
        for xorshift, (a, b) in numerics.MIX_ROUNDS:
            noise = stage(mix_round(noise, xorshift, a, b))
        # Named once: an expression used by every lane would be built again for each of them.
        lane_noise = Signal(shift)
        m.d.comb += lane_noise.eq(mix_final(noise)[:shift])
        noise = lane_noise
        rounds = 2 * len(numerics.MIX_ROUNDS)
        base = delay(scrambled, rounds)
        payload = delay(self.i.payload.as_value(), rounds)
        layout = self.i.payload.shape()
        field = layout["values"]
        terms = flat_elements(payload[field.offset:field.offset + field.width], field.shape)
        lane_bits = len(terms[0])
        rounded = []
        for lane, term in enumerate(terms):
            p, j = divmod(lane, self.words)
            r = (noise ^ (base + self._scrambled(p * self.bank_stride + j))[:shift])
            rounded.append(low_bits((term + r).shift_right(shift), lane_bits))
        out = Signal(layout)
        m.d.comb += [out.values.as_value().eq(Cat(*rounded)), out.row.eq(layout(payload).row)]
        m.d.comb += [self.o.valid.eq(delay(self.i.valid, self.latency, reset=True)),
                     self.o.payload.eq(stage(out))]
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        pipe.attach(m, advance)
        return m
