"""A first-in first-out queue kept in the node's DRAM, for the samples in flight that outgrow
block RAM (``LayerSlice.act_storage`` "dram": the Act-RAM and the SFU's mask FIFO).

The interface is :class:`hw.memory.fifo.Fifo`'s (``i``, ``o``, ``level`` exact every cycle,
``i.ready`` low at ``level == depth``), so a slice builds either; the order and the words are
the same, only the cycles differ. Inside, beats pass through three places:

- ``to_dram``, an on-chip FIFO of :data:`mapping.memories.DRAM_STAGING_BEATS` beats: each
  beat in it gets a write command (the next address of a ring of ``depth`` words) and then
  leaves as the command's data, as LiteDRAM's DMA writer sends them;
- the ring in DRAM (``dram``, a :class:`hw.base.signatures.DramQueueSignature`);
- ``from_dram``, an on-chip FIFO of as many beats: a read command goes out only while this
  FIFO has room for every word still on its way (LiteDRAM's DMA reader reserves room the
  same way), so the DRAM never waits on the queue's reader, and only for a word the DRAM has
  taken (``write.data``'s handshake), so a read never overtakes its write.

``level`` bounds the beats in all three and in flight between them, so the ring never holds
more than ``depth``. With commands taken every cycle and a read latency below the staging
depth, one beat per cycle passes in each direction. (LiteDRAM's DMA blocks are Migen; this is
their logic in Amaranth over the two ports, with the queue's ring pointers around it.)
"""

from amaranth.hdl import Assert, Module, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect

from mapping.memories import DRAM_STAGING_BEATS

from ..base.checks import refuse
from ..base.counter import ring_successor, up_down
from ..base.signatures import DramQueueSignature
from .fifo import Fifo


class DramFifo(wiring.Component):
    """FIFO of ``depth`` beats of ``shape`` in DRAM behind two on-chip FIFOs of ``staging``
    beats (see the module docstring); ``family`` and ``input_register`` as in
    :class:`hw.memory.fifo.Fifo` (for the staging FIFO that takes ``i``). ``preloaded``: the
    DRAM's words 0 .. ``preloaded`` - 1 are in the queue from reset, in that order (put there
    before the node starts, as the FC weights are: hw/memory/dram_weights.py)."""

    KIND = "dram-fifo"

    def __init__(self, shape, depth, *, staging=DRAM_STAGING_BEATS, family=None, input_register=False,
                 preloaded=0):
        if depth < 1:
            refuse(self, f"{self.KIND}: depth = {depth} must be at least 1")
        if not 0 <= preloaded <= depth:
            refuse(self, f"{self.KIND}: preloaded = {preloaded} must be between 0 and depth = {depth}")
        if staging < 3:  # hw/memory/fifo.py passes one beat per cycle from depth 3
            refuse(self, f"{self.KIND}: staging = {staging} must be at least 3")
        self.shape, self.depth, self.staging, self.family = shape, depth, staging, family
        self.input_register, self.preloaded = input_register, preloaded
        self.width = Shape.cast(shape).width
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1), init=preloaded),
            "dram": Out(DramQueueSignature(self.width, depth)),
        })

    def elaborate(self, platform):
        m = Module()
        depth, staging, write, read = self.depth, self.staging, self.dram.write, self.dram.read
        to_dram = m.submodules.to_dram = Fifo(self.shape, staging, family=self.family,
                                              input_register=self.input_register)
        from_dram = m.submodules.from_dram = Fifo(self.shape, staging, family=self.family)

        full = Signal(init=self.preloaded == depth)
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        after = up_down(m, self.level, push, pop)
        m.d.sync += full.eq(after(lambda level: level == depth))
        m.d.comb += [
            to_dram.i.payload.eq(self.i.payload),
            to_dram.i.valid.eq(self.i.valid & ~full),
            self.i.ready.eq(to_dram.i.ready & ~full),
        ]
        connect(m, from_dram.o, wiring.flipped(self.o))

        # Writes: a command for each staged beat, then the beat as its data.
        write_addr, read_addr = Signal(range(depth), init=self.preloaded % depth), Signal(range(depth))
        commanded = Signal(range(staging + 1))  # staged beats whose command went out
        # words in the ring not yet commanded for reading
        written = Signal(range(depth + 1), init=self.preloaded)
        m.d.comb += [
            write.cmd.valid.eq(to_dram.level > commanded),
            write.cmd.payload.eq(write_addr),
            write.data.payload.eq(to_dram.o.payload),
            write.data.valid.eq(to_dram.o.valid & (commanded != 0)),
            to_dram.o.ready.eq(write.data.ready & (commanded != 0)),
        ]
        write_command = write.cmd.valid & write.cmd.ready
        stored = write.data.valid & write.data.ready
        with m.If(write_command):
            m.d.sync += write_addr.eq(ring_successor(write_addr, depth))
        up_down(m, commanded, write_command, stored)

        # Reads: a command only with room reserved for its word in from_dram.
        in_flight = Signal(range(staging + 1))
        m.d.comb += [
            read.cmd.valid.eq((written != 0) & (from_dram.level + in_flight < staging)),
            read.cmd.payload.eq(read_addr),
            from_dram.i.payload.eq(read.data.payload),
            from_dram.i.valid.eq(read.data.valid),
            read.data.ready.eq(1),
        ]
        read_command = read.cmd.valid & read.cmd.ready
        with m.If(read_command):
            m.d.sync += read_addr.eq(ring_successor(read_addr, depth))
        up_down(m, written, stored, read_command)
        up_down(m, in_flight, read_command, read.data.valid)
        m.d.sync += [
            Assert(~read.data.valid | from_dram.i.ready, f"{self.KIND}: a word read with no room for it"),
            Assert(~read.data.valid | (in_flight != 0), f"{self.KIND}: a word read that was not asked for"),
        ]
        return m
