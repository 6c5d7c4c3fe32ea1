"""The fully connected layer's corner turns (hw/memory/fc_store.py) against the flatten order."""

import numpy as np
import pytest

from hw.memory.fc_store import DeepFcErrorStore, DeepFcWindowStore, ErrorReplay, FcErrorStore, FcWindowStore
from sim.testbench import as_ints, get, put, simulate


def windows_of(maps, tiles, replays):
    """The engine's windows of each (C, H, W) sample: pass i's flattened inputs i*tiles ..
    (zero past C*H*W), passes 0 .. v-1 ``replays`` times."""
    samples, inputs = maps.shape[0], maps[0].size
    passes = -(-inputs // tiles)
    padded = np.zeros((samples, passes * tiles), np.int64)
    padded[:, :inputs] = maps.reshape(samples, -1)  # (c, y, x) row-major
    flat = padded.reshape(samples, passes, tiles)
    return [list(map(int, flat[s, i])) for s in range(samples) for _ in range(replays) for i in range(passes)]


def pixels_of(maps):
    samples, c, h, w = maps.shape
    return [list(map(int, maps[s, :, y, x])) for s in range(samples) for y in range(h) for x in range(w)]


def run_store(dut, beats, count, rng=None, stall=0.0):
    """``beats`` into ``dut.i``, ``count`` beats out of ``dut.o``, each side stalled at random
    with probability ``stall``; returns (the output beats, the clock edges they were taken at)."""
    edges = {"now": 0, "taken": []}
    out = []

    async def source(ctx):
        await put(ctx, dut.i, beats, rng, stall)

    async def sink(ctx):
        out.extend(await get(ctx, dut.o, count, np.random.default_rng(1), stall, as_ints))

    async def clock(ctx):
        async for _, _, valid, ready in ctx.tick().sample(dut.o.valid, dut.o.ready):
            edges["now"] += 1
            if valid and ready:
                edges["taken"].append(edges["now"])

    simulate(dut, source, sink, processes=[clock], deadline=40 * count + 100)
    return out, edges["taken"]


@pytest.mark.parametrize("store", [FcWindowStore, DeepFcWindowStore])
@pytest.mark.parametrize("channels, height, width, tiles, replays, stall", [
    (5, 2, 3, 12, 3, 0.3),  # two channels a pass, the last pass padded; random stalls both sides
    (3, 2, 3, 4, 2, 0.3),   # passes across channel boundaries
    (2, 3, 3, 3, 1, 0.0),   # a pass a third of a channel
    (4, 1, 1, 4, 1, 0.0),   # one pixel, one pass: a plain FIFO of two samples
    (6, 2, 2, 24, 2, 0.0),  # one pass, full rate both sides
])
def test_window_store_gives_each_pass_of_every_pixel_in_flatten_order(channels, height, width, tiles, replays, stall,
                                                                      store):
    rng = np.random.default_rng(channels + tiles)
    samples = 4
    maps = rng.integers(-2**15, 2**15, (samples, channels, height, width))
    dut = store(channels=channels, pixels=height * width, tiles=tiles, replays=replays)
    expected = windows_of(maps, tiles, replays)
    assert run_store(dut, pixels_of(maps), len(expected), rng, stall)[0] == expected


@pytest.mark.parametrize("store", [FcErrorStore, DeepFcErrorStore])
@pytest.mark.parametrize("channels, height, width, tiles, stall", [(5, 2, 3, 12, 0.3), (3, 2, 3, 4, 0.3),
                                                                   (6, 2, 2, 3, 0.0), (2, 3, 3, 3, 0.0)])
def test_error_store_turns_passes_back_into_pixels(channels, height, width, tiles, stall, store):
    rng = np.random.default_rng(channels)
    samples = 4
    maps = rng.integers(-2**15, 2**15, (samples, channels, height, width))
    dut = store(channels=channels, pixels=height * width, tiles=tiles)
    expected = pixels_of(maps)
    assert run_store(dut, windows_of(maps, tiles, 1), len(expected), rng, stall)[0] == expected


def test_window_store_takes_a_pixel_per_cycle_and_gives_a_window_per_cycle():
    """Unstalled, a sample of P pixels and v passes G times costs max(P, G*v) cycles: the two
    slots let the next sample's pixels in while this one's windows leave."""
    channels, pixels, tiles, replays, samples = 4, 3, 6, 2, 6
    dut = FcWindowStore(channels=channels, pixels=pixels, tiles=tiles, replays=replays)
    maps = np.arange(samples * channels * pixels).reshape(samples, channels, 1, pixels)
    expected = windows_of(maps, tiles, replays)
    out, taken = run_store(dut, pixels_of(maps), len(expected))
    assert out == expected
    assert set(np.diff(taken)[4:]) == {1}


def test_the_stores_refuse_more_tiles_than_channels():
    with pytest.raises(ValueError, match=r"^fc window store: tiles = 9 exceeds the 8 inputs of 4 channels of 2 "
                                         r"pixels$"):
        FcWindowStore(channels=4, pixels=2, tiles=9, replays=1)
    with pytest.raises(ValueError, match=r"^fc error store: pixels = 0 must be at least 1$"):
        FcErrorStore(channels=4, pixels=0, tiles=2)


@pytest.mark.parametrize("replays, cycles_per_sample", [(8, 16), (2, 15)])
def test_deep_window_store_writes_a_channel_a_cycle(replays, cycles_per_sample):
    """A pixel of 4 channels takes 5 cycles (a take, then a word a cycle), a sample of 3 pixels
    15: with 8 replays of 2 passes (16 steps) the engine never waits; with 2 (4 steps) the
    writer sets the rate."""
    channels, pixels, tiles, samples = 4, 3, 6, 8
    dut = DeepFcWindowStore(channels=channels, pixels=pixels, tiles=tiles, replays=replays)
    maps = np.arange(samples * channels * pixels).reshape(samples, channels, 1, pixels)
    expected = windows_of(maps, tiles, replays)
    out, taken = run_store(dut, pixels_of(maps), len(expected))
    assert out == expected
    firsts = taken[::2 * replays]  # each sample's first window
    assert set(np.diff(firsts[2:])) == {cycles_per_sample}


def test_deep_error_store_reads_a_channel_a_cycle():
    """A pixel of 4 channels leaves every 7 cycles to a consumer always ready: its channel 0's
    place loaded, 4 reads, the last word's arrival, the beat taken."""
    channels, pixels, tiles, samples = 4, 3, 6, 4
    dut = DeepFcErrorStore(channels=channels, pixels=pixels, tiles=tiles)
    maps = np.arange(samples * channels * pixels).reshape(samples, channels, 1, pixels)
    expected = pixels_of(maps)
    out, taken = run_store(dut, windows_of(maps, tiles, 1), len(expected))
    assert out == expected
    assert set(np.diff(taken)[1:pixels]) == {channels + 3}


@pytest.mark.parametrize("consecutive", [False, True])
def test_error_replay_gives_each_sample_once_per_pass_in_the_walk_order(consecutive):
    """Group beats in; out again v times: the whole sample per pass (pass-major walk) or each
    beat v times before the next (group-major); random stalls on both sides."""
    lanes, groups, replays, samples = 3, 4, 3, 5
    rng = np.random.default_rng(7)
    beats = rng.integers(-2**15, 2**15, (samples, groups, lanes))
    dut = ErrorReplay(lanes=lanes, groups=groups, replays=replays, consecutive=consecutive)
    order = ([(r, g) for g in range(groups) for r in range(replays)] if consecutive
             else [(r, g) for r in range(replays) for g in range(groups)])
    expected = [list(map(int, beats[s, g])) for s in range(samples) for _, g in order]
    out, taken = run_store(dut, [list(map(int, b)) for b in beats.reshape(-1, lanes)], len(expected), rng, 0.3)
    assert out == expected


def test_error_replay_gives_a_beat_per_cycle():
    lanes, groups, replays, samples = 2, 3, 2, 4
    dut = ErrorReplay(lanes=lanes, groups=groups, replays=replays)
    beats = np.arange(samples * groups * lanes).reshape(-1, lanes)
    count = samples * groups * replays
    out, taken = run_store(dut, [list(map(int, b)) for b in beats], count)
    assert len(out) == count and set(np.diff(taken)[groups:]) == {1}
