"""Fifo: order and ``level`` exact at every cycle under random stalls; memory style by the one rule."""

import numpy as np
import pytest
from amaranth.hdl import signed
from amaranth.lib import data

from hw.memory.fifo import Fifo
from mapping.resources import LUTRAM_MAX_DEPTH, ram_style
from sim.helpers import memories, run_fifo


@pytest.mark.parametrize("input_register, pop_register", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("depth, stall_in, stall_out", [
    (7, 0.3, 0.3),   # depth not a power of two, balanced stalls
    (5, 0.0, 0.6),   # fast producer: runs full
    (1, 0.3, 0.3),   # a single beat of storage
])
def test_structured_beats_in_order_with_exact_level(depth, stall_in, stall_out, input_register, pop_register):
    layout = data.StructLayout({"a": signed(48), "b": data.ArrayLayout(4, 3)})
    rng = np.random.default_rng(depth)
    beats = [{"a": int(rng.integers(-2 ** 47, 2 ** 47)), "b": rng.integers(0, 16, 3).tolist()}
             for _ in range(8 * depth + 5)]
    dut = Fifo(layout, depth, input_register=input_register, pop_register=pop_register)
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
    # With the input register a beat takes one cycle more, at the same rate from depth 4.
    out, levels = run_fifo(Fifo(20, 4, input_register=True), values, rng, 0.0, 0.0)
    assert out == values
    assert len(levels) == len(values) + 3 and (levels[3:-3] == 3).all()
    # A pop counted a cycle late holds one more beat in the level: full rate from depth 4 (5
    # with the input register), where the level sits one above the plain queue's.
    for input_register, depth in ((False, 4), (True, 5)):
        out, levels = run_fifo(Fifo(20, depth, input_register=input_register, pop_register=True),
                               values, rng, 0.0, 0.0)
        lag = 2 + input_register
        assert out == values
        assert len(levels) == len(values) + lag and (levels[lag + 1:-3] == lag + 1).all()


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
