"""Fifo: order and ``level`` exact at every cycle under random stalls; memory style by the one rule."""

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import signed
from amaranth.lib import data

from hw.memory.fifo import Fifo
from mapping.resources import LUTRAM_MAX_DEPTH, ram_style
from sim.testbench import get, put, simulate


def run_fifo(dut, payloads, rng, stall_in, stall_out, hold_out=0, decode=None):
    """Push ``payloads`` and pop them back; a monitor checks every cycle against the handshakes.

    ``hold_out``: cycles the consumer waits before it starts taking (fills the queue).
    Returns (popped payloads, level seen at every clock edge).
    """
    count = len(payloads)
    result, levels = {}, []

    async def producer(ctx):
        await put(ctx, dut.i, payloads, rng, stall_in)

    async def consumer(ctx):
        if hold_out:
            await ctx.tick().repeat(hold_out)
        result["out"] = await get(ctx, dut.o, count, rng, stall_out, decode=decode)

    async def monitor(ctx):
        expected, popped = 0, 0
        while popped < count:
            _, _, i_valid, i_ready, o_valid, o_ready, level = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.level)
            assert level == expected, f"level {level}, handshakes say {expected}"
            assert i_ready == (expected < dut.depth)  # full: nothing more goes in
            assert not (o_valid and expected == 0)    # empty: nothing comes out
            levels.append(level)
            pushed = i_valid and i_ready
            popped += o_valid and o_ready
            expected += pushed - (o_valid and o_ready)

    simulate(dut, producer, consumer, monitor, deadline=12 * count + 4 * hold_out + 50)
    return result["out"], np.array(levels)


def memories(design):
    """(width, depth, ram_style or None) of every memory in ``design``'s RTLIL, by hierarchical name."""
    found, module, style = {}, "", None
    for line in rtlil.convert(design, name="top").splitlines():
        words = line.split()
        if words[:1] == ["module"]:
            module = words[1].lstrip("\\").removeprefix("top").lstrip(".")
        elif words[:2] == ["attribute", "\\ram_style"]:
            style = words[2].strip('"')
        elif words[:1] == ["memory"]:
            name = ".".join(filter(None, (module, words[-1].lstrip("\\"))))
            found[name] = (int(words[words.index("width") + 1]), int(words[words.index("size") + 1]), style)
        if words[:1] != ["attribute"]:
            style = None  # attributes belong to the next declaration only
    return found


@pytest.mark.parametrize("depth, stall_in, stall_out", [
    (7, 0.3, 0.3),   # depth not a power of two, balanced stalls
    (5, 0.0, 0.6),   # fast producer: runs full
    (1, 0.3, 0.3),   # a single beat of storage
])
def test_structured_beats_in_order_with_exact_level(depth, stall_in, stall_out):
    layout = data.StructLayout({"a": signed(48), "b": data.ArrayLayout(4, 3)})
    rng = np.random.default_rng(depth)
    beats = [{"a": int(rng.integers(-2 ** 47, 2 ** 47)), "b": rng.integers(0, 16, 3).tolist()}
             for _ in range(8 * depth + 5)]
    dut = Fifo(layout, depth)
    out, levels = run_fifo(dut, beats, rng, stall_in, stall_out,
                           decode=lambda p: {"a": p.a, "b": [p.b[n] for n in range(3)]})
    assert out == beats
    if stall_out > stall_in:
        assert levels.max() == depth


def test_plain_width_full_rate():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 1 << 20, 30).tolist()
    out, levels = run_fifo(Fifo(20, 3), values, rng, 0.0, 0.0)
    assert out == values
    # One beat per cycle from depth 3: pushed at edges 0..29, popped two edges later.
    assert len(levels) == len(values) + 2 and (levels[2:-2] == 2).all()
    # Depth 2 is full at level 2 (``i.ready`` does not look at ``o.ready``): 2 beats per 3 cycles.
    out, levels = run_fifo(Fifo(20, 2), values, rng, 0.0, 0.0)
    assert out == values and len(levels) == 3 * len(values) // 2 + 1


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_ram_style_switches_above_the_lutram_depth(family):
    shallow = LUTRAM_MAX_DEPTH[family]
    assert memories(Fifo(12, shallow, family=family)) == {"mem": (12, shallow, "distributed")}
    assert memories(Fifo(12, shallow + 1, family=family)) == {"mem": (12, shallow + 1, "block")}
    assert ram_style(shallow + 1, family) == "block"


def test_simulation_leaves_the_style_to_the_tool():
    assert memories(Fifo(12, 100)) == {"mem": (12, 100, None)}


def test_refuses_depth_zero():
    with pytest.raises(ValueError, match="fifo: depth = 0 must be at least 1"):
        Fifo(8, 0)
