from types import SimpleNamespace

import numpy as np
import pytest

from hw.node.loss import LossUnit
from mapping import golden, numerics
from sim.testbench import as_ints, get, put, simulate


@pytest.mark.parametrize("classes", [10, 37])  # 37: three chunks of LOSS_LANES, the last one short
@pytest.mark.parametrize("loss", numerics.LOSSES)
def test_loss_errors_match_the_golden_model_under_stalls(loss, classes):
    rng = np.random.default_rng(5)
    formats = numerics.Formats(loss=loss)
    samples, position = 12, 7
    if loss == "mse":
        scores = rng.integers(-2**15, 2**15, (samples, classes))
    else:  # spreads of a few units, where softmax is neither uniform nor one-hot
        scores = numerics.saturate(rng.normal(0, rng.uniform(0.1, 8, (samples, 1)) * 256, (samples, classes)))
    scores[0] = numerics.WORD_MAX  # MSE: saturation of the shifted difference; CE: all tied
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
    arith, last = golden.arithmetic("fixed", formats), SimpleNamespace(position=position)
    for s in range(samples):
        y, onehot = scores[s].astype(np.int64).reshape(classes, 1, 1), np.eye(classes)[labels[s]].reshape(classes, 1, 1)
        assert out[s] == list(arith.loss_error(y, onehot, last, s).ravel()), s
    if loss == "ce":  # p - onehot is within [-1, 1]: no error saturates
        assert 0 < max(max(map(abs, e)) for e in out) <= 1 << formats.error_frac
