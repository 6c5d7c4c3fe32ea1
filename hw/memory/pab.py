"""Partial-activation buffer (paper section 5.3): local partial sums + the previous node's.

On an ICP layer split over several nodes, each node's engine produces partial sums of
every output channel over its own input channels; node ``n`` adds them to the running
sums arriving from node ``n-1`` and passes the result on. Both inputs and the output
are partial-sum streams (``ceil(OC/P)`` beats per output pixel, raster order), so the
beats pair up one to one in arrival order.

The local beats wait in a :class:`hw.memory.fifo.Fifo` of ``depth`` beats until the
matching upstream beat arrives; an upstream beat that comes first waits on its own
stream (back-pressure), and a full FIFO back-pressures the engine. The sum goes to
an output register; one beat per cycle when both inputs are ahead of a ready output
and ``depth >= 3`` (see hw.memory.fifo).
Sums are exact: the mapping guarantees every partial sum fits ACC_BITS.

``first=True`` (the layer's first node, no upstream): the local stream passes straight
through and there is no ``upstream`` port.

Memory (unless ``first``): the FIFO, (48*P bits, ``depth``), one read port, ``ram_style``
by ``mapping.resources.ram_style`` for ``family`` (None simulates).
"""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.memories import PAB_MIN_DEPTH

from ..base.checks import refuse
from ..base.layouts import psum_layout
from .fifo import Fifo


class PartialActivationBuffer(wiring.Component):
    """Ports: ``local`` and (unless ``first``) ``upstream`` in, ``o`` out; ``level``: beats in the FIFO."""

    def __init__(self, *, lanes, depth, first=False, family=None):
        if lanes < 1:
            refuse(self, f"partial-activation buffer: lanes = {lanes} must be at least 1")
        if not first and depth < 2:
            refuse(self, f"partial-activation buffer: depth = {depth} must be at least 2")
        self.lanes, self.depth, self.first, self.family = lanes, depth, first, family
        layout = psum_layout(lanes)
        members = {"local": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))}
        if not first:
            members["upstream"] = In(stream.Signature(layout))
            members["level"] = Out(range(depth + 1))
        super().__init__(members)

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """FP partial-sum buffer of an ICP slice; ``pab_words`` counts accumulator lanes."""
        lanes = layer_slice.fp.ces
        return cls(lanes=lanes, depth=max(PAB_MIN_DEPTH, -(-layer_slice.pab_words // lanes)), first=layer_slice.first,
                   family=family)

    def elaborate(self, platform):
        m = Module()
        if self.first:
            wiring.connect(m, wiring.flipped(self.local), wiring.flipped(self.o))
            return m

        fifo = m.submodules.fifo = Fifo(psum_layout(self.lanes), self.depth, family=self.family)
        wiring.connect(m, wiring.flipped(self.local), fifo.i)
        m.d.comb += self.level.eq(fifo.level)

        waiting = fifo.o.payload
        load = ~self.o.valid | self.o.ready
        m.d.comb += [
            fifo.o.ready.eq(load & self.upstream.valid),
            self.upstream.ready.eq(load & fifo.o.valid),
        ]
        with m.If(load):
            m.d.sync += self.o.valid.eq(fifo.o.valid & self.upstream.valid)
            for lane in range(self.lanes):
                m.d.sync += self.o.payload.values[lane].eq(
                    waiting.values[lane] + self.upstream.payload.values[lane])
        return m
