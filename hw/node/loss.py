"""Loss unit of the last node: the loss error of mapping/golden.py, by ``formats.loss``.

For each sample: the class scores ``y`` (one pixel of ``classes`` words, activation
format) and its label arrive; the output error is
``requantize(acc, loss_shift, seed, tensor_id(position, LOSS_ERROR), sample)``,
one pixel of ``classes`` words in error format, with

- mse: ``acc = y - (onehot << act_frac)``, one beat per cycle;
- ce: ``acc = numerics.softmax(y) - (onehot << SOFTMAX_FRAC)``, computed one sample at a
  time by a small sequential datapath (one table read port, one adder, one subtractor,
  one multiplier), ``3 * classes + RECIP_BITS + 2`` cycles per sample: far fewer than any
  layer before it takes.

The rounder takes ``LOSS_LANES`` classes a cycle (all of them up to that many), a sample's
errors gathered into one pixel: ceil(classes / 16) cycles, again far fewer than the layers
take, where rounding ImageNet's 1,000 classes at once (a noise hash per class) was 67 s of
its node's elaboration.
"""

from amaranth.hdl import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mapping import numerics

from ..arith.rounding import StochasticRounder
from ..base.checks import refuse
from ..base.counter import ModuloCounter, gather
from ..base.layouts import pixel_layout

LABEL_BITS = 16
LOSS_LANES = 16  # classes rounded per cycle (module docstring)
# floor(2**32 / S) with S >= 2**15 (the maximum's exponent) is at most 2**17.
RECIP_BITS = numerics.SOFTMAX_FRAC + numerics.RECIP_GUARD_BITS - numerics.EXP_ONE_BITS + 1


class LossUnit(wiring.Component):
    def __init__(self, *, classes, position, formats):
        if formats.loss == "ce" and classes < 2:
            refuse(self, f"loss unit: softmax over {classes} class is constant; it needs at least 2")
        self.classes, self.position, self.formats = classes, position, formats
        super().__init__({
            "scores": In(stream.Signature(pixel_layout(classes))),
            "labels": In(stream.Signature(unsigned(LABEL_BITS))),
            "errors": Out(stream.Signature(pixel_layout(classes))),
        })

    def elaborate(self, platform):
        m = Module()
        f = self.formats
        ce = f.loss == "ce"
        acc_width = (numerics.SOFTMAX_FRAC if ce else numerics.WORD_BITS) + 2
        n, lanes = self.classes, min(self.classes, LOSS_LANES)
        chunks = -(-n // lanes)
        m.submodules.rounder = rounder = StochasticRounder(
            lanes=lanes, shift=f.loss_shift, seed=f.seed, acc_width=acc_width,
            tensor=numerics.tensor_id(self.position, numerics.LOSS_ERROR))
        beat = stream.Signature(data.StructLayout({"acc": data.ArrayLayout(signed(acc_width), n)})).create()
        (self._softmax if ce else self._mse)(m, beat)

        # A chunk of lanes a cycle into the rounder: the first straight from the beat, which it
        # takes, the others from a copy of it (so one chunk costs no cycle more than no chunks).
        width = lanes * acc_width
        held = Signal(data.ArrayLayout(signed(acc_width), chunks * lanes))
        feed = Signal()
        fed = ModuloCounter(m, chunks, feed)
        base, sample = Signal(range(chunks * lanes)), Signal(32)
        parts = [beat.payload.acc.as_value()[:width]] + [held.as_value()[k * width:(k + 1) * width]
                                                          for k in range(1, chunks)]
        m.d.comb += [rounder.i.valid.eq(Mux(fed.first, beat.valid, 1)), beat.ready.eq(fed.first & rounder.i.ready),
                     feed.eq(rounder.i.valid & rounder.i.ready), rounder.i.payload.sample.eq(sample),
                     rounder.i.payload.acc.eq(Array(parts)[fed.value])]
        m.d.comb += [rounder.i.payload.index[j].eq(base + j) for j in range(lanes)]
        if chunks > 1:
            with m.If(beat.valid & beat.ready):
                m.d.sync += held.as_value()[:n * acc_width].eq(beat.payload.acc)
        with m.If(feed):
            m.d.sync += base.eq(Mux(fed.last, 0, base + lanes))
            with m.If(fed.last):
                m.d.sync += sample.eq(sample + 1)

        # The rounded chunks gathered into the sample's pixel of errors; the last completes it.
        errors, last = gather(m, rounder.o.payload.value.as_value(), rounder.o.valid & rounder.o.ready, chunks,
                              n * numerics.WORD_BITS)
        m.d.comb += [rounder.o.ready.eq(self.errors.ready | ~last), self.errors.valid.eq(rounder.o.valid & last),
                     self.errors.payload.eq(errors)]
        return m

    def _target(self, label, c, frac):
        return Mux(label == c, 1 << frac, 0)

    def _mse(self, m, beat):
        both = self.scores.valid & self.labels.valid
        for c in range(self.classes):
            m.d.comb += beat.payload.acc[c].eq(
                self.scores.payload[c] - self._target(self.labels.payload, c, self.formats.act_frac))
        m.d.comb += [beat.valid.eq(both),
                     self.scores.ready.eq(both & beat.ready),
                     self.labels.ready.eq(both & beat.ready)]

    def _softmax(self, m, beat):
        """numerics.softmax, step by step: maximum, exponents and their sum, reciprocal by
        restoring division, scaled exponents minus the one-hot target."""
        n, words = self.classes, numerics.EXP_TABLE
        table = words + (0,)  # an index past the table reads the 0 after it
        m.submodules.exp = rom = Memory(shape=unsigned(numerics.EXP_ONE_BITS + 1), depth=len(table),
                                        init=table)
        read = rom.read_port()
        dividend_bits = numerics.SOFTMAX_FRAC + numerics.RECIP_GUARD_BITS

        scores = Signal(pixel_layout(n))
        label = Signal(LABEL_BITS)
        top = Signal(signed(numerics.WORD_BITS))
        exps = Signal(data.ArrayLayout(unsigned(numerics.EXP_ONE_BITS + 1), n))
        total = Signal(range(n * (1 << numerics.EXP_ONE_BITS) + 1))
        divisor = Signal(len(total) + RECIP_BITS - 1)
        remainder = Signal(dividend_bits + 1)
        recip = Signal(RECIP_BITS)
        acc = Signal(data.ArrayLayout(signed(numerics.SOFTMAX_FRAC + 2), n))
        count = Signal(range(max(n, RECIP_BITS) + 1))

        index = numerics.exp_index((top - scores[count]).as_unsigned(), self.formats.act_frac)
        m.d.comb += [read.addr.eq(Mux(index < len(words), index, len(words))), beat.payload.acc.eq(acc)]
        both = self.scores.valid & self.labels.valid
        with m.FSM():
            with m.State("load"):
                m.d.comb += [self.scores.ready.eq(both), self.labels.ready.eq(both)]
                with m.If(both):
                    m.d.sync += [scores.eq(self.scores.payload), label.eq(self.labels.payload),
                                 top.eq(self.scores.payload[0]), total.eq(0), count.eq(1)]
                    m.next = "max"
            with m.State("max"):
                with m.If(scores[count] > top):
                    m.d.sync += top.eq(scores[count])
                m.d.sync += count.eq(count + 1)
                with m.If(count == n - 1):
                    m.d.sync += count.eq(0)
                    m.next = "exp"
            with m.State("exp"):  # the table read of class count lands a cycle later
                with m.If(count > 0):
                    m.d.sync += [exps[(count - 1).as_unsigned()].eq(read.data), total.eq(total + read.data)]
                m.d.sync += count.eq(count + 1)
                with m.If(count == n):
                    m.d.sync += [divisor.eq((total + read.data) << (RECIP_BITS - 1)),
                                 remainder.eq(1 << dividend_bits), count.eq(0)]
                    m.next = "divide"
            # One quotient bit per cycle, most significant first; the RECIP_BITS shifts push
            # the previous sample's quotient out of recip.
            with m.State("divide"):
                fits = remainder >= divisor
                with m.If(fits):
                    m.d.sync += remainder.eq(remainder - divisor)
                m.d.sync += [recip.eq(Mux(fits, (recip << 1) | 1, recip << 1)), divisor.eq(divisor >> 1),
                             count.eq(count + 1)]
                with m.If(count == RECIP_BITS - 1):
                    m.d.sync += count.eq(0)
                    m.next = "scale"
            with m.State("scale"):
                p = (exps[count] * recip) >> numerics.RECIP_GUARD_BITS
                m.d.sync += [acc[count].eq(p - self._target(label, count, numerics.SOFTMAX_FRAC)),
                             count.eq(count + 1)]
                with m.If(count == n - 1):
                    m.next = "emit"
            with m.State("emit"):
                m.d.comb += beat.valid.eq(1)
                with m.If(beat.ready):
                    m.next = "load"
