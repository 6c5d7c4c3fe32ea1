"""The update gate makes FP/EB weight versions follow the golden model's formula under random timing."""

import numpy as np
import pytest

from hw.memory.update_gate import UpdateGate
from sim.testbench import simulate


@pytest.mark.parametrize("batch, stale, samples, seed", [(3, 0, 9, 0), (3, 2, 9, 1), (2, 5, 8, 2), (4, 1, 10, 3)])
def test_versions_follow_the_formula_whatever_the_timing(batch, stale, samples, seed):
    rng = np.random.default_rng(seed)
    dut = UpdateGate(batch=batch, fp_stale=stale)
    versions = {"fp": [], "eb": []}
    progress = {"fp": 0, "eb": 0, "pg": 0}
    applied = [0]

    def engine(name, follows):
        # Starts samples in order when allowed (and when the engine it depends on is ahead),
        # takes a random number of cycles per sample, records the weight version it saw.
        async def bench(ctx):
            for s in range(samples):
                while True:
                    ahead = follows is None or progress[follows] > s
                    if ahead and ctx.get(getattr(dut, f"{name}_allow")) and rng.random() < 0.7:
                        break
                    await ctx.tick()
                ctx.set(getattr(dut, f"{name}_start"), 1)
                if name in versions:
                    versions[name].append(applied[0])
                await ctx.tick()
                ctx.set(getattr(dut, f"{name}_start"), 0)
                for _ in range(int(rng.integers(1, 6))):
                    await ctx.tick()
                ctx.set(getattr(dut, f"{name}_done"), 1)
                await ctx.tick()
                ctx.set(getattr(dut, f"{name}_done"), 0)
                progress[name] = s + 1
        return bench

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
