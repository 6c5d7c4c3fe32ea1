"""Random back-pressure on a stream, in hardware, for chained-node simulations.

A 16-bit Fibonacci LFSR (taps 16, 14, 13, 11: maximal length) decides each cycle
whether the link passes beats; when it does not, the consumer sees valid low and
the producer sees ready low, so the link stalls in both directions at once.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


class StallInjector(wiring.Component):
    def __init__(self, layout, *, seed, stall):
        if not 0 <= stall < 1:
            raise ValueError(f"stall injector: stall = {stall} must be in [0, 1)")
        self.seed = (seed % 0xFFFF) + 1  # never the all-zero LFSR state
        self.threshold = round(stall * 256)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        lfsr = Signal(16, init=self.seed)
        m.d.sync += lfsr.eq((lfsr << 1) | (lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]))
        go = lfsr[:8] >= self.threshold
        m.d.comb += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid & go),
                     self.i.ready.eq(self.o.ready & go)]
        return m


def stalling_link(stall, seed=1):
    """A ``link`` for ``hw.node.connect_chain`` that puts a StallInjector on every stream."""
    count = [seed]

    def link(m, producer, consumer):
        count[0] += 1
        injector = m.submodules[f"stall{count[0]}"] = StallInjector(
            producer.payload.shape(), seed=count[0] * 7919, stall=stall)
        wiring.connect(m, producer, injector.i)
        wiring.connect(m, injector.o, consumer)

    return link
