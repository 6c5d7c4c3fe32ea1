"""hw/base/counter.py: the registered first/last flags agree with the count in every cycle, and
an up/down count and a flag of its next value follow their steps."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from hw.base.counter import ModuloCounter, up_down
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


class _UpDown(Elaboratable):
    def __init__(self, limit):
        self.limit, self.up, self.down = limit, Signal(), Signal()
        self.count, self.below = Signal(range(limit + 1)), Signal(init=1)

    def elaborate(self, platform):
        m = Module()
        after = up_down(m, self.count, self.up, self.down)
        m.d.sync += self.below.eq(after(lambda value: value < self.limit))
        return m


def test_up_down_count_and_its_flag_follow_random_steps():
    dut = _UpDown(5)
    rng = np.random.default_rng(1)
    seen = []

    async def bench(ctx):
        expected = 0
        for _ in range(300):
            up = int(expected < dut.limit and rng.random() < 0.5)
            down = int(expected > 0 and rng.random() < 0.5)
            ctx.set(dut.up, up)
            ctx.set(dut.down, down)
            seen.append((ctx.get(dut.count), ctx.get(dut.below), expected))
            await ctx.tick()
            expected += up - down

    simulate(dut, bench)
    assert [(count, below) for count, below, _ in seen] == [(e, int(e < 5)) for *_, e in seen]
    assert {e for *_, e in seen} == set(range(6))  # every count from empty to full
