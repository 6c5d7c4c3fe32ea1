"""A first-in first-out queue in one memory and that memory's own output register.

``i`` takes beats of ``shape``, ``o`` gives them back in order. The memory has ``depth``
entries; the head beat waits in the memory's read register as the ``o`` payload, so it
is a synchronous-read RAM (block or distributed) with no other storage. Memory:
(width of ``shape`` bits, ``depth``), one read port.

``level`` is the occupancy: beats accepted on ``i`` minus beats taken from ``o``,
exactly, every cycle (the head beat counts while it waits in the output register).
Flow control makes overflow and underflow impossible: ``i.ready`` is low at
``level == depth`` (a register of its own: it does not depend on ``o.ready``, so no
combinational path crosses the queue) and ``o.valid`` is low while the queue is empty; a
pushed beat appears on ``o`` two cycles later at the earliest, and from ``depth >= 3`` one
beat per cycle passes (depth 2: two beats in three cycles). Amaranth ``Assert``s check in
simulation that the memory is never written while full nor read while empty.

``input_register=True`` puts a register between ``i`` and the memory's write port: a beat is
written the cycle after it is accepted (and appears on ``o`` three cycles later at the
earliest), so the logic in front of ``i.payload`` does not also carry the wires to the memory
(a block RAM's data pins are often far from it). ``level`` and ``i.ready`` are unchanged: the
registered beat counts, and the memory always has room for it.

``pop_register=True`` counts a beat taken from ``o`` in ``level`` and ``full`` a cycle late, from
a register, so ``o.ready`` reaches one flip-flop instead of the level's adder and the full
flag (a queue whose consumer is far from its producer: the SFU's mask FIFO, between the
forward and the backward pass). ``level`` then counts a taken beat one cycle longer, and
``i.ready`` rises a cycle later after a pop: never more beats than the memory holds.

``family``: the device family the memory is built for (``ram_style`` by
``mapping.resources.ram_style``); None for simulation.
"""

from amaranth.hdl import Assert, Module, Shape, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..base.checks import refuse
from ..base.counter import ring_successor, up_down
from ..base.ram import NO_RW_CHECK, ram_attrs, read_register


class Fifo(wiring.Component):
    """FIFO of ``depth`` beats of ``shape`` (see the module docstring)."""

    KIND = "fifo"  # names the queue in refusals and simulation assertions

    def __init__(self, shape, depth, *, family=None, input_register=False, pop_register=False):
        if depth < 1:
            refuse(self, f"{self.KIND}: depth = {depth} must be at least 1")
        self.shape, self.depth, self.family = shape, depth, family
        self.input_register, self.pop_register = input_register, pop_register
        self.width = Shape.cast(shape).width
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        kind, depth = self.KIND, self.depth
        m.submodules.mem = mem = memory.Memory(shape=self.shape, depth=depth, init=[],
                                               attrs=NO_RW_CHECK | ram_attrs(depth, self.family))

        head, tail = Signal(range(depth)), Signal(range(depth))
        stored = Signal(range(depth + 1))  # beats in the memory, the output register excluded
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        fetch = (stored != 0) & (~self.o.valid | self.o.ready)  # refill the output register
        if self.pop_register:
            counted_pop = Signal()
            m.d.sync += counted_pop.eq(pop)
        else:
            counted_pop = pop

        if self.input_register:
            written, data = Signal(), Signal.like(self.i.payload)
            m.d.sync += [written.eq(push), data.eq(self.i.payload)]
        else:
            written, data = push, self.i.payload
        # "Full" as a register of its own, not a comparison of the level: i.ready fans out into
        # the producer's handshake, and through a pipeline's stall chain (a mask FIFO's level ->
        # its SFU -> the PAB's pop was an ECP5-45 node's worst path, 8.2 ns of routing).
        full = Signal()
        with m.If(push & ~counted_pop):
            m.d.sync += full.eq(self.level == depth - 1)
        with m.Elif(counted_pop & ~push):
            m.d.sync += full.eq(0)
        write = mem.write_port()
        m.d.comb += [
            self.i.ready.eq(~full),
            write.addr.eq(tail), write.data.eq(data), write.en.eq(written),
            self.o.payload.eq(read_register(m, mem, head, fetch)),
        ]
        with m.If(written):
            m.d.sync += tail.eq(ring_successor(tail, depth))
        with m.If(fetch):
            m.d.sync += [head.eq(ring_successor(head, depth)), self.o.valid.eq(1)]
        with m.Elif(pop):
            m.d.sync += self.o.valid.eq(0)
        up_down(m, stored, written, fetch)
        up_down(m, self.level, push, counted_pop)
        in_register = written if self.input_register else 0
        uncounted = counted_pop if self.pop_register else 0  # taken last cycle, still counted
        m.d.sync += [  # checked at clock edges
            Assert(~(written & (stored == depth)), f"{kind}: write into a full memory"),
            Assert(~(fetch & (stored == 0)), f"{kind}: read from an empty memory"),
            Assert(self.level == stored + self.o.valid + in_register + uncounted,
                   f"{kind}: level disagrees with the contents"),
            Assert(full == (self.level == depth), f"{kind}: full flag disagrees with the level"),
        ]
        return m
