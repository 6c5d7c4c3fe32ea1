"""Flatten between the last convolutional layer and a fully connected layer.

Forward: a sample's raster pixel stream (H x W beats of C channels) becomes one
beat of C*H*W words in the row-major (c, y, x) order of ``Layer("flatten")``.
Backward (``Unflatten``): one beat of C*H*W errors becomes the H x W pixel stream.
Both hold one sample in registers: the nets simulated here flatten tens of words;
a fully connected layer of paper scale keeps its input in off-chip memory.
"""

from amaranth.hdl import Array, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..base.layouts import pixel_layout


def _flat_index(c, pixel, pixels):
    return c * pixels + pixel


class Flatten(wiring.Component):
    def __init__(self, channels, height, width):
        self.channels, self.pixels = channels, height * width
        super().__init__({"i": In(stream.Signature(pixel_layout(channels))),
                          "o": Out(stream.Signature(pixel_layout(channels * height * width)))})

    def elaborate(self, platform):
        m = Module()
        pixel = Signal(range(self.pixels + 1))
        full = Signal()
        m.d.comb += [self.i.ready.eq(~full), self.o.valid.eq(full)]
        with m.If(self.i.valid & self.i.ready):
            with m.Switch(pixel):
                for p in range(self.pixels):
                    with m.Case(p):
                        m.d.sync += [self.o.payload[_flat_index(c, p, self.pixels)].eq(self.i.payload[c])
                                     for c in range(self.channels)]
            m.d.sync += pixel.eq(pixel + 1)
            with m.If(pixel == self.pixels - 1):
                m.d.sync += [full.eq(1), pixel.eq(0)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += full.eq(0)
        return m


class Unflatten(wiring.Component):
    def __init__(self, channels, height, width):
        self.channels, self.pixels = channels, height * width
        super().__init__({"i": In(stream.Signature(pixel_layout(channels * height * width))),
                          "o": Out(stream.Signature(pixel_layout(channels)))})

    def elaborate(self, platform):
        m = Module()
        pixel = Signal(range(self.pixels))
        held = Signal.like(self.i.payload)
        full = Signal()
        rows = Array(Array(held[_flat_index(c, p, self.pixels)] for c in range(self.channels))
                     for p in range(self.pixels))
        m.d.comb += [self.i.ready.eq(~full), self.o.valid.eq(full)]
        m.d.comb += [self.o.payload[c].eq(rows[pixel][c]) for c in range(self.channels)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [held.eq(self.i.payload), full.eq(1)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += pixel.eq(pixel + 1)
            with m.If(pixel == self.pixels - 1):
                m.d.sync += [pixel.eq(0), full.eq(0)]
        return m
