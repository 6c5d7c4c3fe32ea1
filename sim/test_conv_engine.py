"""ConvEngine against tensor_ops.conv_forward, bit for bit, with random stalls on both streams."""

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.hdl import Fragment

from hw.conv_engine import ConvEngine
from mapping import tensor_ops
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.testbench import EngineWithWeights, as_ints, get, put, simulate


def weight_rows(weights, ces, rng):
    """ROM rows: row g, bank p = output channel g*P + p flattened (S, K, K); rows past OC are junk."""
    oc = weights.shape[0]
    taps = weights[0].size
    groups = -(-oc // ces)
    junk = rng.integers(WORD_MIN, WORD_MAX + 1, (groups * ces, taps))
    flat = np.concatenate([weights.reshape(oc, taps), junk[oc:]])
    return [[[int(v) for v in flat[g * ces + p]] for p in range(ces)] for g in range(groups)]


def expected_beats(out, ces):
    """Partial-sum beats of conv_forward's (OC, OH, OW) output: per pixel, ceil(OC/P) groups."""
    oc = out.shape[0]
    groups = -(-oc // ces)
    padded = np.zeros((groups * ces,) + out.shape[1:], dtype=np.int64)
    padded[:oc] = out
    # (OH, OW, G, P) in raster order, then group.
    return padded.reshape(groups, ces, -1).transpose(2, 0, 1).reshape(-1, ces)


@dataclass
class Run:
    got: np.ndarray
    want: np.ndarray
    transfers: list  # clock edges (counted from 1) at which a partial-sum beat was taken
    simulated: int   # clock edges simulated in all
    latency: int


def run_engine(*, channels, kernel, ces, out_channels, size, stride=1, padding=0, rng,
               stall=0.0, samples=1, family=None, deadline=None):
    shape = (channels, size, size)
    xs = [rng.integers(WORD_MIN, WORD_MAX + 1, shape) for _ in range(samples)]
    weights = rng.integers(WORD_MIN, WORD_MAX + 1, (out_channels, channels, kernel, kernel))
    # Extremes on one sample: the largest products and sums the words allow.
    xs[0][:, 0, :] = WORD_MIN
    weights[0] = WORD_MIN
    engine = ConvEngine(channels=channels, kernel=kernel, ces=ces, out_channels=out_channels, family=family)
    dut = EngineWithWeights(engine, weight_rows(weights, ces, rng))
    windows = [[int(v) for v in win.reshape(-1)]
               for x in xs for row in tensor_ops.windows(x, kernel, stride, padding) for win in row]
    want = np.concatenate([expected_beats(tensor_ops.conv_forward(x, weights, stride, padding), ces)
                           for x in xs])
    state = {"now": 0, "transfers": []}

    async def producer(ctx):
        await put(ctx, dut.windows, windows, rng, stall)

    async def consumer(ctx):
        state["beats"] = await get(ctx, dut.psums, len(want), rng, stall, decode=lambda p: as_ints(p.values))

    async def clock(ctx):
        async for _, _, valid, ready in ctx.tick().sample(dut.psums.valid, dut.psums.ready):
            state["now"] += 1
            if valid and ready:
                state["transfers"].append(state["now"])

    if deadline is None:
        deadline = int(len(want) / (1 - stall) ** 2 * 3) + engine.latency + 20
    simulate(dut, producer, consumer, processes=[clock], deadline=deadline)
    return Run(np.array(state["beats"], dtype=np.int64).reshape(want.shape), want, state["transfers"],
               state["now"], engine.latency)


CORNERS = {
    # name: (channels, kernel, ces, out_channels, size, stride, padding)
    "3x3-pad-oc-not-multiple-of-p": (3, 3, 2, 5, 5, 1, 1),
    "1x1-kernel": (4, 1, 3, 7, 3, 1, 0),
    "5x5-stride-2": (2, 5, 2, 4, 7, 2, 2),
    "one-ce": (2, 3, 1, 3, 4, 1, 1),
    "one-pixel-map": (3, 3, 4, 6, 1, 1, 1),
    "oc-below-p": (1, 3, 4, 3, 3, 2, 1),
}


@pytest.mark.parametrize("name", CORNERS)
def test_matches_conv_forward_with_stalls(name):
    channels, kernel, ces, out_channels, size, stride, padding = CORNERS[name]
    run = run_engine(channels=channels, kernel=kernel, ces=ces, out_channels=out_channels, size=size,
                     stride=stride, padding=padding, rng=np.random.default_rng(len(name)), stall=0.3)
    np.testing.assert_array_equal(run.got, run.want)


def test_one_beat_per_cycle_with_continuous_input():
    """Two samples back to back, no stall: a beat every cycle from the first at latency + 1."""
    run = run_engine(channels=2, kernel=3, ces=2, out_channels=4, size=4, padding=1,
                     rng=np.random.default_rng(5), samples=2)
    np.testing.assert_array_equal(run.got, run.want)
    assert run.transfers == list(range(run.latency + 1, run.latency + len(run.want) + 1))


def test_from_slice_reads_the_fp_engine():
    from mapping.nodeconfig import Engine, LayerSlice

    fields = dict(layer="conv2", position=1, kind="conv", mode="icp", in_shape=(8, 6, 6),
                  out_shape=(10, 6, 6), kernel=3, stride=1, padding=1, bias=True, relu=True, pool=None,
                  in_range=(2, 5), out_range=(0, 10), first=False, last=False, needs_eb=True,
                  fp=Engine(ces=4, tiles=3, kernel=3), eb=Engine(ces=3, tiles=4, kernel=3),
                  pg=Engine(ces=1, tiles=1, kernel=3), act_ram_words=0, line_buffer_words=0,
                  pab_words=0, lgb_words=0, weights_offchip=False)
    engine = ConvEngine.from_slice(LayerSlice(**fields))
    assert (engine.channels, engine.kernel, engine.ces, engine.out_channels, engine.groups) == (3, 3, 4, 10, 3)
    mults = [name for _, name, _ in Fragment.get(engine, None).subfragments if name.startswith("mult_")]
    assert len(mults) == engine.multipliers == 4 * 3 * 9
    with pytest.raises(ValueError, match="FP engine of 2 tiles of 3x3, but its slice needs 3 tiles"):
        ConvEngine.from_slice(LayerSlice(**{**fields, "fp": Engine(ces=4, tiles=2, kernel=3)}))


def test_refuses_zero_ces():
    with pytest.raises(ValueError, match="ces = 0 must be at least 1"):
        ConvEngine(channels=1, kernel=3, ces=0, out_channels=4)
