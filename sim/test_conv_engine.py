"""FPEngine against tensor_ops.conv_forward, bit for bit, with random stalls on both streams."""

import numpy as np
import pytest

from hw.engines.fp_engine import FPEngine
from mapping.nodeconfig import Engine
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.helpers import eb_slice, expected_beats, lpram_rows, mults, run_engine
from sim.testbench import EngineWithWeights, as_ints, get, put, simulate

CORNERS = {
    # name: (channels S, kernel, ces P, out_channels, size, stride, padding, tiles b)
    "3x3-pad-oc-not-multiple-of-p": (3, 3, 2, 5, 5, 1, 1, None),
    "1x1-kernel": (4, 1, 3, 7, 3, 1, 0, None),
    "5x5-stride-2": (2, 5, 2, 4, 7, 2, 2, None),
    "one-ce": (2, 3, 1, 3, 4, 1, 1, None),
    "one-pixel-map": (3, 3, 4, 6, 1, 1, 1, None),
    "oc-below-p": (1, 3, 4, 3, 3, 2, 1, None),
    "fold-3x3-s5-b2-padded-pass": (5, 3, 2, 5, 4, 1, 1, 2),
    "fold-1x1-s5-b2-padded-pass": (5, 1, 2, 5, 3, 1, 0, 2),
    "fold-3x3-s4-b2-exact-passes": (4, 3, 2, 5, 4, 2, 1, 2),
    "fold-1x1-s4-b2-exact-passes": (4, 1, 3, 7, 3, 1, 0, 2),
    "fold-b-equals-s": (3, 3, 2, 5, 4, 1, 1, 3),
    "fold-one-tile-one-ce": (3, 3, 1, 2, 3, 1, 1, 1),
}


@pytest.mark.parametrize("name", CORNERS)
def test_matches_conv_forward_with_stalls(name):
    channels, kernel, ces, out_channels, size, stride, padding, tiles = CORNERS[name]
    run = run_engine(channels=channels, kernel=kernel, ces=ces, out_channels=out_channels, size=size,
                     stride=stride, padding=padding, tiles=tiles, rng=np.random.default_rng(len(name)),
                     stall=0.3)
    np.testing.assert_array_equal(run.got, run.want)


@pytest.mark.parametrize("channels, kernel, tiles, passes, latency", [
    (2, 3, None, 1, 1 + 2 + 5),     # unfolded: adder tree of 18 products, 5 levels
    (5, 3, 2, 3, 1 + 2 + 5 + 1),    # 3 passes, the last one half padding; + the accumulator
    (4, 1, 2, 2, 1 + 2 + 1 + 1),    # 1x1: a tree of 2 products, 1 level
])
def test_g_times_v_cycles_per_window_with_continuous_input(channels, kernel, tiles, passes, latency):
    """Two samples back to back, no stall: a beat every v cycles from the first at latency + v.

    The window's first step issues in cycle 0, so the last of its W*G beats leaves on
    edge latency + W*G*v: every multiplier busy every cycle.
    """
    run = run_engine(channels=channels, kernel=kernel, ces=2, out_channels=5, size=4, padding=kernel // 2,
                     tiles=tiles, rng=np.random.default_rng(5), samples=2)
    np.testing.assert_array_equal(run.got, run.want)
    assert (run.engine.passes, run.engine.latency) == (passes, latency)
    beats = 2 * 16 * 3  # samples x pixels x groups
    assert run.transfers == [latency + passes * n for n in range(1, beats + 1)]


def test_a_stopped_consumer_holds_the_engine_after_latency_plus_one_results():
    """The pipeline never stalls: with the consumer stopped, windows enter until every place of
    the output buffer (latency + 1) is promised, then none; the results then leave in order."""
    engine = FPEngine(channels=1, kernel=1, ces=1, out_channels=1)  # a result per window
    dut = EngineWithWeights(engine, [[[1]]])  # weight 1: each result is its window's word
    capacity = engine.latency + 1
    results = []

    async def bench(ctx):
        ctx.set(dut.windows.valid, 1)
        accepted = 0
        for _ in range(4 * capacity):
            ctx.set(dut.windows.payload, [accepted + 1])
            _, _, ready = await ctx.tick().sample(dut.windows.ready)
            accepted += ready
        assert accepted == capacity
        ctx.set(dut.windows.valid, 0)
        ctx.set(dut.psums.ready, 1)
        for _ in range(2 * capacity):
            _, _, valid, payload = await ctx.tick().sample(dut.psums.valid, dut.psums.payload)
            if valid:
                results.append(int(payload.values[0]))

    simulate(dut, bench)
    assert results == list(range(1, capacity + 1))


def fp_slice(**changes):
    """eb_slice's layer with the PG engine of no interest here."""
    return eb_slice(**({"pg": Engine(ces=1, tiles=1, kernel=3)} | changes))


@pytest.mark.parametrize("tiles, passes", [(3, 1), (2, 2), (1, 3)])
def test_from_slice_reads_the_fp_engine(tiles, passes):
    engine = FPEngine.from_slice(fp_slice(fp=Engine(ces=4, tiles=tiles, kernel=3)))
    assert (engine.channels, engine.kernel, engine.ces, engine.out_channels) == (3, 3, 4, 10)
    assert (engine.tiles, engine.passes, engine.groups, engine.rows) == (tiles, passes, 3, 3 * passes)
    assert mults(engine) == engine.multipliers == 4 * tiles * 9


def test_from_slice_refuses_a_mismatched_fp_engine():
    with pytest.raises(ValueError, match=r"FP engine of 4 tiles of 3x3, but its slice needs at most 3 tiles "
                                         r"\(one per input channel\) of 3x3"):
        FPEngine.from_slice(fp_slice(fp=Engine(ces=4, tiles=4, kernel=3)))
    with pytest.raises(ValueError, match="FP engine of 2 tiles of 5x5, but its slice needs at most 3 tiles"):
        FPEngine.from_slice(fp_slice(fp=Engine(ces=4, tiles=2, kernel=5)))


def test_refuses_zero_ces_and_tiles_outside_the_channels():
    with pytest.raises(ValueError, match="ces = 0 must be at least 1"):
        FPEngine(channels=1, kernel=3, ces=0, out_channels=4)
    for tiles in (0, 4):
        with pytest.raises(ValueError, match=f"conv engine: tiles = {tiles} is not between 1 and "
                                             f"the slice's 3 input channels"):
            FPEngine(channels=3, kernel=3, ces=2, out_channels=4, tiles=tiles)


@pytest.mark.parametrize("channels, ces, out_channels, tiles, stall", [
    (10, 2, 5, 4, 0.3),  # three passes, the last one half padding; OC not a multiple of P
    (6, 3, 3, 6, 0.0),   # one pass, one group
])
def test_pass_windows_sum_a_fully_connected_layer_from_the_stores_windows(channels, ces, out_channels, tiles, stall):
    """``pass_windows`` (hw/memory/fc_store.FcWindowStore's beats): each step takes pass i's
    words, passes 0 .. v-1 once per group; the partial sums are the layer's W @ x."""
    rng = np.random.default_rng(channels)
    samples = 3
    xs = rng.integers(WORD_MIN, WORD_MAX + 1, (samples, channels))
    weights = rng.integers(WORD_MIN, WORD_MAX + 1, (out_channels, channels, 1, 1))
    xs[0], weights[0] = WORD_MIN, WORD_MIN
    engine = FPEngine(channels=channels, kernel=1, ces=ces, out_channels=out_channels, tiles=tiles, pass_windows=True)
    dut = EngineWithWeights(engine, lpram_rows(weights, ces, tiles, rng).tolist())
    padded = np.zeros((samples, engine.passes * tiles), np.int64)
    padded[:, :channels] = xs
    windows = [list(map(int, padded[s, i * tiles:(i + 1) * tiles]))
               for s in range(samples) for _ in range(engine.groups) for i in range(engine.passes)]
    want = np.concatenate([expected_beats((weights[:, :, 0, 0] @ x).reshape(-1, 1, 1), ces)
                           for x in xs])
    got = {}

    async def producer(ctx):
        await put(ctx, dut.windows, windows, rng, stall)

    async def consumer(ctx):
        got["beats"] = await get(ctx, dut.psums, len(want), rng, stall, decode=lambda p: as_ints(p.values))

    simulate(dut, producer, consumer, deadline=int(len(windows) / (1 - stall) ** 2 * 3) + engine.latency + 40)
    np.testing.assert_array_equal(np.array(got["beats"]), want)
