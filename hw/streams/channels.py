"""Stream glue for the node top: fork a pixel stream by channel ranges, concatenate channels.

Pixel payloads are ``data.ArrayLayout(signed(16), C)`` (one pixel per beat).
Both blocks are combinational on the data path and keep valid/ready semantics:
a beat is never dropped or duplicated, whatever the consumers do.
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import WORD_BITS

from ..base.checks import refuse
from ..base.handshake import fork
from ..base.layouts import pixel_layout


def channel_slice(payload, lo, hi, width=WORD_BITS):
    """Channels ``lo`` .. ``hi``-1 of a pixel payload of ``width``-bit channels, as a value."""
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
        m.d.comb += self.i.ready.eq(fork(m, self.i.valid, outs))
        for (lo, hi), out in zip(self.ranges, outs):
            m.d.comb += out.payload.eq(channel_slice(self.i.payload, lo, hi, self.width))
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
