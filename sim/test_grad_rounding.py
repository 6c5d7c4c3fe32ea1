"""GradientRounder: PG's gradient terms rounded into a narrow sum's grid, bit for bit as
``numerics.accumulate`` rounds them (the noise of ``numerics.grad_noise``)."""

import numpy as np
import pytest

from hw.base.layouts import bias_grads_layout, grads_layout
from hw.memory.grad_rounding import GradientRounder
from mapping import numerics
from mapping.numerics import Formats
from sim.helpers import layer_slice
from sim.testbench import get, put, simulate

SAMPLES = 2


def expected(rounder, beats, shift, tensor, seed, bias):
    """Each beat's terms rounded with the definition's noise: beat n is step n % (G*v) of
    pixel (n // (G*v)) % pixels of sample n // (G*v*pixels)."""
    steps = rounder.groups * rounder.passes
    out = []
    for n, (row, values) in enumerate(beats):
        step, pixel, sample = n % steps, (n // steps) % rounder.pixels, n // (steps * rounder.pixels)
        g, i = divmod(step, rounder.passes)
        base = rounder.base + g * rounder.group_stride + i * rounder.pass_stride
        lanes = np.arange(rounder.banks)[:, None] * rounder.bank_stride + np.arange(rounder.words)[None, :]
        r = numerics.grad_noise(seed, tensor, sample, [pixel], base + lanes)[0] & np.uint64((1 << shift) - 1)
        terms = np.asarray(values).reshape(rounder.banks, rounder.words)
        out.append((row, ((terms + r.astype(np.int64)) >> shift).reshape(np.shape(values))))
    return out


@pytest.mark.parametrize("bias", [False, True])
def test_rounded_terms_are_the_definitions(bias):
    rng = np.random.default_rng(5 + bias)
    # A folded slice inside its layer: output channels 2..4 of 6 in groups of 2, input
    # channels 1..3 of 5 in passes of 2, 3x3: every stride of the index is exercised. Its
    # biases are its own output channels' where it is OCP (an ICP slice's are the layer's).
    s = layer_slice(in_channels=(1, 4), in_total=5, out_channels=(2, 5), out_total=6, kernel=3, ces=2, tiles=2,
                    mode="ocp" if bias else "icp")
    f = Formats(grad_bits=16)
    groups, passes, words = 2, 2, 2 * 9
    layout = bias_grads_layout(groups, 2) if bias else grads_layout(groups * passes, 2, words)
    rounder = GradientRounder.from_slice(s, f, layout, bias=bias)
    shift = f.bias_grad_shift if bias else f.grad_shift
    kind = numerics.BIAS_GRAD_SUM if bias else numerics.GRAD_SUM
    beats = []
    for _ in range(SAMPLES * rounder.pixels):
        for g in range(groups):
            for i in range(passes):
                if bias:
                    values = rng.integers(-(1 << 15), 1 << 15, 2) * (i == 0)
                    beats.append((g, values))
                else:
                    beats.append((g * passes + i, rng.integers(-(1 << 29), 1 << 29, (2, words))))
    # Zero terms (padding) must stay zero.
    beats[3] = (beats[3][0], np.zeros_like(beats[3][1]))
    want = expected(rounder, beats, shift, numerics.tensor_id(s.position, kind), f.seed, bias)
    got, _ = run(rounder, beats, bias, rng, stall=(0.2, 0.3))
    assert [row for row, _ in got] == [row for row, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert np.array_equal(a, b)
    assert np.array_equal(want[3][1], np.zeros_like(want[3][1]))


def run(rounder, beats, bias, rng, stall):
    """The rounded beats, and the cycles from the first beat offered to the last taken."""
    got, cycles = [], []

    async def feed(ctx):
        await put(ctx, rounder.i, [{"row": row, "values": values.tolist()} for row, values in beats], rng, stall[0])

    async def drain(ctx):
        got.extend(await get(ctx, rounder.o, len(beats), rng, stall[1],
                             decode=lambda p: (int(p.row), np.array([[int(v) for v in bank] for bank in p.values])
                                               if not bias else np.array([int(v) for v in p.values]))))

    async def clock(ctx):
        async for _ in ctx.tick():
            cycles.append(len(got))

    simulate(rounder, feed, drain, processes=[clock], deadline=4 * len(beats) + 40)
    return got, cycles.index(len(beats)) + 1


def test_one_beat_per_pixel_at_full_rate():
    """A slice of one PG step per pixel (P = O, b = S) takes a beat every cycle, each with a
    noise word of its own: the noise is computed ahead, so only the first beat waits for it."""
    rng = np.random.default_rng(2)
    s = layer_slice(in_channels=(0, 2), out_channels=(0, 2), kernel=1, ces=2)
    f = Formats(grad_bits=16)
    rounder = GradientRounder.from_slice(s, f, grads_layout(1, 2, 2))
    beats = [(0, rng.integers(-(1 << 29), 1 << 29, (2, 2))) for _ in range(SAMPLES * rounder.pixels)]
    got, cycles = run(rounder, beats, False, rng, stall=(0, 0))
    want = expected(rounder, beats, f.grad_shift, numerics.tensor_id(s.position, numerics.GRAD_SUM), f.seed, False)
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want))
    # The first noise word takes 2R hash stages and 2 FIFO cycles; then a beat a cycle, each
    # rounded a cycle after it is taken.
    assert cycles == len(beats) + 2 * len(numerics.MIX_ROUNDS) + 4


def test_a_shift_of_zero_is_refused():
    s = layer_slice()
    with pytest.raises(ValueError, match=r"^gradient rounder: shift = 0 is not in 1\.\.32$"):
        GradientRounder.from_slice(s, Formats(grad_bits=32), grads_layout(3, 2, 27))
