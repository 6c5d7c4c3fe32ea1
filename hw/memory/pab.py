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
Sums are exact: the mapping guarantees every partial sum fits ACC_BITS. Between slices
they may travel narrower (``Formats.psum_bits``): :class:`PartialSumWidth` saturates them as
they leave a slice and sign-extends them as they arrive.

``first=True`` (the layer's first node, no upstream): the local stream passes straight
through and there is no ``upstream`` port.

Memory (unless ``first``): the FIFO, (48*P bits, ``depth``), one read port, ``ram_style``
by ``mapping.resources.ram_style`` for ``family`` (None simulates).

A grouped layer's slice (:class:`GroupedPartialActivationBuffer`) adds only to its own
group's beats: the upstream stream carries the sums of every group up to the previous
slice's (``LayerSlice.upstream_sums_channels``), the output those up to its own
(``LayerSlice.sums_channels``), so per pixel the earlier groups' beats pass through first
and then come the slice's own, added to the upstream's where its group began upstream,
alone where it begins here. The earlier groups' beats of a pixel wait for the first of the
slice's own: its engine starts a sample only when the update gate lets it, and the sums of
a sample the gate holds must not reach the SFU, whose biases the update may be writing.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.memories import PAB_MIN_DEPTH
from mapping.numerics import ACC_BITS

from ..arith.rounding import saturate
from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter
from ..base.layouts import psum_layout
from .fifo import Fifo


class PartialSumWidth(wiring.Component):
    """Partial sums from ``i_bits`` to ``o_bits`` per lane, as they leave a slice (saturated,
    ``mapping.numerics``'s "Partial sums") or arrive at the next (sign-extended); combinational."""

    def __init__(self, *, lanes, i_bits, o_bits):
        positive(self, "partial-sum width", lanes=lanes, i_bits=i_bits, o_bits=o_bits)
        self.lanes, self.i_bits, self.o_bits = lanes, i_bits, o_bits
        super().__init__({"i": In(stream.Signature(psum_layout(lanes, i_bits))),
                          "o": Out(stream.Signature(psum_layout(lanes, o_bits)))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]
        for lane in range(self.lanes):
            value = self.i.payload.values[lane]
            m.d.comb += self.o.payload.values[lane].eq(saturate(value, self.o_bits) if self.o_bits < self.i_bits
                                                       else value)
        return m


def partial_sums_between_slices(m, name, stream_, lanes, bits, leaving):
    """``stream_`` of exact partial sums as ``bits``-wide ones leaving a slice (``leaving``), or
    the ``bits``-wide ones arriving at a slice as exact ones; ``stream_`` itself at ACC_BITS."""
    if bits == ACC_BITS:
        return stream_
    i_bits, o_bits = (ACC_BITS, bits) if leaving else (bits, ACC_BITS)
    width = m.submodules[name] = PartialSumWidth(lanes=lanes, i_bits=i_bits, o_bits=o_bits)
    wiring.connect(m, stream_, width.i)
    return width.o


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

    @staticmethod
    def from_slice(layer_slice, family=None):
        """FP partial-sum buffer of an ICP slice; ``pab_words`` counts accumulator lanes. A
        :class:`GroupedPartialActivationBuffer` where the sums of other groups pass it by."""
        s = layer_slice
        lanes = s.fp.ces
        common = dict(lanes=lanes, depth=max(PAB_MIN_DEPTH, -(-s.pab_words // lanes)), family=family)
        if s.sums_channels == s.out_channels:
            return PartialActivationBuffer(first=s.first, **common)
        return GroupedPartialActivationBuffer(passed=s.out_range[0] // lanes, own=-(-s.out_channels // lanes),
                                              adds=s.upstream_sums_channels == s.sums_channels, **common)

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


class GroupedPartialActivationBuffer(PartialActivationBuffer):
    """The buffer of a grouped layer's slice (module docstring): per output pixel ``passed``
    upstream beats straight through, then ``own`` beats of the local sums, each added to an
    upstream beat if ``adds``, alone if not (the slice's group starts here)."""

    def __init__(self, *, lanes, depth, passed, own, adds, family=None):
        positive(self, "partial-activation buffer", passed=passed, own=own)
        self.passed, self.own, self.adds = passed, own, adds
        super().__init__(lanes=lanes, depth=depth, family=family)

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = Fifo(psum_layout(self.lanes), self.depth, family=self.family)
        wiring.connect(m, wiring.flipped(self.local), fifo.i)
        m.d.comb += self.level.eq(fifo.level)

        fire = Signal()
        beat = ModuloCounter(m, self.passed + self.own, fire)
        passing = beat.value < self.passed
        load = ~self.o.valid | self.o.ready
        # Another group's beat passes only once the slice's own beats of that pixel have begun:
        # those wait for the update gate, so no beat of a sample the gate still holds reaches the
        # SFU ahead of them (which would read biases the update is writing).
        from_upstream = passing | self.adds
        ready = fifo.o.valid & (self.upstream.valid | ~from_upstream)
        m.d.comb += [fire.eq(load & ready),
                     self.upstream.ready.eq(fire & from_upstream),
                     fifo.o.ready.eq(fire & ~passing)]
        with m.If(load):
            m.d.sync += self.o.valid.eq(ready)
            for lane in range(self.lanes):
                upstream, local = self.upstream.payload.values[lane], fifo.o.payload.values[lane]
                own = local + upstream if self.adds else local
                m.d.sync += self.o.payload.values[lane].eq(Mux(passing, upstream, own))
        return m
