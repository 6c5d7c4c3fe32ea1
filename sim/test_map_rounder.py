"""MapRounder against numerics.requantize over a (C, H, W) tensor, bit for bit, with stalls."""

import numpy as np
import pytest

from hw.arith.map_rounder import MapRounder
from mapping import numerics
from sim.helpers import accumulators
from sim.testbench import as_ints, get, put, simulate

SEED = numerics.Formats().seed
SHIFT = 12
TENSOR = numerics.tensor_id(2, numerics.EB_OUT)


def run_map_rounder(rounder, sums, rng=None, stall=0.0):
    """``sums``: (beats, channels); returns (words, clock edges at which input beats were taken)."""
    state = {"now": 0, "taken": []}

    async def producer(ctx):
        await put(ctx, rounder.i, [{"values": [int(v) for v in beat]} for beat in sums], rng, stall)

    async def consumer(ctx):
        state["out"] = await get(ctx, rounder.o, len(sums), rng, stall, decode=as_ints)

    async def clock(ctx):
        async for _, _, valid, ready in ctx.tick().sample(rounder.i.valid, rounder.i.ready):
            state["now"] += 1
            if valid and ready:
                state["taken"].append(state["now"])

    deadline = int(len(sums) * rounder.chunks / (1 - stall) ** 2 * 3) + 60
    simulate(rounder, producer, consumer, processes=[clock], deadline=deadline)
    return np.array(state["out"], dtype=np.int64), state["taken"]


def golden(sums, channels, pixels, base, consecutive_beats=False):
    """requantize of each sample's (C, pixels) map, indices (base + c) * pixels + p, or with
    ``consecutive_beats`` base + p * channels + c."""
    words = np.empty_like(sums)
    c, p = np.arange(channels)[None, :], np.arange(pixels)[:, None]
    index = (base + p * channels + c if consecutive_beats else (base + c) * pixels + p).astype(np.uint64)
    for sample in range(len(sums) // pixels):
        rows = slice(sample * pixels, (sample + 1) * pixels)
        words[rows] = numerics.requantize(sums[rows], SHIFT, SEED, TENSOR, sample, index)
    return words


@pytest.mark.parametrize("channels, lanes, base", [(5, 2, 3), (32, 4, 0), (6, 6, 1), (7, 1, 0)])
def test_matches_requantize_with_stalls(channels, lanes, base):
    rng = np.random.default_rng(channels * 10 + lanes)
    pixels, samples = 6, 3
    sums = accumulators(rng, pixels * samples * channels, SHIFT, numerics.ACC_BITS).reshape(-1, channels)
    rounder = MapRounder(channels=channels, lanes=lanes, pixels=pixels, shift=SHIFT, seed=SEED,
                         tensor=TENSOR, channel_base=base)
    got, _ = run_map_rounder(rounder, sums, rng, stall=0.3)
    np.testing.assert_array_equal(got, golden(sums, channels, pixels, base))


@pytest.mark.parametrize("channels, lanes", [(5, 2), (4, 4)])
def test_consecutive_beats_round_a_flattened_vector(channels, lanes):
    """A fully connected layer's input errors, a pass of ``channels`` flattened inputs a beat."""
    rng = np.random.default_rng(channels)
    beats, samples, base = 3, 3, 7
    sums = accumulators(rng, beats * samples * channels, SHIFT, numerics.ACC_BITS).reshape(-1, channels)
    rounder = MapRounder(channels=channels, lanes=lanes, pixels=beats, shift=SHIFT, seed=SEED, tensor=TENSOR,
                         channel_base=base, consecutive_beats=True)
    got, _ = run_map_rounder(rounder, sums, rng, stall=0.3)
    np.testing.assert_array_equal(got, golden(sums, channels, beats, base, consecutive_beats=True))


def test_takes_each_pixel_with_its_first_chunk_one_per_chunks_cycles():
    """With no stall the input is taken every ``chunks`` cycles (5 channels, 2 lanes: 3), each
    beat in the first cycle the rounder can start it: the producer (an engine whose pipeline
    stalls while its output waits) is never held for the rounding."""
    rng = np.random.default_rng(4)
    sums = accumulators(rng, 8 * 5, SHIFT, numerics.ACC_BITS).reshape(-1, 5)
    rounder = MapRounder(channels=5, lanes=2, pixels=4, shift=SHIFT, seed=SEED, tensor=TENSOR)
    got, taken = run_map_rounder(rounder, sums)
    np.testing.assert_array_equal(got, golden(sums, 5, 4, 0))
    assert rounder.chunks == 3 and taken == list(range(1, 1 + 3 * 8, 3))


@pytest.mark.parametrize("kwargs, message", [
    ({"channels": 4, "lanes": 5}, "map rounder: lanes = 5 exceeds the 4 channels"),
    ({"channels": 4, "lanes": 0}, "map rounder: lanes = 0 must be at least 1"),
])
def test_refuses_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        MapRounder(**kwargs, pixels=4, shift=SHIFT, seed=SEED, tensor=TENSOR)
