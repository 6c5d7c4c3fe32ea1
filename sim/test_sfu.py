"""SFU forward (bias, rounding, ReLU, max-pool) and backward (error routing) against the golden ops.

Every test runs both directions at once, several samples back to back, with random
stalls on all four streams; the bias comes from a ParamRam through the SFU's read port.
"""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.base.signatures import WeightPortSignature

from hw.memory.param_ram import ParamRam
from hw.node.sfu import SFU, BiasRows, OverlappingPoolSFU
from mapping import numerics, tensor_ops
from mapping.memories import slice_memories
from mapping.nodeconfig import Engine, Pool
from mapping.numerics import WORD_MAX, WORD_MIN
from mapping.resources import ram_style
from sim.helpers import memories
from sim.testbench import as_ints, get, put, simulate, take
from sim.helpers import conv_slice

FORMATS = numerics.Formats()
BIAS_SHIFT = FORMATS.act_frac + FORMATS.weight_frac - FORMATS.bias_frac


def golden(sfu, acc, bias, errors, sample):
    """Forward words (pooled) and backward errors (conv-output shape) of one sample."""
    oc, h, w = acc.shape
    if bias is not None:
        acc = acc + (bias << BIAS_SHIFT)[:, None, None]
    index = np.arange(acc.size, dtype=np.uint64).reshape(acc.shape) + sfu.channel_base * h * w
    pre = numerics.requantize(acc, FORMATS.fp_shift, FORMATS.seed, sfu.tensor, sample, index)
    act = tensor_ops.relu_forward(pre) if sfu.relu else pre
    if sfu.k > 1:
        out, argmax = tensor_ops.maxpool_forward(act, sfu.k, sfu.stride)
        err = numerics.saturate(tensor_ops.maxpool_backward(errors, argmax, act.shape))
    else:
        out, err = act, errors
    if sfu.relu:
        err = tensor_ops.relu_backward(err, pre)
    return out, err


def psum_beats(sfu, acc):
    """A conv output (OC, H, W) as partial-sum beats: per pixel G beats of P lanes, zero past OC."""
    oc, h, w = acc.shape
    lanes = np.zeros((h, w, sfu.groups * sfu.lanes), dtype=np.int64)
    lanes[:, :, :oc] = acc.transpose(1, 2, 0)
    return [{"values": [int(v) for v in lanes[y, x, g * sfu.lanes:(g + 1) * sfu.lanes]]}
            for y in range(h) for x in range(w) for g in range(sfu.groups)]


def pixels(t):
    return [[int(v) for v in t[:, y, x]] for y in range(t.shape[1]) for x in range(t.shape[2])]


def run(sfu, accs, bias, errors, sample_base, rng, stall, eb_delay=0):
    top = Module()
    top.submodules.sfu = sfu
    if bias is not None:
        ram = top.submodules.bias = ParamRam(banks=sfu.lanes, rows=sfu.groups, words=1, init=bias[:, None])
        wiring.connect(top, sfu.bias, ram.a)
    n, (oc, ph, pw), (h, w) = len(accs), sfu.out_shape, (sfu.height, sfu.width)
    out, levels = {}, []

    async def forward_in(ctx):
        ctx.set(sfu.sample_base, sample_base)
        await put(ctx, sfu.fp_in, [b for a in accs for b in psum_beats(sfu, a)], rng, stall)

    async def forward_out(ctx):
        out["fp"] = await get(ctx, sfu.fp_out, n * ph * pw, rng, stall, decode=as_ints)

    async def backward_in(ctx):
        for _ in range(eb_delay):
            await ctx.tick()
        await put(ctx, sfu.eb_in, [p for e in errors for p in pixels(e)], rng, stall)

    async def backward_out(ctx):
        out["eb"] = await get(ctx, sfu.eb_out, n * h * w, rng, stall, decode=as_ints)

    async def monitor(ctx):
        while "eb" not in out or "fp" not in out:
            if sfu.mask_bits:
                levels.append(ctx.get(sfu.mask_level))
            await ctx.tick()

    simulate(top, forward_in, forward_out, backward_in, backward_out, monitor,
             deadline=n * h * w * sfu.groups * 4 + 300 + eb_delay)
    fp = np.array(out["fp"], dtype=np.int64).reshape(n, ph, pw, oc).transpose(0, 3, 1, 2)
    eb = np.array(out["eb"], dtype=np.int64).reshape(n, h, w, oc).transpose(0, 3, 1, 2)
    return fp, eb, levels


def check(seed, *, oc, h, w, lanes, relu=True, pool=None, bias=True, samples=3, sample_base=0,
          channel_base=0, in_flight=1, stall=0.3, eb_delay=0, sfu=None):
    rng = np.random.default_rng(seed)
    sfu = sfu or (OverlappingPoolSFU if OverlappingPoolSFU.builds(pool) else SFU)(out_channels=oc, height=h, width=w, lanes=lanes, position=2, formats=FORMATS,
                     bias=bias, relu=relu, pool=pool, channel_base=channel_base,
                     samples_in_flight=in_flight)
    _, ph, pw = sfu.out_shape
    # Conv sums around the word range after the shift: most round, some saturate both ways.
    span = 1 << (FORMATS.fp_shift + numerics.WORD_BITS)
    accs = rng.integers(-span, span, (samples, oc, h, w))
    accs[:, :, ::3] //= 1 << 20  # small values too, and exact ties with ReLU at 0
    bias_words = rng.integers(WORD_MIN, WORD_MAX + 1, oc) if bias else None
    errors = rng.integers(WORD_MIN, WORD_MAX + 1, (samples, oc, ph, pw))
    fp, eb, levels = run(sfu, accs, bias_words, errors, sample_base, rng, stall, eb_delay)
    for n in range(samples):
        want_fp, want_eb = golden(sfu, accs[n], bias_words, errors[n], (sample_base + n) & 0xFFFFFFFF)
        np.testing.assert_array_equal(fp[n], want_fp, err_msg=f"forward, sample {n}")
        np.testing.assert_array_equal(eb[n], want_eb, err_msg=f"backward, sample {n}")
    if levels:
        assert max(levels) <= sfu.mask_depth
    return fp, eb, levels


@pytest.mark.parametrize("case", [
    dict(oc=5, h=6, w=6, lanes=2, pool=Pool(2, 2)),                    # G = 3, OC not a multiple of P
    dict(oc=3, h=5, w=7, lanes=4, pool=Pool(2, 2), in_flight=2),      # odd map: last row/column in no window
    dict(oc=4, h=6, w=6, lanes=4, pool=Pool(3, 3), bias=False),       # 3x3 windows
    dict(oc=2, h=4, w=2, lanes=2, pool=Pool(2, 2)),                    # one window wide: band read = write
    dict(oc=4, h=5, w=3, lanes=3, pool=None),                         # ReLU only
    dict(oc=3, h=4, w=4, lanes=2, relu=False, pool=Pool(2, 2)),       # pool without ReLU
    dict(oc=10, h=1, w=1, lanes=4, relu=False, bias=True),            # fully connected output: no masks
    dict(oc=3, h=4, w=4, lanes=2, pool=Pool(2, 2), channel_base=5,    # OCP slice: global channel index,
         sample_base=(1 << 32) - 2),                                  # sample number wrapping 32 bits
    # Overlapping windows (OverlappingPoolSFU): errors of up to ceil(k/s)^2 windows add up.
    dict(oc=3, h=7, w=7, lanes=2, pool=Pool(3, 2)),                    # every row and column in a window
    dict(oc=2, h=8, w=8, lanes=2, pool=Pool(3, 2), in_flight=2),      # last row and column in none
    dict(oc=3, h=5, w=3, lanes=3, pool=Pool(3, 2), bias=False),       # one window wide
    dict(oc=2, h=6, w=5, lanes=1, pool=Pool(3, 1), relu=False),       # stride 1: three pooled rows at once
    dict(oc=2, h=7, w=9, lanes=2, pool=Pool(4, 3), channel_base=2),   # kernel not a multiple of the stride
])
def test_forward_and_backward_match_golden(case):
    check(sum(map(ord, str(case))), **case)


def test_masks_route_errors_where_relu_and_pool_let_them():
    """The backward output is not trivially zero or dense: routing really depends on the masks."""
    _, eb, _ = check(11, oc=4, h=4, w=4, lanes=2, pool=Pool(2, 2), samples=2, stall=0.0)
    nonzero = (eb != 0).reshape(2, 4, 2, 2, 2, 2).sum(axis=(3, 5))  # per pooled window
    assert nonzero.max() == 1 and nonzero.min() == 0


def test_a_pixel_winning_overlapping_windows_gets_their_saturated_sum():
    """3x3 windows at stride 2 on a 7x7 map: conv pixel (2, 2) is the maximum of the four windows
    holding it and (4, 4), as large, of the three it does not share with (2, 2) (a tie: the first
    in raster order wins). All-zero windows route to their first pixel. The errors of a pixel's
    windows add up, (2, 2)'s four past the word range."""
    sfu = OverlappingPoolSFU(out_channels=1, height=7, width=7, lanes=1, position=2, formats=FORMATS,
                             bias=False, relu=False, pool=Pool(3, 2))
    words = np.zeros((1, 1, 7, 7), dtype=np.int64)
    words[0, 0, 2, 2] = words[0, 0, 4, 4] = 9
    errors = np.full((1, 1, 3, 3), -10000)
    fp, eb, _ = run(sfu, words << FORMATS.fp_shift, None, errors, 0, np.random.default_rng(15), 0.3)
    want = np.zeros((7, 7), dtype=np.int64)
    want[2, 2], want[4, 4], want[0, 4], want[4, 0] = WORD_MIN, -30000, -10000, -10000
    np.testing.assert_array_equal(eb[0, 0], want)
    np.testing.assert_array_equal(fp[0, 0], [[9, 9, 0], [9, 9, 9], [0, 9, 9]])
    np.testing.assert_array_equal(eb[0], golden(sfu, words[0] << FORMATS.fp_shift, None, errors[0], 0)[1])


def test_forward_waits_for_backward_when_the_masks_fill():
    """Errors arrive only after a long delay: the mask FIFO fills to its depth (two samples),
    the forward stops there instead of overwriting masks, and everything is still exact."""
    _, _, levels = check(12, oc=3, h=4, w=6, lanes=2, pool=Pool(2, 2), samples=4, in_flight=2,
                         eb_delay=400, stall=0.2)
    assert max(levels) == 2 * 2 * 3


def test_from_slice_of_an_ocp_slice():
    """An OCP slice finishing output channels 3..5 of 8: global channel numbers in the noise index."""
    layer = conv_slice(mode="ocp", out_range=(3, 6), fp=Engine(2, 4, 3))
    sfu = SFU.from_slice(layer, FORMATS, samples_in_flight=2)
    assert (sfu.out_channels, sfu.lanes, sfu.groups, sfu.channel_base) == (3, 2, 2, 3)
    assert sfu.out_shape == (3, 2, 2) and sfu.tensor == numerics.tensor_id(3, numerics.FP_OUT)
    check(13, oc=3, h=4, w=4, lanes=2, sfu=sfu, samples=2)


@pytest.mark.parametrize("variant, pool, size", [(SFU, Pool(2, 2), 8), (OverlappingPoolSFU, Pool(3, 2), 7)])
def test_full_rate_without_stalls(variant, pool, size):
    """G = 1: one conv pixel per cycle forward (plus the rounder's latency), masks not limiting;
    the last conv pixel completes the last window."""
    sfu = variant(out_channels=3, height=size, width=size, lanes=4, position=0, formats=FORMATS, bias=False,
                  pool=pool, samples_in_flight=2)
    cycles = {}
    beats = psum_beats(sfu, np.ones((3, size, size), dtype=np.int64) << 12) * 2

    async def producer(ctx):
        await put(ctx, sfu.fp_in, beats)

    async def consumer(ctx):
        cycles["n"] = await take(ctx, sfu.fp_out, 2 * sfu.out_shape[1] * sfu.out_shape[2])

    simulate(sfu, producer, consumer, deadline=400)
    rounder_latency = 2 * len(numerics.MIX_ROUNDS) + 2  # hw.arith.rounding.StochasticRounder
    assert cycles["n"] <= len(beats) + rounder_latency + 4


@pytest.mark.parametrize("variant, kwargs, message", [
    (SFU, dict(pool=Pool(3, 2)), r"^SFU: max-pool kernel 3, stride 2, padding 0 is not supported "
                                 r"\(kernel == stride, padding 0; OverlappingPoolSFU pools kernel > stride\)$"),
    (SFU, dict(pool=Pool(2, 2, 1)), r"^SFU: max-pool kernel 2, stride 2, padding 1 is not supported \("),
    (SFU, dict(pool=Pool(8, 8)), r"^SFU: max-pool kernel 8 is larger than the 4 x 4 conv output$"),
    (SFU, dict(lanes=0), r"^SFU: lanes = 0 must be at least 1$"),
    (SFU, dict(group_beats=True), r"^SFU: group beats are a 1 x 1 output without a pool, not 4 x 4$"),
    (SFU, dict(group_beats=True, height=1, width=1, pool=Pool(1, 1)),
     r"^SFU: group beats are a 1 x 1 output without a pool, not 1 x 1 pooled$"),
    (OverlappingPoolSFU, dict(pool=Pool(2, 2)),
     r"^OverlappingPoolSFU: max-pool kernel 2, stride 2, padding 0 is not supported "
     r"\(kernel > stride, padding 0; SFU pools kernel == stride\)$"),
    (OverlappingPoolSFU, dict(pool=Pool(3, 2, 1)),
     r"^OverlappingPoolSFU: max-pool kernel 3, stride 2, padding 1 is not supported \("),
    (OverlappingPoolSFU, dict(pool=None), r"^OverlappingPoolSFU: no max-pool is not supported \("),
    (OverlappingPoolSFU, dict(pool=Pool(5, 2)),
     r"^OverlappingPoolSFU: max-pool kernel 5 is larger than the 4 x 4 conv output$"),
])
def test_refuses_unsupported_configurations(variant, kwargs, message):
    args = dict(out_channels=2, height=4, width=4, lanes=2, position=0) | kwargs
    with pytest.raises(ValueError, match=message):
        variant(**args)


def test_memories_shape_and_ram_style():
    """Mask FIFO OC*mask_bits x samples*PH*PW; band OC*(16+code bits) and replay OC*(16+mask_bits) x PW;
    the rounder's output buffer P*16 x (the longest rounder latency + 1)."""
    sfu = SFU.from_slice(conv_slice(out_shape=(5, 12, 51), out_range=(0, 5), pool=Pool(3, 3)), FORMATS,
                         samples_in_flight=2, family="ecp5")
    rounder_buffer = (sfu.lanes * 16, numerics.rounder_latency(1) + 1, "distributed")  # for any shift
    assert memories(sfu) == {"masks.mem": (5 * 5, 2 * 4 * 17, "block"),
                             "band": (5 * (16 + 4), 17, "block"),
                             "replay": (5 * (16 + 5), 17, "block"),
                             "rounder.output_buffer": rounder_buffer}
    # Overlapping 3x3 windows at stride 2 over 12 x 51: 5 x 25 pooled, two pooled rows built at
    # once, so two band and two replay rows, each PW deep; the mapping plans the same.
    layer = conv_slice(out_shape=(5, 12, 51), out_range=(0, 5), pool=Pool(3, 2))
    overlapping = SFU.from_slice(layer, FORMATS, samples_in_flight=2, family="ecp5")
    assert isinstance(overlapping, OverlappingPoolSFU) and overlapping.out_shape == (5, 5, 25)
    built = memories(overlapping)
    assert built == {"masks.mem": (5 * 5, 2 * 5 * 25, "block"),
                     "band0": (5 * (16 + 4), 25, "block"), "band1": (5 * (16 + 4), 25, "block"),
                     "replay0": (5 * (16 + 5), 25, "block"), "replay1": (5 * (16 + 5), 25, "block"),
                     "rounder.output_buffer": rounder_buffer}
    planned = [(m.width, m.depth, ram_style(m.depth, "ecp5")) for m in slice_memories(layer)
               if m.name.startswith("sfu.")]
    assert sorted(planned) == sorted(built.values())
    no_pool = SFU(out_channels=4, height=4, width=4, lanes=2, position=1, family="ecp5")
    assert memories(no_pool) == {"masks.mem": (4 * 1, 16, "distributed"),
                                 "rounder.output_buffer": (2 * 16, rounder_buffer[1], "distributed")}


class BiasRowsOverRam(wiring.Component):
    """BiasRows between an SFU-side read port and a bias ParamRam of ``banks`` biases a row."""

    def __init__(self, biases, lanes, banks):
        self.ram = ParamRam(banks=banks, rows=-(-len(biases) // banks), words=1, init=np.reshape(biases, (-1, 1)),
                            shared_update=True)
        self.rows = BiasRows(rows=-(-len(biases) // lanes), lanes=lanes, banks=banks)
        super().__init__({"sfu": In(WeightPortSignature(self.rows.sfu.signature.rows, lanes, 1))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram, m.submodules.rows = self.ram, self.rows
        wiring.connect(m, self.rows.ram, self.ram.a)
        wiring.connect(m, wiring.flipped(self.sfu), self.rows.sfu)
        m.d.comb += self.ram.b.en.eq(0)
        return m


def test_bias_rows_read_a_wide_bias_ram_as_the_sfu_s_rows():
    """A grouped ICP layer's last slice keeps its biases P x G a row (LayerSlice.bias_banks):
    SFU row g (P biases) is RAM row g // G, lanes (g mod G) * P on, a cycle after its read, and
    held while the SFU reads nothing."""
    biases = list(range(-6, 6))
    dut, got = BiasRowsOverRam(biases, lanes=2, banks=6), []

    async def reader(ctx):
        for g in [0, 5, 1, 4, 2, 3, 3, 0]:
            ctx.set(dut.sfu.addr, g)
            ctx.set(dut.sfu.en, 1)
            await ctx.tick()
            ctx.set(dut.sfu.en, 0)
            ctx.set(dut.sfu.addr, 5 - g)  # ignored: no read
            await ctx.tick()
            got.append((g, [int(v[0]) for v in ctx.get(dut.sfu.data)]))

    simulate(dut, reader, deadline=100)
    assert got == [(g, biases[2 * g:2 * g + 2]) for g, _ in got]


def test_bias_rows_refuse_banks_that_are_not_whole_rows_of_lanes():
    with pytest.raises(ValueError, match=r"^bias rows: banks = 5 is not a multiple of lanes = 2$"):
        BiasRows(rows=3, lanes=2, banks=5)
