"""Act-RAM: the slice's input activations, kept from FP until PG replays them (paper 5.2.2).

A first-in first-out queue of pixels (``channels`` words per beat): FP pushes each
input pixel as it uses it, PG pops them in the same order once the sample's errors
arrive. It is one block RAM of ``depth`` pixels and the RAM's own output register,
which holds the head pixel as the ``o`` payload.

``level`` is the occupancy: beats accepted on ``i`` minus beats taken from ``o``,
exactly, every cycle (the head pixel counts while it waits in the output register).
Flow control makes overflow and underflow impossible: ``i.ready`` is low at
``level == depth`` (it does not depend on ``o.ready``, so no combinational path crosses
the queue) and ``o.valid`` is low while the queue is empty; a pushed pixel appears on
``o`` two cycles later at the earliest. Amaranth ``Assert``s check in simulation that
the memory is never written while full nor read while empty.
"""

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.param_ram import NO_RW_CHECK, read_register
from hw.rounding import refuse
from hw.stream_util import pixel_layout


class ActRam(wiring.Component):
    """FIFO of ``depth`` pixels of ``channels`` 16-bit words."""

    def __init__(self, *, channels, depth):
        if channels < 1:
            refuse(self, f"act-ram: channels = {channels} must be at least 1")
        if depth < 1:
            refuse(self, f"act-ram: depth = {depth} pixels must be at least 1")
        self.channels, self.depth = channels, depth
        super().__init__({
            "i": In(stream.Signature(pixel_layout(channels))),
            "o": Out(stream.Signature(pixel_layout(channels))),
            "level": Out(range(depth + 1)),
        })

    @classmethod
    def from_slice(cls, layer_slice):
        """The Act-RAM of a ``mapping.nodeconfig.LayerSlice``: ``act_ram_words`` / S pixels."""
        channels, words = layer_slice.in_channels, layer_slice.act_ram_words
        if words % channels or words < channels:
            raise ValueError(f"act-ram of layer '{layer_slice.layer}': act_ram_words = {words} is not a "
                             f"positive multiple of the slice's {channels} input channels")
        return cls(channels=channels, depth=words // channels)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=pixel_layout(self.channels), depth=self.depth,
                                               init=[], attrs=NO_RW_CHECK)

        def successor(pointer):
            return Mux(pointer == self.depth - 1, 0, pointer + 1)

        head, tail = Signal(range(self.depth)), Signal(range(self.depth))
        stored = Signal(range(self.depth + 1))  # pixels in the memory, the output register excluded
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        fetch = (stored != 0) & (~self.o.valid | self.o.ready)  # refill the output register

        write = mem.write_port()
        m.d.comb += [
            self.i.ready.eq(self.level != self.depth),
            write.addr.eq(tail), write.data.eq(self.i.payload), write.en.eq(push),
            self.o.payload.eq(read_register(m, mem, head, fetch)),
        ]
        with m.If(push):
            m.d.sync += tail.eq(successor(tail))
        with m.If(fetch):
            m.d.sync += [head.eq(successor(head)), self.o.valid.eq(1)]
        with m.Elif(pop):
            m.d.sync += self.o.valid.eq(0)
        m.d.sync += [stored.eq(stored + push - fetch), self.level.eq(self.level + push - pop)]
        m.d.sync += [  # checked at clock edges
            Assert(~(push & (stored == self.depth)), "act-ram: write into a full memory"),
            Assert(~(fetch & (stored == 0)), "act-ram: read from an empty memory"),
            Assert(self.level == stored + self.o.valid, "act-ram: level disagrees with the contents"),
        ]
        return m
