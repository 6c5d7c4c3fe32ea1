"""ActRam: order bit-exact and ``level`` exact at every cycle, with random stalls on both sides."""

import numpy as np
import pytest

from hw.memory.act_ram import ActRam
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.helpers import memories
from sim.helpers import run_fifo as run_queue
from sim.helpers import layer_slice
from sim.testbench import as_ints


def run_fifo(dut, pixels, rng, stall_in, stall_out, hold_out=0):
    out, levels = run_queue(dut, pixels.tolist(), rng, stall_in, stall_out, hold_out, decode=as_ints)
    return np.array(out), levels


def random_pixels(rng, count, channels):
    pixels = rng.integers(WORD_MIN, WORD_MAX + 1, (count, channels))
    pixels[0, 0], pixels[-1, -1] = WORD_MIN, WORD_MAX
    return pixels


@pytest.mark.parametrize("channels, depth, stall_in, stall_out", [
    (3, 7, 0.3, 0.3),    # depth not a power of two, balanced stalls
    (1, 5, 0.0, 0.6),    # fast producer: runs full
    (4, 6, 0.6, 0.0),    # fast consumer: runs empty
    (2, 1, 0.3, 0.3),    # a single pixel of storage
])
def test_order_and_level_with_random_stalls(channels, depth, stall_in, stall_out):
    rng = np.random.default_rng(channels * 100 + depth)
    pixels = random_pixels(rng, 8 * depth + 5, channels)
    dut = ActRam(channels=channels, depth=depth)
    out, levels = run_fifo(dut, pixels, rng, stall_in, stall_out)
    np.testing.assert_array_equal(out, pixels)
    if stall_out > stall_in:
        assert levels.max() == depth
    if stall_in > stall_out:
        assert (levels == 0).sum() > 1


def test_one_pixel_per_cycle_without_stalls():
    rng = np.random.default_rng(8)
    pixels = random_pixels(rng, 40, 2)
    out, levels = run_fifo(ActRam(channels=2, depth=4), pixels, rng, 0.0, 0.0)
    np.testing.assert_array_equal(out, pixels)
    # Pushed at edges 0..39, each popped two edges later: 42 edges in all, level 2 in between.
    assert len(levels) == len(pixels) + 2 and (levels[2:-2] == 2).all()


def test_fills_to_depth_then_drains_in_order():
    """A consumer that waits: the queue fills to exactly its depth, holds, then drains."""
    rng = np.random.default_rng(3)
    depth = 9
    pixels = random_pixels(rng, 2 * depth + 4, 2)
    dut = ActRam(channels=2, depth=depth)
    out, levels = run_fifo(dut, pixels, rng, 0.0, 0.2, hold_out=3 * depth)
    np.testing.assert_array_equal(out, pixels)
    assert levels[depth] == depth and (levels[depth:2 * depth] == depth).all()


def test_from_slice_depth_is_words_over_channels():
    dut = ActRam.from_slice(layer_slice(in_channels=(4, 7), act_ram_words=3 * 70))
    assert (dut.channels, dut.depth) == (3, 70)
    rng = np.random.default_rng(4)
    pixels = random_pixels(rng, 150, 3)
    out, levels = run_fifo(dut, pixels, rng, 0.1, 0.7)
    np.testing.assert_array_equal(out, pixels)
    assert levels.max() == 70
    with pytest.raises(ValueError, match="act-ram of layer 'conv': act_ram_words = 100 is not a positive "
                                         "multiple of the slice's 3 input channels"):
        ActRam.from_slice(layer_slice(in_channels=(4, 7), act_ram_words=100))


def test_memory_is_one_pixel_wide_and_depth_deep():
    assert memories(ActRam(channels=3, depth=70, family="ecp5")) == {"mem": (3 * 16, 70, "block")}
    assert memories(ActRam(channels=3, depth=16, family="ecp5")) == {"mem": (3 * 16, 16, "distributed")}
