"""EB's windows in chunks (hw/memory/eb_windows.py) against the whole windows, a group a beat."""

import numpy as np
import pytest

from hw.memory.eb_windows import ChunkedErrorWindows
from mapping import tensor_ops
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.testbench import as_ints, get, put, simulate


def group_beats(errors, lanes, passes, in_size, kernel, stride, padding):
    """Per input pixel of each sample, group g's P x K x K taps of the whole window (zero past
    the last channel), groups 0 .. G-1 ``passes`` times over."""
    h, w = in_size
    beats = []
    for e in errors:
        full = tensor_ops.dilate_pad_errors(e, kernel, stride, padding, (h, w))
        windows = tensor_ops.windows(full, kernel)[padding:padding + h, padding:padding + w]
        channels = e.shape[0]
        groups = -(-channels // lanes)
        padded = np.zeros((h, w, groups * lanes, kernel * kernel), np.int64)
        padded[:, :, :channels] = windows.reshape(h, w, channels, -1)
        for y in range(h):
            for x in range(w):
                taps = padded[y, x].reshape(groups, -1)
                beats += [list(map(int, taps[g])) for _ in range(passes) for g in range(groups)]
    return beats


@pytest.mark.parametrize("chunks, lanes, passes, in_size, kernel, stride, padding", [
    (((0, 3), (3, 6), (6, 8)), 2, 2, (4, 4), 3, 1, 1),  # a group across two chunks; two passes
    (((0, 4), (4, 7)), 3, 1, (5, 5), 3, 2, 1),          # stride 2 (dilated errors), the last group padded
    (((0, 2), (2, 3)), 1, 3, (3, 4), 1, 1, 0),          # 1x1 kernel
])
def test_chunked_windows_give_the_whole_windows_a_group_a_beat(chunks, lanes, passes, in_size, kernel, stride,
                                                               padding):
    channels = chunks[-1][1]
    h, w = in_size
    oh, ow = ((n + 2 * padding - kernel) // stride + 1 for n in in_size)
    rng = np.random.default_rng(channels + kernel)
    errors = rng.integers(WORD_MIN, WORD_MAX + 1, (3, channels, oh, ow))
    dut = ChunkedErrorWindows(chunks=chunks, lanes=lanes, passes=passes, in_height=h, in_width=w, kernel=kernel,
                              stride=stride, padding=padding, slack=2)
    expected = group_beats(errors, lanes, passes, in_size, kernel, stride, padding)
    pixels = [list(map(int, e[:, y, x])) for e in errors for y in range(oh) for x in range(ow)]
    out = []

    async def source(ctx):
        await put(ctx, dut.i, pixels, rng, 0.3)

    async def sink(ctx):
        out.extend(await get(ctx, dut.o, len(expected), np.random.default_rng(1), 0.3, as_ints))

    simulate(dut, source, sink, deadline=8 * len(expected) + 400)
    assert out == expected


def test_chunked_windows_give_a_beat_per_cycle():
    """Unstalled, the next window's chunks load as the last beat of one leaves: no gaps."""
    dut = ChunkedErrorWindows(chunks=((0, 3), (3, 5)), lanes=2, passes=4, in_height=3, in_width=3, kernel=3,
                              stride=1, padding=1, slack=2)
    errors = np.arange(2 * 5 * 9).reshape(2, 5, 3, 3)
    pixels = [list(map(int, e[:, y, x])) for e in errors for y in range(3) for x in range(3)]
    count = 2 * 9 * 3 * 4
    taken = []

    async def source(ctx):
        await put(ctx, dut.i, pixels)

    async def sink(ctx):
        await get(ctx, dut.o, count)

    async def clock(ctx):
        cycle = 0
        async for _, _, valid, ready in ctx.tick().sample(dut.o.valid, dut.o.ready):
            cycle += 1
            if valid and ready:
                taken.append(cycle)

    simulate(dut, source, sink, processes=[clock], deadline=2 * count + 200)
    assert len(taken) == count and set(np.diff(taken)[12:]) == {1}
