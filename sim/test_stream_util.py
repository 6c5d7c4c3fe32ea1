import numpy as np
import pytest

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
