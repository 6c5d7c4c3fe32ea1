"""Loss unit of the last node: MSE against one-hot labels (mapping/golden.py).

For each sample: the class scores ``y`` (one pixel of ``classes`` words, activation
format) and its label arrive; the output error is
``requantize(y - (onehot << act_frac), loss_shift, seed, tensor_id(position, LOSS_ERROR), sample)``,
one pixel of ``classes`` words in error format.
"""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping import numerics

from ..arith.rounding import StochasticRounder
from ..base.layouts import pixel_layout

LABEL_BITS = 16


class LossUnit(wiring.Component):
    def __init__(self, *, classes, position, formats):
        self.classes, self.position, self.formats = classes, position, formats
        super().__init__({
            "scores": In(stream.Signature(pixel_layout(classes))),
            "labels": In(stream.Signature(unsigned(LABEL_BITS))),
            "errors": Out(stream.Signature(pixel_layout(classes))),
        })

    def elaborate(self, platform):
        m = Module()
        f = self.formats
        m.submodules.rounder = rounder = StochasticRounder(
            lanes=self.classes, shift=f.loss_shift, seed=f.seed, acc_width=numerics.WORD_BITS + 2,
            tensor=numerics.tensor_id(self.position, numerics.LOSS_ERROR))
        sample = Signal(32)
        both = self.scores.valid & self.labels.valid
        one = 1 << f.act_frac
        for c in range(self.classes):
            target = (self.labels.payload == c) * one
            m.d.comb += [rounder.i.payload.acc[c].eq(self.scores.payload[c] - target),
                         rounder.i.payload.index[c].eq(c)]
        m.d.comb += [rounder.i.payload.sample.eq(sample), rounder.i.valid.eq(both),
                     self.scores.ready.eq(both & rounder.i.ready),
                     self.labels.ready.eq(both & rounder.i.ready),
                     self.errors.valid.eq(rounder.o.valid),
                     self.errors.payload.eq(rounder.o.payload.value),
                     rounder.o.ready.eq(self.errors.ready)]
        with m.If(both & rounder.i.ready):
            m.d.sync += sample.eq(sample + 1)
        return m
