"""Stream glue for the node top: fork a pixel stream by channel ranges, concatenate channels.

Pixel payloads are ``data.ArrayLayout(signed(16), C)`` (one pixel per beat).
Both blocks are combinational on the data path and keep valid/ready semantics:
a beat is never dropped or duplicated, whatever the consumers do.
"""

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import WORD_BITS
from .rounding import refuse


def pixel_layout(channels, width=WORD_BITS):
    return data.ArrayLayout(signed(width), channels)


def _channel_slice(payload, lo, hi, width):
    return payload.as_value()[lo * width:hi * width]


class ChannelFork(wiring.Component):
    """One pixel stream in, one stream per channel range ``(lo, hi)`` out.

    Every output sees every beat exactly once; the input beat is accepted once
    all outputs have taken it (an output that took it early waits, flagged as done).
    """

    def __init__(self, channels, ranges, width=WORD_BITS):
        for lo, hi in ranges:
            if not 0 <= lo < hi <= channels:
                refuse(self, f"channel fork: range ({lo}, {hi}) is outside 0..{channels}")
        self.channels, self.ranges, self.width = channels, tuple(ranges), width
        members = {"i": In(stream.Signature(pixel_layout(channels, width)))}
        for n, (lo, hi) in enumerate(self.ranges):
            members[f"o{n}"] = Out(stream.Signature(pixel_layout(hi - lo, width)))
        super().__init__(members)

    def outputs(self):
        return [getattr(self, f"o{n}") for n in range(len(self.ranges))]

    def elaborate(self, platform):
        m = Module()
        outs = self.outputs()
        done = Signal(len(outs))
        taken = Cat(done[n] | out.ready for n, out in enumerate(outs))
        m.d.comb += self.i.ready.eq(taken.all())
        for n, ((lo, hi), out) in enumerate(zip(self.ranges, outs)):
            m.d.comb += [out.valid.eq(self.i.valid & ~done[n]),
                         out.payload.eq(_channel_slice(self.i.payload, lo, hi, self.width))]
        with m.If(self.i.valid):
            with m.If(self.i.ready):
                m.d.sync += done.eq(0)
            with m.Else():
                m.d.sync += done.eq(done | Cat(out.ready for out in outs))
        return m


class ChannelConcat(wiring.Component):
    """Pixel streams of ``counts[n]`` channels in, one stream of their concatenation out.

    Input 0 supplies the lowest channels. A beat leaves when every input has one.
    """

    def __init__(self, counts, width=WORD_BITS):
        self.counts, self.width = tuple(counts), width
        members = {f"i{n}": In(stream.Signature(pixel_layout(c, width))) for n, c in enumerate(self.counts)}
        members["o"] = Out(stream.Signature(pixel_layout(sum(self.counts), width)))
        super().__init__(members)

    def inputs(self):
        return [getattr(self, f"i{n}") for n in range(len(self.counts))]

    def elaborate(self, platform):
        m = Module()
        ins = self.inputs()
        all_valid = Cat(i.valid for i in ins).all()
        m.d.comb += [self.o.valid.eq(all_valid),
                     self.o.payload.eq(Cat(i.payload.as_value() for i in ins))]
        for i in ins:
            m.d.comb += i.ready.eq(all_valid & self.o.ready)
        return m
