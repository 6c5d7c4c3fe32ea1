"""The update gate makes FP/EB weight versions follow the golden model's formula under random timing;
BothDone pairs the events of two sources."""

import numpy as np
import pytest

from hw.memory.update_gate import BothDone, OverlappedGate, UpdateGate
from sim.testbench import simulate


def _engine(dut, name, follows, samples, rng, progress, started, done=None):
    """A testbench of engine ``name``: starts samples in order when allowed (and when the engine
    it ``follows`` is ahead), calls ``started(name, sample)``, takes a random number of cycles
    per sample and reports it done (``done(name)`` just before)."""
    async def bench(ctx):
        for s in range(samples):
            while True:
                ahead = follows is None or progress[follows] > s
                if ahead and ctx.get(getattr(dut, f"{name}_allow")) and rng.random() < 0.7:
                    break
                await ctx.tick()
            ctx.set(getattr(dut, f"{name}_start"), 1)
            started(name, s)
            await ctx.tick()
            ctx.set(getattr(dut, f"{name}_start"), 0)
            for _ in range(int(rng.integers(1, 6))):
                await ctx.tick()
            ctx.set(getattr(dut, f"{name}_done"), 1)
            if done is not None:
                done(name)
            await ctx.tick()
            ctx.set(getattr(dut, f"{name}_done"), 0)
            progress[name] = s + 1
    return bench


@pytest.mark.parametrize("batch, stale, samples, seed", [(3, 0, 9, 0), (3, 2, 9, 1), (2, 5, 8, 2), (4, 1, 10, 3)])
def test_versions_follow_the_formula_whatever_the_timing(batch, stale, samples, seed):
    rng = np.random.default_rng(seed)
    dut = UpdateGate(batch=batch, fp_stale=stale)
    versions = {"fp": [], "eb": []}
    progress = {"fp": 0, "eb": 0, "pg": 0}
    applied = [0]

    def started(name, s):
        if name in versions:
            versions[name].append(applied[0])

    def engine(name, follows):
        return _engine(dut, name, follows, samples, rng, progress, started)

    async def updater(ctx):
        ctx.set(dut.total_samples, samples)
        while applied[0] < samples // batch:
            await ctx.tick().until(dut.update_start)
            for _ in range(int(rng.integers(1, 4))):
                await ctx.tick()
            # The update takes effect here: an engine starting from the next cycle sees it.
            applied[0] += 1
            ctx.set(dut.update_done, 1)
            await ctx.tick()
            ctx.set(dut.update_done, 0)

    simulate(dut, engine("fp", None), engine("eb", "fp"), engine("pg", "eb"), updater, deadline=5000)
    assert versions["fp"] == [max(0, (s - stale) // batch) for s in range(samples)]
    assert versions["eb"] == [s // batch for s in range(samples)]
    assert applied[0] == samples // batch


def test_gate_refuses_a_negative_staleness():
    with pytest.raises(ValueError, match="fp_stale = -1"):
        UpdateGate(batch=2, fp_stale=-1)


@pytest.mark.parametrize("most_ahead, seed", [(1, 0), (3, 1), (16, 2)])
def test_both_done_pairs_every_event_a_cycle_after_the_later_source(most_ahead, seed):
    # Two sources report 60 events each at random cycles, either one up to most_ahead events
    # ahead of the other: "both" pulses for event n the cycle after the later of the two
    # reports of n.
    rng = np.random.default_rng(seed)
    events = 60
    dut = BothDone(most_ahead)
    reported, pulses, furthest = {"a": [], "b": []}, [], [0]

    async def bench(ctx):
        cycle = 0
        while len(pulses) < events:
            pairing = ctx.get(dut.both)  # from registers only: the inputs below do not change it
            for name in "ab":
                waiting = len(reported[name]) - len(pulses)
                fire = (len(reported[name]) < events and (pairing or waiting < most_ahead)
                        and rng.random() < (0.8 if name == "a" else 0.3))
                ctx.set(getattr(dut, name), fire)
                if fire:
                    reported[name].append(cycle)
                furthest[0] = max(furthest[0], waiting + fire - pairing)
            if pairing:
                pulses.append(cycle)
            await ctx.tick()
            cycle += 1

    simulate(dut, bench, deadline=1000)
    assert pulses == [max(a, b) + 1 for a, b in zip(reported["a"], reported["b"])]
    assert furthest[0] == most_ahead  # the run reached the bound


def test_both_done_asserts_its_bound():
    dut = BothDone(1)

    async def bench(ctx):
        ctx.set(dut.a, 1)
        for _ in range(3):
            await ctx.tick()

    with pytest.raises(AssertionError, match="both done: a more than 1 ahead"):
        simulate(dut, bench, deadline=10)


@pytest.mark.parametrize("batch, stale, samples, seed", [(3, 1, 9, 0), (3, 3, 10, 1), (1, 2, 7, 2), (4, 2, 13, 3)])
def test_overlapped_gate_versions_follow_the_formula_whatever_the_timing(batch, stale, samples, seed):
    # The update that does not stop the engines: FP of s on version max(0, (s - stale) // B),
    # EB on max(0, (s - 1) // B), the walks running beside the engines; PG never adds into
    # the sums a walk reads, and the copies never swap under an engine reading them.
    rng = np.random.default_rng(seed)
    dut = OverlappedGate(batch=batch, fp_stale=stale)
    versions = {"fp": [], "eb": []}
    progress = {"fp": 0, "eb": 0, "pg": 0}
    busy = {"fp": False, "eb": False}
    state = {"swaps": 0, "walking": None}

    def started(name, s):
        if name in versions:
            versions[name].append(state["swaps"])
            busy[name] = True
        else:  # PG adds into the sums of s // B: never the ones being walked
            assert state["walking"] is None or state["walking"] != s // batch % 2

    def done(name):
        busy[name] = False

    def engine(name, follows):
        return _engine(dut, name, follows, samples, rng, progress, started, done)

    async def walker(ctx):
        ctx.set(dut.total_samples, samples)
        for number in range(samples // batch):
            await ctx.tick().until(dut.update_start)
            assert progress["pg"] >= (number + 1) * batch and ctx.get(dut.batch_index) == number
            state["walking"] = number % 2
            for _ in range(int(rng.integers(1, 12))):
                await ctx.tick()
            state["walking"] = None
            ctx.set(dut.update_done, 1)
            await ctx.tick()
            ctx.set(dut.update_done, 0)

    async def swapper(ctx):
        async for _, _, swap in ctx.tick().sample(dut.swap):
            if swap:
                assert not busy["fp"] and not busy["eb"]
                state["swaps"] += 1

    simulate(dut, engine("fp", None), engine("eb", "fp"), engine("pg", "fp"), walker, processes=[swapper],
             deadline=5000)
    assert versions["fp"] == [max(0, (s - stale) // batch) for s in range(samples)]
    assert versions["eb"] == [max(0, (s - 1) // batch) for s in range(samples)]
    assert state["swaps"] == samples // batch
