"""LineBuffer against tensor_ops.windows, bit for bit, with random stalls on both sides."""

import numpy as np
import pytest

from hw.memory.line_buffer import LineBuffer
from mapping import tensor_ops
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.helpers import memories
from sim.helpers import conv_slice
from sim.testbench import as_ints, get, put, simulate


def virtual_windows(x, lb):
    """The windows a LineBuffer must emit for one sample, built from its virtual map."""
    rows, cols = lb.rows, lb.cols
    c = x.shape[0]
    full = np.zeros((c, rows.virtual, cols.virtual), x.dtype)
    full[:, rows.first_real:rows.last_real + 1:rows.dilation,
         cols.first_real:cols.last_real + 1:cols.dilation] = x
    return tensor_ops.windows(full, lb.kernel, rows.stride)


def run(lb, samples, rng=None, stall=0.0):
    """Stream ``samples`` (each (C, H, W)) through ``lb``; return windows (N, OH, OW, C*K*K) and cycles."""
    n, c = len(samples), lb.channels
    oh, ow = lb.out_shape
    pixels = [[int(v) for v in s[:, y, x]] for s in samples
              for y in range(s.shape[1]) for x in range(s.shape[2])]
    out, cycles = {}, {}

    async def producer(ctx):
        await put(ctx, lb.i, pixels, rng, stall)

    async def consumer(ctx):
        out["windows"] = await get(ctx, lb.o, n * oh * ow, rng, stall, decode=as_ints)

    async def clock(ctx):
        count = 0
        while "windows" not in out:
            await ctx.tick()
            count += 1
        cycles["total"] = count

    simulate(lb, producer, consumer, clock,
             deadline=(lb.cycles_per_sample * n + 50) * (4 if stall else 1) + 200)
    got = np.array(out["windows"], dtype=np.int64).reshape(n, oh, ow, c * lb.kernel ** 2)
    return got, cycles["total"]


def check(lb, n, seed, stall=0.3):
    rng = np.random.default_rng(seed)
    samples = rng.integers(WORD_MIN, WORD_MAX + 1, (n, lb.channels, lb.rows.size, lb.cols.size))
    got, _ = run(lb, samples, rng, stall)
    want = np.stack([virtual_windows(s, lb).reshape(lb.rows.out, lb.cols.out, -1) for s in samples])
    np.testing.assert_array_equal(got, want)
    return samples, got


@pytest.mark.parametrize("channels, size, kernel, stride, padding", [
    (3, (5, 7), 3, 1, 1),     # C not a power of two, odd sizes, same padding
    (2, (6, 6), 3, 2, 1),     # stride 2
    (1, (9, 9), 5, 1, 2),
    (2, (7, 5), 5, 2, 0),
    (3, (4, 5), 1, 1, 0),     # 1x1 kernel
    (2, (5, 5), 1, 2, 0),     # 1x1, stride 2 (ResNet downsample)
    (1, (1, 1), 3, 1, 1),     # one-pixel map
    (2, (1, 1), 1, 1, 0),     # fully connected: 1x1 on 1x1
    (1, (15, 15), 11, 4, 0),  # AlexNet conv1 geometry, scaled down
    (2, (9, 10), 3, 4, 2),    # stride 4 with padding, rows/columns never used at the end
    (1, (8, 8), 7, 2, 3),     # ResNet conv1 geometry, scaled down
])
def test_windows_match_tensor_ops(channels, size, kernel, stride, padding):
    lb = LineBuffer(channels=channels, height=size[0], width=size[1], kernel=kernel, stride=stride,
                    pad_before=padding)
    assert lb.memories == kernel - 1 and lb.words == (kernel - 1) * size[1] * channels
    rng = np.random.default_rng(channels * 100 + kernel * 10 + stride)
    samples = rng.integers(WORD_MIN, WORD_MAX + 1, (3, channels) + size)
    got, _ = run(lb, samples, rng, stall=0.3)
    for s, g in zip(samples, got):
        want = tensor_ops.windows(s, kernel, stride, padding)
        np.testing.assert_array_equal(g, want.reshape(want.shape[0], want.shape[1], -1))


@pytest.mark.parametrize("in_size, kernel, stride, padding", [
    ((8, 8), 3, 1, 1),
    ((7, 7), 3, 2, 1),   # odd input: OH = 4, the last input row/column has no output above it
    ((6, 5), 3, 2, 0),
    ((8, 8), 1, 2, 0),   # 1x1 stride 2: three of four input pixels get zero error
    ((9, 9), 5, 2, 2),
])
def test_eb_windows_are_dilated_padded_errors(in_size, kernel, stride, padding):
    oc, ic = 3, 2
    h, w = in_size
    lb = LineBuffer.for_errors(channels=oc, in_height=h, in_width=w, kernel=kernel, stride=stride,
                               padding=padding)
    oh, ow = ((n + 2 * padding - kernel) // stride + 1 for n in in_size)
    assert (lb.rows.size, lb.cols.size) == (oh, ow) and lb.out_shape == (h, w)
    assert lb.memories == -(-(kernel - 1) // stride)  # real rows are `stride` virtual rows apart
    rng = np.random.default_rng(h * 10 + kernel + stride)
    errors = rng.integers(WORD_MIN, WORD_MAX + 1, (2, oc, oh, ow))
    got, _ = run(lb, errors, rng, stall=0.3)
    weights = rng.integers(WORD_MIN, WORD_MAX + 1, (oc, ic, kernel, kernel))
    flipped = weights[:, :, ::-1, ::-1].reshape(oc, ic, -1)
    for e, g in zip(errors, got):
        # The windows are dilate_pad_errors' K x K windows cropped at [p, p + H) ...
        full = tensor_ops.dilate_pad_errors(e, kernel, stride, padding, (h, w))
        cropped = tensor_ops.windows(full, kernel)[padding:padding + h, padding:padding + w]
        np.testing.assert_array_equal(g, cropped.reshape(h, w, -1))
        # ... so with the flipped kernels they give conv_backward exactly.
        eb = np.einsum("hwok,oik->ihw", g.reshape(h, w, oc, -1), flipped)
        np.testing.assert_array_equal(eb, tensor_ops.conv_backward(e, weights, (ic, h, w), stride, padding))


def test_asymmetric_padding_and_dilation():
    lb = LineBuffer(channels=2, height=4, width=5, kernel=3, stride=2, pad_before=(2, 0),
                    pad_after=(1, 3), dilation=3)
    assert lb.out_shape == ((2 + 9 + 1 + 1 - 3) // 2 + 1, (0 + 12 + 1 + 3 - 3) // 2 + 1)
    check(lb, 2, seed=5)


def same_padding_cycles(h, w, k, p):
    """Documented cost of stride 1, padding p: K-1-p input-only rows of W columns, then H+p-(K-1-p)
    rows of W+p columns (p right-padding windows each; the last p rows are bottom padding)."""
    return (k - 1 - p) * w + (h + p - (k - 1 - p)) * (w + p)


def test_back_to_back_samples_at_the_documented_rate():
    """No stalls: N samples take N * cycles_per_sample plus a fixed pipeline latency."""
    for kw, ideal in [(dict(kernel=3, stride=1, pad_before=1), same_padding_cycles(6, 7, 3, 1)),
                      (dict(kernel=5, stride=1, pad_before=2), same_padding_cycles(6, 7, 5, 2)),
                      (dict(kernel=3, stride=2, pad_before=0), 6 * 7),
                      (dict(kernel=1, stride=1, pad_before=0), 6 * 7)]:
        lb = LineBuffer(channels=2, height=6, width=7, **kw)
        assert lb.cycles_per_sample == ideal
        rng = np.random.default_rng(1)
        totals = [run(lb, rng.integers(-5, 5, (n, 2, 6, 7)))[1] for n in (1, 3)]
        assert totals[1] - totals[0] == 2 * lb.cycles_per_sample
        assert totals[0] <= lb.cycles_per_sample + 3


def test_from_slice_roles():
    """FP/PG walk the slice's input channels; EB the errors of all output channels, dilated."""
    layer = conv_slice(in_shape=(4, 7, 7), out_shape=(8, 4, 4), stride=2, padding=1, in_range=(1, 3))
    fp, pg, eb = (LineBuffer.from_slice(layer, role) for role in ("fp", "pg", "eb"))
    assert (fp.channels, fp.out_shape, fp.rows.stride) == (2, (4, 4), 2)
    assert (eb.channels, eb.rows.size, eb.rows.dilation, eb.out_shape) == (8, 4, 2, (7, 7))
    for n, lb in enumerate((fp, pg, eb)):
        check(lb, 1, seed=n, stall=0.1)
    with pytest.raises(ValueError, match="role 'bp' is not one of fp, pg, eb"):
        LineBuffer.from_slice(layer, "bp")


@pytest.mark.parametrize("kwargs, message", [
    (dict(channels=0, height=4, width=4, kernel=3), "channels = 0"),
    (dict(channels=1, height=4, width=4, kernel=3, stride=0), "stride = 0"),
    (dict(channels=1, height=4, width=4, kernel=3, pad_before=-1), "pad_before = -1 is not a non-neg"),
    (dict(channels=1, height=4, width=4, kernel=3, pad_after=(1, 2, 3)), r"pad_after = \(1, 2, 3\)"),
    (dict(channels=1, height=2, width=4, kernel=3), "has 2 rows, fewer than the 3 x 3 window"),
])
def test_refuses_bad_geometry(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LineBuffer(**kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("kernel, stride, padding", [(3, 1, 1), (5, 1, 2), (11, 4, 0)])
def test_larger_maps(kernel, stride, padding):
    lb = LineBuffer(channels=3, height=23, width=19, kernel=kernel, stride=stride, pad_before=padding)
    check(lb, 2, seed=kernel, stall=0.2)


def test_row_memories_shape_and_ram_style():
    """M = ceil((K-1)/dilation) row memories of one pixel x W; the step ROM is not under the rule."""
    lb = LineBuffer(channels=3, height=8, width=16, kernel=5, dilation=2, family="ecp5")
    found = memories(lb)
    assert found.pop("steps")[2] is None
    assert found == {"row0": (3 * 16, 16, "distributed"), "row1": (3 * 16, 16, "distributed")}
    layer = conv_slice(in_shape=(4, 7, 65), out_shape=(8, 4, 33), stride=2, padding=1, in_range=(1, 3))
    for role, channels, width in (("fp", 2, 65), ("pg", 2, 65), ("eb", 8, 33)):
        found = memories(LineBuffer.from_slice(layer, role, family="xc7"))
        del found["steps"]
        style = "block" if width > 64 else "distributed"
        assert set(found.values()) == {(channels * 16, width, style)}, role
