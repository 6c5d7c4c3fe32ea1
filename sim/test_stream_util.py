import numpy as np
import pytest
from amaranth.hdl import Module, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.base.handshake import lockstep
from hw.memory.fifo import Fifo
from hw.streams.channels import ChannelConcat, ChannelFork
from sim.testbench import as_ints, get, put, simulate


@pytest.mark.parametrize("seed", [0, 1])
def test_fork_delivers_every_beat_to_every_range_under_stalls(seed):
    rng = np.random.default_rng(seed)
    ranges = [(0, 2), (2, 5), (1, 4)]
    dut = ChannelFork(5, ranges)
    pixels = [[int(v) for v in rng.integers(-2**15, 2**15, 5)] for _ in range(60)]
    received = [None] * len(ranges)

    async def source(ctx):
        await put(ctx, dut.i, pixels, rng, 0.3)

    def sink(n, stall):
        async def bench(ctx):
            received[n] = await get(ctx, dut.outputs()[n], len(pixels), np.random.default_rng(seed + 10 + n),
                                    stall, as_ints)
        return bench

    simulate(dut, source, *(sink(n, s) for n, s in enumerate([0.0, 0.5, 0.8])), deadline=3000)
    for n, (lo, hi) in enumerate(ranges):
        assert received[n] == [p[lo:hi] for p in pixels]


def test_concat_joins_channels_in_order_under_stalls():
    rng = np.random.default_rng(3)
    counts = [1, 3, 2]
    dut = ChannelConcat(counts)
    parts = [[[int(v) for v in rng.integers(-2**15, 2**15, c)] for _ in range(50)] for c in counts]
    out = []

    def source(n):
        async def bench(ctx):
            await put(ctx, dut.inputs()[n], parts[n], np.random.default_rng(20 + n), 0.4)
        return bench

    async def sink(ctx):
        out.extend(await get(ctx, dut.o, 50, rng, 0.3, as_ints))

    simulate(dut, *(source(n) for n in range(3)), sink, deadline=3000)
    assert out == [a + b + c for a, b, c in zip(*parts)]


def test_fork_refuses_a_range_outside_the_channels():
    with pytest.raises(ValueError, match=r"channel fork: range \(2, 6\) is outside 0..5"):
        ChannelFork(5, [(2, 6)])


class LockstepPair(wiring.Component):
    """A source split by hw.base.handshake.lockstep between a leader stream and a FIFO."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(8)), "leader": Out(stream.Signature(8)),
                          "follower": Out(stream.Signature(8))})

        self.fifo = Fifo(unsigned(8), 3)

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = self.fifo
        lockstep(m, self.i, self.leader, fifo.i)
        m.d.comb += [self.leader.payload.eq(self.i.payload), fifo.i.payload.eq(self.i.payload)]
        wiring.connect(m, fifo.o, wiring.flipped(self.follower))
        return m


def test_lockstep_follower_takes_each_beat_in_the_leader_s_cycle():
    """No beat enters the follower while the leader holds back (a leader behind an update gate:
    a fork would let the follower take it), and each enters in the cycle the leader takes it;
    both consumers stall at random, the follower's FIFO filling and holding the leader back."""
    rng = np.random.default_rng(8)
    dut, beats, got = LockstepPair(), list(range(200)), {}
    HELD = 50

    async def source(ctx):
        await put(ctx, dut.i, beats, rng, 0.2)

    async def leader(ctx):
        await ctx.tick().repeat(HELD)
        got["leader"] = await get(ctx, dut.leader, len(beats), rng, 0.5, decode=int)

    async def follower(ctx):
        got["follower"] = await get(ctx, dut.follower, len(beats), rng, 0.7, decode=int)

    async def monitor(ctx):
        cycle = 0
        async for _, _, leader_taken, follower_in in ctx.tick().sample(
                dut.leader.valid & dut.leader.ready, dut.fifo.i.valid & dut.fifo.i.ready):
            assert leader_taken == follower_in
            assert cycle >= HELD or not follower_in
            cycle += 1

    simulate(dut, source, leader, follower, processes=[monitor], deadline=5000)
    assert got["leader"] == beats and got["follower"] == beats
