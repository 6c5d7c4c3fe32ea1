"""Gradient terms rounded into narrow LGB and BGB sums: ``numerics.accumulate`` in hardware.

With ``Formats.grad_bits`` below ACC_BITS every term the PG engine produces is rounded to
the sums' fractional bits before it is added (``mapping/numerics.py``, "Gradient sums"):

    term' = (term + r) >> shift,   r = (noise(seed, tensor, s, pixel) ^ (index * GRAD_SCRAMBLE)) & (2**shift - 1)

The unit sits between the PG engine and the gradient sink (LGB, or the split between the LGB
and the hosts' BGBs), so every copy of a weight's gradient is rounded once, where it is made.
It follows PG's beats: per output pixel in raster order the steps (g, i), g-major, i-minor
(``hw.engines.pg_engine``), ``rows`` = G*v of them for weights (``row`` = g*v + i) and for
biases (``row`` = g, the same G*v beats); the pixel ``q`` and the sample ``s`` (from 0) are
counted. The noise word is one hash per pixel, ``mix32(key(s) ^ q)``, in 2R pipeline stages
like hw.arith.rounding's, but computed ahead of the beats (the pixels come in order), into a
FIFO of NOISE_AHEAD words: the beats themselves wait for no hash. Each lane adds only its
scramble: the index of lane (p, j)
is the beat's base index + ``p * bank_stride + j``, so its low ``shift`` bits of
``index * GRAD_SCRAMBLE`` are those of the base's product (a register stepped per beat) plus
a constant, a ``shift``-bit adder and an XOR per lane, then the term's own add.

Padded terms (channels past the slice's in the last group or pass) are zero products, and
``(0 + r) >> shift`` is 0 for every ``r < 2**shift``: they stay zero.

One register: a beat's rounded terms leave the cycle after it is accepted (a beat waits only
for the first pixel's noise, 2R + 3 cycles after reset); the beats and their order are
unchanged, only the values are rounded (in the same layout, sign-extended). Delaying each beat
through the hash stages instead would keep 2R copies of every term in flight: in a VGG-16
slice of 576 terms per beat, 18,000 shift registers.
"""

from amaranth.hdl import Assert, Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from mapping import numerics
from mapping.memories import bias_steps

from ..arith.pipeline import Pipeline
from ..arith.rounding import SAMPLE_BITS, low_bits, mix_final, mix_round
from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter, up_down
from ..base.layouts import flat_elements

# Pixels whose noise is started ahead of their beats: the hash pipeline's 2R stages, the
# FIFO's two (SyncFIFOBuffered) and the cycle a taken pixel's place comes back, so one pixel per
# cycle (a layer of one beat per pixel) never waits for its noise.
NOISE_AHEAD = 2 * len(numerics.MIX_ROUNDS) + 3


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
        ready = Signal()
        accept = self.i.valid & ready

        # PG's position: step (g, i) of pixel q of sample s, and the scrambled base index of
        # the step, stepped with it (all modulo 2**shift).
        step = ModuloCounter(m, self.groups * self.passes, accept)
        pass_ = ModuloCounter(m, self.passes, accept)
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
        row = group if self.bias else group * self.passes + pass_.value
        with m.If(self.i.valid):
            m.d.sync += Assert(self.i.payload.row == row, "gradient rounder: a beat out of PG's step order")

        noise = self._noise_ahead(m, taken=accept & step.last)
        layout = self.i.payload.shape()
        field = layout["values"]
        terms = flat_elements(self.i.payload.as_value()[field.offset:field.offset + field.width], field.shape)
        lane_bits = len(terms[0])
        rounded = []
        for lane, term in enumerate(terms):
            p, j = divmod(lane, self.words)
            r = noise.r_data ^ (scrambled + self._scrambled(p * self.bank_stride + j))[:shift]
            rounded.append(low_bits((term + r).shift_right(shift), lane_bits))
        m.d.comb += ready.eq(noise.r_rdy & (~self.o.valid | self.o.ready))
        m.d.comb += self.i.ready.eq(ready)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(accept):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.values.as_value().eq(Cat(*rounded)),
                         self.o.payload.row.eq(self.i.payload.row)]
        return m

    def _noise_ahead(self, m, taken):
        """A FIFO of the pixels' noise words, ``mix32(key(s) ^ q)`` modulo 2**shift, in PG's pixel
        order, computed ahead of the beats: a pipeline of 2R hash stages that never stalls starts
        a pixel while fewer than NOISE_AHEAD are started and not yet ``taken`` (popped, as the
        pixel's last beat is accepted), so the FIFO never overflows and, after the first 2R + 3
        cycles, holds the noise of the next pixel whenever its first beat comes."""
        fifo = m.submodules.noise = SyncFIFOBuffered(width=self.shift, depth=NOISE_AHEAD)
        started = Signal(range(NOISE_AHEAD + 1))
        start = started != NOISE_AHEAD
        up_down(m, started, start, taken)
        pixel = ModuloCounter(m, self.pixels, start)
        sample = Signal(SAMPLE_BITS)
        with m.If(start & pixel.last):
            m.d.sync += sample.eq(sample + 1)
        pipe = Pipeline()
        stage, delay = pipe.stage, pipe.delay
        key = Const(int(numerics.mix32(self.seed ^ self.tensor)), 32) ^ sample
        for xorshift, (a, b) in numerics.MIX_ROUNDS:
            key = stage(mix_round(key, xorshift, a, b))
        noise = mix_final(key) ^ delay(pixel.value, len(numerics.MIX_ROUNDS))
        for xorshift, (a, b) in numerics.MIX_ROUNDS:
            noise = stage(mix_round(noise, xorshift, a, b))
        m.d.comb += [fifo.w_data.eq(mix_final(noise)[:self.shift]),
                     fifo.w_en.eq(delay(start, 2 * len(numerics.MIX_ROUNDS), reset=True)),
                     fifo.r_en.eq(taken)]
        pipe.attach(m)
        return fifo
