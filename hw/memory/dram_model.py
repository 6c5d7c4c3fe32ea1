"""A DRAM for simulation: the far side of one :class:`hw.base.signatures.DramQueueSignature`.

Gateware, so the same model runs in Amaranth's simulator and in Verilator. It behaves as a
LiteDRAM port does where the queue (hw/memory/dram_fifo.py) relies on it: write commands
wait in a small queue until their data comes, a read's word returns ``latency`` cycles after
its command, in command order, and the controller takes no command at all during a refresh
of ``refresh_cycles`` every ``refresh_every`` cycles (0: never), as DDR3's tREFI and tRFC
stall a real one. One memory of ``depth`` words of ``width`` bits holds the ring.

:func:`simulated_drams` makes one model for each DRAM queue port of a node.
"""

from fractions import Fraction

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, connect, flipped

from ..base.checks import positive, refuse
from ..base.counter import ring_successor
from ..base.ram import NO_RW_CHECK, read_register
from ..base.signatures import DramQueueSignature
from .fifo import Fifo

WRITE_COMMANDS = 4  # write commands the model takes ahead of their data (LiteDRAM's cmd buffer)


class SimulatedDram(wiring.Component):
    """The DRAM side of a queue of ``depth`` words of ``width`` bits (module docstring), its
    first words ``init`` (a queue's preloaded words, hw/memory/dram_fifo.DramFifo).

    ``bits_per_cycle``: the data the DRAM moves per cycle, reads and writes together (a
    device's ``dram_gbps`` at the node's clock, mapping/perf.py's figure); each word read or
    written spends ``width`` bits of it, saved up for at most one read and one write. None:
    a word each way every cycle."""

    def __init__(self, width, depth, *, latency=20, refresh_every=0, refresh_cycles=0, init=(),
                 bits_per_cycle=None):
        positive(self, "SimulatedDram", width=width, depth=depth, latency=latency)
        if bits_per_cycle is not None and not bits_per_cycle > 0:
            refuse(self, f"SimulatedDram: bits_per_cycle = {bits_per_cycle!r} must be above 0 (None: no limit)")
        # The bandwidth as a whole number of bits per ``per`` cycles (a token bucket's refill).
        self.bandwidth = None if bits_per_cycle is None else Fraction(bits_per_cycle).limit_denominator(1 << 10)
        if refresh_every < 0 or refresh_cycles < 0 or (refresh_every and refresh_cycles >= refresh_every):
            refuse(self, f"SimulatedDram: refresh_cycles = {refresh_cycles} must be at least 0 and below "
                         f"refresh_every = {refresh_every} (0: no refresh)")
        self.width, self.depth, self.latency = width, depth, latency
        self.refresh_every, self.refresh_cycles = refresh_every, refresh_cycles
        # Built here so a testbench can read what the DRAM holds (sim.chain reads the FC weights).
        self.mem = memory.Memory(shape=width, depth=depth, init=list(init), attrs=NO_RW_CHECK)
        super().__init__({"port": In(DramQueueSignature(width, depth))})

    def elaborate(self, platform):
        m = Module()
        write, read = self.port.write, self.port.read
        m.submodules.mem = mem = self.mem

        available = Signal(init=1)
        if self.refresh_every:
            clock = Signal(range(self.refresh_every))
            m.d.sync += clock.eq(ring_successor(clock, self.refresh_every))
            m.d.comb += available.eq(clock >= self.refresh_cycles)

        read_room, write_room = self._bandwidth(m, read.cmd.valid & available)
        commands = m.submodules.write_commands = Fifo(range(self.depth), WRITE_COMMANDS)
        connect(m, flipped(write.cmd), commands.i)
        m.d.comb += [commands.i.valid.eq(write.cmd.valid & available),
                     write.cmd.ready.eq(commands.i.ready & available)]
        port = mem.write_port()
        m.d.comb += [
            port.addr.eq(commands.o.payload), port.data.eq(write.data.payload),
            port.en.eq(write.data.valid & write.data.ready),
            write.data.ready.eq(commands.o.valid & write_room), commands.o.ready.eq(write.data.valid & write_room),
        ]

        # A read's address travels `latency` - 1 registers, then the memory's read register.
        m.d.comb += read.cmd.ready.eq(available & read_room)
        valid, addr = read.cmd.valid & available & read_room, read.cmd.payload
        for _ in range(self.latency - 1):
            valid_next, addr_next = Signal(), Signal.like(addr)
            m.d.sync += [valid_next.eq(valid), addr_next.eq(addr)]
            valid, addr = valid_next, addr_next
        m.d.comb += read.data.payload.eq(read_register(m, mem, addr, valid))
        m.d.sync += [read.data.valid.eq(valid),
                     Assert(~read.data.valid | read.data.ready, "simulated DRAM: a read word not taken")]
        return m

    def _bandwidth(self, m, read_wanted):
        """(room for a read this cycle, room for a write): a bucket refilled by the bandwidth's
        bits every cycle, a read served before a write."""
        if self.bandwidth is None:
            return 1, 1
        refill, per = self.bandwidth.numerator, self.bandwidth.denominator
        cost = self.width * per  # a word, in 1/per bits
        cap = max(refill, 2 * cost)
        bucket = Signal(range(cap + refill + 1), init=cap)
        read_room = bucket >= cost
        write_room = bucket >= cost * (1 + (read_wanted & read_room))
        spent = Signal(range(2 * cost + 1))
        write = self.port.write.data
        m.d.comb += spent.eq(Mux(read_wanted & read_room, cost, 0) + Mux(write.valid & write.ready, cost, 0))
        after = bucket + refill - spent
        m.d.sync += bucket.eq(Mux(after > cap, cap, after))
        return read_room, write_room


def simulated_drams(node, bits_per_cycle=None, **options):
    """{queue name: a :class:`SimulatedDram` for it}, each holding the queue's first words
    (``node.dram_init``: the FC weights). The node's DRAM moves ``bits_per_cycle`` (None: no
    limit), shared by its queues in proportion to the bits each moves per sample
    (``node.dram_traffic``): mapping/perf.py prices a node's DRAM as one sum of traffic, which
    queues sharing it so all finish in. ``options``: latency and refresh."""
    total = sum(node.dram_traffic.values())
    return {name: SimulatedDram(signature.width, signature.depth, init=node.dram_init.get(name, ()),
                                bits_per_cycle=None if bits_per_cycle is None else
                                Fraction(bits_per_cycle) * node.dram_traffic[name] / total, **options)
            for name, signature in node.dram_queues.items()}
