"""Partial-activation buffer (paper section 5.3): local partial sums + the previous node's.

On an ICP layer split over several nodes, each node's engine produces partial sums of
every output channel over its own input channels; node ``n`` adds them to the running
sums arriving from node ``n-1`` and passes the result on. Both inputs and the output
are partial-sum streams (``ceil(OC/P)`` beats per output pixel, raster order), so the
beats pair up one to one in arrival order.

The local beats wait in a FIFO of ``depth`` beats (block RAM when large) until the
matching upstream beat arrives; an upstream beat that comes first waits on its own
stream (back-pressure), and a full FIFO back-pressures the engine. The sum goes to
an output register; one beat per cycle when both inputs are ahead of a ready output.
Sums are exact: the mapping guarantees every partial sum fits ACC_BITS.

``first=True`` (the layer's first node, no upstream): the local stream passes straight
through and there is no ``upstream`` port.
"""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hw.conv_engine import psum_layout
from hw.rounding import refuse


class PartialActivationBuffer(wiring.Component):
    """Ports: ``local`` and (unless ``first``) ``upstream`` in, ``o`` out; ``level``: beats in the FIFO."""

    def __init__(self, *, lanes, depth, first=False):
        if lanes < 1:
            refuse(self, f"partial-activation buffer: lanes = {lanes} must be at least 1")
        if not first and depth < 2:
            refuse(self, f"partial-activation buffer: depth = {depth} must be at least 2 "
                         f"(one beat per cycle)")
        self.lanes, self.depth, self.first = lanes, depth, first
        layout = psum_layout(lanes)
        members = {"local": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))}
        if not first:
            members["upstream"] = In(stream.Signature(layout))
            members["level"] = Out(range(depth + 1))
        super().__init__(members)

    @classmethod
    def from_slice(cls, layer_slice):
        """FP partial-sum buffer of an ICP slice; ``pab_words`` counts accumulator lanes."""
        lanes = layer_slice.fp.ces
        return cls(lanes=lanes, depth=max(2, -(-layer_slice.pab_words // lanes)), first=layer_slice.first)

    def elaborate(self, platform):
        m = Module()
        if self.first:
            wiring.connect(m, wiring.flipped(self.local), wiring.flipped(self.o))
            return m

        layout = psum_layout(self.lanes)
        fifo = m.submodules.fifo = SyncFIFOBuffered(width=layout.size, depth=self.depth)
        m.d.comb += [
            fifo.w_data.eq(self.local.payload), fifo.w_en.eq(self.local.valid),
            self.local.ready.eq(fifo.w_rdy), self.level.eq(fifo.level),
        ]

        waiting = layout(fifo.r_data)
        load = ~self.o.valid | self.o.ready
        m.d.comb += [
            fifo.r_en.eq(load & self.upstream.valid),
            self.upstream.ready.eq(load & fifo.r_rdy),
        ]
        with m.If(load):
            m.d.sync += self.o.valid.eq(fifo.r_rdy & self.upstream.valid)
            for lane in range(self.lanes):
                m.d.sync += self.o.payload.values[lane].eq(
                    waiting.values[lane] + self.upstream.payload.values[lane])
        return m
