"""StochasticRounder against numerics.requantize, bit for bit, with random stalls."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data

from hw.arith.rounding import StochasticRounder, clamp, saturate, saturating_add
from mapping import numerics
from sim.testbench import as_ints, get, put, simulate
from sim.helpers import accumulators

SEED = numerics.Formats().seed


def run_rounder(rounder, accs, indices, samples, extras=None, rng=None, stall=0.0):
    """Stream the beats through; returns the values, the extras out and the clock edges
    (counted from 1) at which output beats were taken."""
    beats = len(accs)
    payloads = [{"acc": [int(a) for a in accs[b]], "index": [int(i) for i in indices[b]],
                 "sample": int(samples[b])} for b in range(beats)]
    if extras is not None:
        for payload, extra in zip(payloads, extras):
            payload["extra"] = extra
    state = {"now": 0, "transfers": []}

    async def producer(ctx):
        await put(ctx, rounder.i, payloads, rng, stall)

    async def consumer(ctx):
        state["out"] = await get(ctx, rounder.o, beats, rng, stall)

    async def clock(ctx):
        async for _, _, valid, ready in ctx.tick().sample(rounder.o.valid, rounder.o.ready):
            state["now"] += 1
            if valid and ready:
                state["transfers"].append(state["now"])

    simulate(rounder, producer, consumer, processes=[clock], deadline=int(beats / (1 - stall) ** 2 * 3) + 40)
    values = np.array([as_ints(p.value) for p in state["out"]], dtype=np.int64)
    extras_out = [p.extra for p in state["out"]] if extras is not None else None
    return values, extras_out, state["transfers"]


@pytest.mark.parametrize("credited", [False, True], ids=["stalling", "credited"])
@pytest.mark.parametrize("shift, lanes", [(-4, 2), (0, 3), (1, 1), (12, 4), (24, 3), (32, 2)])
def test_matches_requantize(shift, lanes, credited):
    rng = np.random.default_rng(100 + shift)
    beats = 120
    tensor = numerics.tensor_id(3, numerics.FP_OUT)
    accs = accumulators(rng, beats * lanes, shift, numerics.ACC_BITS).reshape(beats, lanes)
    indices = rng.integers(0, 1 << 32, (beats, lanes), dtype=np.uint64)
    # A few samples repeated over consecutive beats, as a real stream has them.
    samples = np.repeat(rng.integers(0, 1 << 32, beats // 10 + 1, dtype=np.uint64), 10)[:beats]
    rounder = StochasticRounder(lanes=lanes, shift=shift, seed=SEED, tensor=tensor, credited=credited)
    got, _, _ = run_rounder(rounder, accs, indices, samples, rng=rng, stall=0.3)
    want = np.stack([numerics.requantize(accs[b], shift, SEED, tensor, int(samples[b]), indices[b])
                     for b in range(beats)])
    np.testing.assert_array_equal(got, want)
    if shift > 0:
        # The noise really is used: some accumulators round up, others down.
        floor = numerics.saturate(accs >> shift)
        assert (got > floor).any() and (got == floor).any()


def test_wide_accumulator_left_shift_clamps_like_requantize():
    rng = np.random.default_rng(7)
    beats, lanes, width = 60, 2, 56
    accs = accumulators(rng, beats * lanes, -3, width).reshape(beats, lanes)
    rounder = StochasticRounder(lanes=lanes, shift=-3, seed=SEED, tensor=5, acc_width=width)
    got, _, _ = run_rounder(rounder, accs, np.zeros_like(accs, dtype=np.uint64), np.zeros(beats),
                            rng=rng, stall=0.2)
    want = np.stack([numerics.requantize(a, -3, SEED, 5, 0) for a in accs])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("credited", [False, True], ids=["stalling", "credited"])
def test_extra_passes_through_at_one_beat_per_cycle(credited):
    """No stall: a beat leaves every cycle from latency + 1 on, in order, extra unchanged (with
    credits as without: the buffer is passed by)."""
    beats, lanes, shift, tensor = 40, 2, 12, numerics.tensor_id(1, numerics.EB_OUT)
    rng = np.random.default_rng(3)
    accs = accumulators(rng, beats * lanes, shift, numerics.ACC_BITS).reshape(beats, lanes)
    indices = rng.integers(0, 1 << 32, (beats, lanes), dtype=np.uint64)
    samples = np.full(beats, 9)
    extras = [{"group": int(g), "last": int(l)} for g, l in zip(rng.integers(0, 32, beats), rng.integers(0, 4, beats))]
    rounder = StochasticRounder(lanes=lanes, shift=shift, seed=SEED, tensor=tensor, credited=credited,
                                extra=data.StructLayout({"group": unsigned(5), "last": unsigned(2)}))
    got, extras_out, transfers = run_rounder(rounder, accs, indices, samples, extras=extras)
    assert [{"group": int(e.group), "last": int(e.last)} for e in extras_out] == extras
    want = np.stack([numerics.requantize(accs[b], shift, SEED, tensor, 9, indices[b]) for b in range(beats)])
    np.testing.assert_array_equal(got, want)
    assert transfers == list(range(rounder.latency + 1, rounder.latency + beats + 1))


@pytest.mark.parametrize("kwargs, message", [
    ({"lanes": 1, "shift": 33}, "shift = 33 exceeds the 32-bit noise word"),
    ({"lanes": 0, "shift": 4}, "lanes = 0 must be at least 1"),
    ({"lanes": 1, "shift": 4, "credited": True, "capacity": 10}, "capacity = 10 is below latency \\+ 1 = 11"),
])
def test_refuses_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StochasticRounder(**kwargs, seed=SEED, tensor=0)


@pytest.mark.parametrize("shape", [signed(7), unsigned(7), signed(3)], ids=str)
def test_clamp_and_saturate_every_value(shape):
    """Every input of a few narrow shapes, bounds at, inside and beyond the powers of two."""
    bounds = [(-8, 7), (-9, 7), (-5, 3), (0, 5), (2, 9), (-40, -3), (-1, 0), (-64, 63), (-100, 100)]
    m = Module()
    value = Signal(shape)
    outputs = []
    for lo, hi in bounds:
        out = Signal(clamp(value, lo, hi).shape())
        m.d.comb += out.eq(clamp(value, lo, hi))
        outputs.append((lo, hi, out))
    for bits in (1, 4, 8):
        out = Signal(saturate(value, bits).shape())
        m.d.comb += out.eq(saturate(value, bits))
        outputs.append((-(1 << (bits - 1)), (1 << (bits - 1)) - 1, out))
    inputs = range(-(1 << (shape.width - 1)), 1 << (shape.width - 1)) if shape.signed else range(1 << shape.width)
    wrong = []

    async def bench(ctx):
        for x in inputs:
            ctx.set(value, x)
            wrong.extend((x, lo, hi, ctx.get(out)) for lo, hi, out in outputs if ctx.get(out) != min(max(x, lo), hi))

    simulate(m, bench)
    assert wrong == []


def test_clamp_refuses_empty_range():
    with pytest.raises(ValueError, match=r"^clamp: lo = 3 is above hi = 2$"):
        clamp(Signal(8), 3, 2)


@pytest.mark.parametrize("shape", [signed(9), unsigned(8)], ids=str)
def test_saturating_add_of_every_pair(shape):
    """A 4-bit sum plus every term of ``shape``, saturated to 4 bits."""
    m = Module()
    narrow, wide = Signal(signed(4)), Signal(shape)
    out = Signal(signed(4))
    m.d.comb += out.eq(saturating_add(narrow, wide, 4))
    terms = range(-256, 256) if shape.signed else range(256)
    wrong = []

    async def bench(ctx):
        for a in range(-8, 8):
            for b in terms:
                ctx.set(narrow, a)
                ctx.set(wide, b)
                if ctx.get(out) != min(max(a + b, -8), 7):
                    wrong.append((a, b, ctx.get(out)))

    simulate(m, bench)
    assert wrong == []
