import numpy as np

from hw.node.loss import LossUnit
from hw.streams.flatten import Flatten, Unflatten
from mapping import numerics
from sim.testbench import as_ints, get, put, simulate


def test_loss_errors_match_the_golden_definition_under_stalls():
    rng = np.random.default_rng(5)
    formats = numerics.Formats()
    classes, samples, position = 10, 12, 7
    scores = rng.integers(-2**15, 2**15, (samples, classes))
    scores[0] = numerics.WORD_MAX  # saturation of the shifted difference
    labels = rng.integers(0, classes, samples)
    dut = LossUnit(classes=classes, position=position, formats=formats)
    out = []

    async def feed_scores(ctx):
        await put(ctx, dut.scores, [list(map(int, s)) for s in scores], rng, 0.3)

    async def feed_labels(ctx):
        await put(ctx, dut.labels, list(map(int, labels)), np.random.default_rng(1), 0.5)

    async def sink(ctx):
        out.extend(await get(ctx, dut.errors, samples, np.random.default_rng(2), 0.3, as_ints))

    simulate(dut, feed_scores, feed_labels, sink, deadline=2000)
    tensor = numerics.tensor_id(position, numerics.LOSS_ERROR)
    for s in range(samples):
        diff = scores[s] - (np.eye(classes, dtype=np.int64)[labels[s]] << formats.act_frac)
        expected = numerics.requantize(diff, formats.loss_shift, formats.seed, tensor, s)
        assert out[s] == list(expected), s


def test_flatten_and_unflatten_follow_row_major_chw_order():
    rng = np.random.default_rng(6)
    c, h, w, samples = 3, 2, 3, 3
    maps = rng.integers(-2**15, 2**15, (samples, c, h, w))
    pixels = [list(map(int, maps[s][:, y, x])) for s in range(samples) for y in range(h) for x in range(w)]
    flat_dut, flat_out = Flatten(c, h, w), []

    async def src(ctx):
        await put(ctx, flat_dut.i, pixels, rng, 0.3)

    async def snk(ctx):
        flat_out.extend(await get(ctx, flat_dut.o, samples, rng, 0.5, as_ints))

    simulate(flat_dut, src, snk, deadline=1000)
    assert flat_out == [list(maps[s].reshape(-1)) for s in range(samples)]

    unflat_dut, unflat_out = Unflatten(c, h, w), []

    async def src2(ctx):
        await put(ctx, unflat_dut.i, flat_out, rng, 0.3)

    async def snk2(ctx):
        unflat_out.extend(await get(ctx, unflat_dut.o, len(pixels), rng, 0.3, as_ints))

    simulate(unflat_dut, src2, snk2, deadline=1000)
    assert unflat_out == pixels
