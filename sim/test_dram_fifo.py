"""DramFifo over the simulated DRAM: order and ``level`` exact at every cycle under random
stalls and refreshes, the ring reused many times over, one beat per cycle when nothing stalls."""

from fractions import Fraction

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped
from amaranth.lib import stream

from hw.base.checks import never_elaborated
from hw.base.signatures import DramQueueSignature
from hw.memory.dram_fifo import DramFifo
from hw.memory.dram_model import SimulatedDram
from hw.node.sfu import SFU
from sim.testbench import get, put, simulate


class QueueOverDram(wiring.Component):
    """A DramFifo and its SimulatedDram, with the queue's interface."""

    def __init__(self, width, depth, staging, **dram):
        self.depth, self.queue = depth, DramFifo(width, depth, staging=staging)
        self.dram = SimulatedDram(width, depth, **dram)
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width)),
                          "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue, m.submodules.dram = self.queue, self.dram
        connect(m, flipped(self.i), self.queue.i)
        connect(m, self.queue.o, flipped(self.o))
        connect(m, self.queue.dram, self.dram.port)
        m.d.comb += self.level.eq(self.queue.level)
        return m


def run(dut, values, rng, stall_in, stall_out, hold_out=0):
    """Push ``values`` and pop them back; a monitor checks ``level`` and the full flag every
    cycle. Returns (popped values, levels seen, cycles from the first push to the last pop)."""
    result, levels = {}, []

    async def producer(ctx):
        await put(ctx, dut.i, values, rng, stall_in)

    async def consumer(ctx):
        if hold_out:
            await ctx.tick().repeat(hold_out)
        result["out"] = await get(ctx, dut.o, len(values), rng, stall_out)

    async def monitor(ctx):
        expected = popped = 0
        while popped < len(values):
            _, _, i_valid, i_ready, o_valid, o_ready, level = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.level)
            assert level == expected, f"level {level}, handshakes say {expected}"
            assert not (i_ready and expected == dut.depth)  # full: nothing more goes in
            levels.append(level)
            pop = o_valid and o_ready
            expected += (i_valid and i_ready) - pop
            popped += pop

    simulate(dut, producer, consumer, monitor, deadline=40 * len(values) + 2 * hold_out + 200)
    return result["out"], np.array(levels)


@pytest.mark.parametrize("depth, stall_in, stall_out, hold_out, dram", [
    (37, 0.3, 0.3, 0, dict(latency=9)),                                       # balanced, ring wraps 4 times
    (37, 0.0, 0.5, 120, dict(latency=20, refresh_every=50, refresh_cycles=11)),  # runs full through refreshes
    (5, 0.2, 0.0, 0, dict(latency=3)),                                         # a ring smaller than the staging
])
def test_beats_in_order_with_exact_level(depth, stall_in, stall_out, hold_out, dram):
    rng = np.random.default_rng(depth + hold_out)
    values = rng.integers(0, 1 << 40, 150).tolist()
    out, levels = run(QueueOverDram(40, depth, staging=8, **dram), values, rng, stall_in, stall_out, hold_out)
    assert out == values
    if hold_out:
        assert levels.max() == depth  # filled to the last place of the ring, never past it


def test_one_beat_per_cycle_when_the_dram_keeps_up():
    """With the read latency under the staging depth, the queue streams at full rate: 200 beats
    leave in 200 cycles plus one beat's trip: 26 cycles, of which 20 are the DRAM's read latency."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 1 << 16, 200).tolist()
    out, levels = run(QueueOverDram(16, 64, staging=32, latency=20), values, rng, 0.0, 0.0)
    assert out == values
    trip = len(levels) - len(values)
    assert trip == 26, trip


@pytest.mark.parametrize("bits_per_cycle, cycles_per_beat", [(8, 4), (Fraction(32, 3), 3)])
def test_the_dram_moves_its_bandwidth_and_no_more(bits_per_cycle, cycles_per_beat):
    """Each 16-bit beat is written and read back: 32 bits of the DRAM's bandwidth, shared by
    reads and writes. At 8 bits per cycle 400 beats take 4 cycles each, at 32/3 three, plus one
    beat's trip (26 cycles at full rate, above)."""
    rng = np.random.default_rng(4)
    values = rng.integers(0, 1 << 16, 400).tolist()
    out, levels = run(QueueOverDram(16, 64, staging=32, latency=20, bits_per_cycle=bits_per_cycle), values, rng,
                      0.0, 0.0)
    assert out == values
    assert abs((len(levels) - 26) / len(values) - cycles_per_beat) < 0.01 * cycles_per_beat, len(levels)


def test_parameters_refused_by_name():
    with pytest.raises(ValueError, match=r"^dram-fifo: depth = 0 must be at least 1$"):
        DramFifo(8, 0)
    with pytest.raises(ValueError, match=r"^dram-fifo: staging = 2 must be at least 3$"):
        DramFifo(8, 10, staging=2)
    with pytest.raises(ValueError, match=r"^SimulatedDram: refresh_cycles = 8 must be at least 0 and below "
                                         r"refresh_every = 8 \(0: no refresh\)$"):
        SimulatedDram(8, 10, refresh_every=8, refresh_cycles=8)
    with pytest.raises(ValueError, match=r"^SimulatedDram: bits_per_cycle = 0 must be above 0 \(None: no limit\)$"):
        SimulatedDram(8, 10, bits_per_cycle=0)
    assert never_elaborated(DramFifo(24, 10)).dram.signature == DramQueueSignature(24, 10).flip()
    with pytest.raises(ValueError, match=r"^SFU: mask_storage must be one of chip, dram, not 'disk'$"):
        SFU(out_channels=2, height=4, width=4, lanes=2, position=0, mask_storage="disk")
