"""hw/base/counter.py: the registered first/last flags agree with the count in every cycle."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from hw.base.counter import ModuloCounter
from sim.testbench import simulate


class _Counted(Elaboratable):
    def __init__(self, count):
        self.count, self.step = count, Signal()

    def elaborate(self, platform):
        m = Module()
        self.counter = ModuloCounter(m, self.count, self.step)
        return m


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_flags_follow_the_count_under_random_steps(count):
    dut = _Counted(count)
    rng = np.random.default_rng(count)
    seen = []

    async def bench(ctx):
        expected = 0
        for _ in range(60):
            step = int(rng.random() < 0.6)
            ctx.set(dut.step, step)
            c = dut.counter
            seen.append((ctx.get(c.value), ctx.get(c.first), ctx.get(c.last), expected))
            await ctx.tick()
            expected = (expected + step) % count

    simulate(dut, bench)
    assert [(value, first, last) for value, first, last, _ in seen] == [
        (e, int(e == 0), int(e == count - 1)) for *_, e in seen]
