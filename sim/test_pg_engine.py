"""PGEngine: its products summed over pixels are tensor_ops.conv_weight_grad / bias_grad,
bit for bit, with random stalls on all streams; and the engine feeding the gradient buffer."""

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from hw.engines.pg_engine import BiasTerms, PGEngine
from hw.memory.grad_buffer import GradientBuffer
from hw.memory.param_ram import ParamRam
from mapping import numerics, tensor_ops
from mapping.nodeconfig import Engine, Training
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.helpers import lpram_rows, mults
from sim.helpers import eb_slice
from sim.helpers import FORMATS, full_index, sgd
from sim.helpers import banked, layer_slice
from sim.testbench import as_ints, get, put, read_param_rows, simulate


def random_problem(rng, *, in_channels, out_channels, kernel, size, stride, padding, samples, low=WORD_MIN,
                   high=WORD_MAX):
    """Per-sample activations (S, H, W) and output errors (O, OH, OW); sample 0 has extremes."""
    out_size = (size + 2 * padding - kernel) // stride + 1
    xs = [rng.integers(low, high + 1, (in_channels, size, size)) for _ in range(samples)]
    errs = [rng.integers(low, high + 1, (out_channels, out_size, out_size)) for _ in range(samples)]
    xs[0][:, 0, :] = low
    errs[0][:, 0, :] = low
    return xs, errs


def pixel_inputs(xs, errs, kernel, stride, padding):
    """The two input streams: windows (FP geometry) and error pixels, one each per output pixel."""
    windows = [[int(v) for v in win.reshape(-1)]
               for x in xs for row in tensor_ops.windows(x, kernel, stride, padding) for win in row]
    pixels = [[int(v) for v in e[:, y, x]] for e in errs for y in range(e.shape[1]) for x in range(e.shape[2])]
    assert len(windows) == len(pixels)
    return windows, pixels


def expected_beats(xs, errs, kernel, stride, padding, ces, tiles):
    """Per output pixel (raster order) and step (g, i), g-major: row g*v + i and the products
    err[gP+p] * window[i*b+c], zero past O and past S; the bias beats: row g and the errors on
    pass 0, zeros on later passes."""
    beats, bias_beats = [], []
    for x, e in zip(xs, errs):
        (oc, s), kk = (e.shape[0], x.shape[0]), kernel * kernel
        groups, passes = -(-oc // ces), -(-s // tiles)
        padded = np.zeros((groups * ces,) + e.shape[1:], dtype=np.int64)
        padded[:oc] = e
        win = np.zeros((passes * tiles * kk,) + e.shape[1:], dtype=np.int64)
        win[:s * kk] = tensor_ops.windows(x, kernel, stride, padding).reshape(e.shape[1:] + (-1,)).transpose(2, 0, 1)
        for y in range(e.shape[1]):
            for xx in range(e.shape[2]):
                for g in range(groups):
                    errors = padded[g * ces:(g + 1) * ces, y, xx]
                    for i in range(passes):
                        words = win[i * tiles * kk:(i + 1) * tiles * kk, y, xx]
                        beats.append((g * passes + i, np.outer(errors, words)))
                        bias_beats.append((g, errors if i == 0 else np.zeros_like(errors)))
    return beats, bias_beats


def by_row(beats, rows):
    """The gradient buffer's model: the beats summed into their rows, (rows, P, words)."""
    total = np.zeros((rows,) + beats[0][1].shape, dtype=np.int64)
    for row, values in beats:
        total[row] += values
    return total.reshape(rows, total.shape[1], -1)


@dataclass
class Run:
    grads: list       # (row, (P, words) array) per beat
    bias_grads: list  # (row, (P,) array) per beat, or []
    transfers: list   # clock edges (counted from 1) at which a grads beat was taken


def run_engine(engine, windows, pixels, rng, stall=0.0, beats=None):
    """``beats``: the grads beats to take, by default a sample's rows per window."""
    beats = len(windows) * engine.rows if beats is None else beats
    state = {"now": 0, "transfers": [], "bias": []}

    def decode(payload):
        return int(payload.row), np.array([as_ints(row) for row in payload.values], dtype=np.int64)

    async def windows_in(ctx):
        await put(ctx, engine.windows, windows, rng, stall)

    async def errors_in(ctx):
        await put(ctx, engine.errors, pixels, rng, stall)

    async def grads_out(ctx):
        state["grads"] = await get(ctx, engine.grads, beats, rng, stall, decode=decode)

    async def bias_out(ctx):
        state["bias"] = await get(ctx, engine.bias_grads, beats, rng, stall,
                                  decode=lambda p: (int(p.row), np.array(as_ints(p.values), dtype=np.int64)))

    async def clock(ctx):
        async for _, _, valid, ready in ctx.tick().sample(engine.grads.valid, engine.grads.ready):
            state["now"] += 1
            if valid and ready:
                state["transfers"].append(state["now"])

    benches = [windows_in, errors_in, grads_out] + ([bias_out] if engine.bias else [])
    deadline = int(beats / (1 - stall) ** 3 * 4) + engine.latency + 20
    simulate(engine, *benches, processes=[clock], deadline=deadline)
    return Run(state["grads"], state["bias"], state["transfers"])


CORNERS = {
    # name: (in_channels S, out_channels O, kernel, ces P, size H = W, stride, padding, bias, tiles b)
    "3x3-pad-o-not-multiple-of-p": (2, 5, 3, 2, 4, 1, 1, True, None),
    "3x3-stride-2-unpadded": (1, 3, 3, 2, 5, 2, 0, False, None),
    "3x3-stride-2-pad": (2, 4, 3, 4, 5, 2, 1, True, None),
    "1x1-stride-1": (3, 7, 1, 3, 3, 1, 0, True, None),
    "1x1-stride-2-pad": (1, 2, 1, 1, 4, 2, 1, False, None),
    "fold-3x3-s5-b2-padded-pass": (5, 5, 3, 2, 4, 1, 1, True, 2),
    "fold-1x1-s5-b2-padded-pass": (5, 5, 1, 2, 3, 1, 0, True, 2),
    "fold-3x3-stride-2-s4-b2-exact-passes": (4, 5, 3, 2, 5, 2, 1, True, 2),
    "fold-1x1-s4-b2-exact-passes": (4, 7, 1, 3, 3, 1, 0, False, 2),
    "fold-b-equals-s": (3, 5, 3, 2, 4, 1, 1, True, 3),
    "fold-one-tile-one-group": (3, 2, 3, 4, 3, 1, 1, True, 1),
}


@pytest.mark.parametrize("name", CORNERS)
def test_products_sum_to_conv_weight_grad_with_stalls(name):
    s, o, kernel, ces, size, stride, padding, bias, tiles = CORNERS[name]
    rng = np.random.default_rng(len(name))
    xs, errs = random_problem(rng, in_channels=s, out_channels=o, kernel=kernel, size=size, stride=stride,
                              padding=padding, samples=2)
    engine = PGEngine(in_channels=s, out_channels=o, kernel=kernel, ces=ces, tiles=tiles, bias=bias)
    run = run_engine(engine, *pixel_inputs(xs, errs, kernel, stride, padding), rng, stall=0.3)

    want, want_bias = expected_beats(xs, errs, kernel, stride, padding, ces, engine.tiles)
    assert [row for row, _ in run.grads] == [row for row, _ in want]
    for (_, got), (_, values) in zip(run.grads, want):
        np.testing.assert_array_equal(got, values)
    # Summed by row, the gradient in the folded LPRAM layout, zero in every padded word.
    dw = sum(tensor_ops.conv_weight_grad(x, e, kernel, stride, padding) for x, e in zip(xs, errs))
    np.testing.assert_array_equal(by_row(run.grads, engine.rows), lpram_rows(dw, ces, engine.tiles))
    if bias:
        assert [row for row, _ in run.bias_grads] == [row for row, _ in want_bias]
        for (_, got), (_, values) in zip(run.bias_grads, want_bias):
            np.testing.assert_array_equal(got, values)
        # A buffer of G rows counts each error once, whatever v.
        db = sum(tensor_ops.bias_grad(e) for e in errs)
        np.testing.assert_array_equal(by_row(run.bias_grads, engine.groups),
                                      lpram_rows(db.reshape(o, 1, 1, 1), ces, 1))


@pytest.mark.parametrize("in_channels, out_channels, ces, tiles, stall", [(10, 5, 2, 4, 0.3), (6, 3, 3, 6, 0.0)])
@pytest.mark.parametrize("group_errors", [False, True])
def test_pass_windows_make_a_fully_connected_layers_gradient_terms(in_channels, out_channels, ces, tiles, stall,
                                                                   group_errors):
    """``pass_windows`` (hw/memory/fc_store.FcWindowStore's beats): a window beat per step, the
    errors once per sample or, with ``group_errors``, a group's P at a time; the beats are those
    of the whole input as one window."""
    rng = np.random.default_rng(in_channels)
    xs, errs = random_problem(rng, in_channels=in_channels, out_channels=out_channels, kernel=1, size=1, stride=1,
                              padding=0, samples=3)
    engine = PGEngine(in_channels=in_channels, out_channels=out_channels, kernel=1, ces=ces, tiles=tiles, bias=True,
                      pass_windows=True, group_errors=group_errors)
    padded = np.zeros((len(xs), engine.passes * tiles), np.int64)
    padded[:, :in_channels] = np.array(xs).reshape(len(xs), -1)
    windows = [list(map(int, padded[s, i * tiles:(i + 1) * tiles]))
               for s in range(len(xs)) for _ in range(engine.groups) for i in range(engine.passes)]
    errors = pixel_inputs(xs, errs, 1, 1, 0)[1]
    if group_errors:  # each sample's errors as G beats of P, zero past O
        errors = [(e + [0] * (engine.groups * ces - len(e)))[g * ces:(g + 1) * ces]
                  for e in errors for g in range(engine.groups)]
    run = run_engine(engine, windows, errors, rng, stall=stall, beats=len(xs) * engine.rows)
    want, want_bias = expected_beats(xs, errs, 1, 1, 0, ces, tiles)
    assert [row for row, _ in run.grads] == [row for row, _ in want]
    for (_, got), (_, values) in zip(run.grads, want):
        np.testing.assert_array_equal(got, values)
    assert [row for row, _ in run.bias_grads] == [row for row, _ in want_bias]


@pytest.mark.parametrize("in_channels, kernel, tiles, passes", [(2, 3, None, 1), (5, 3, 2, 3), (4, 1, 2, 2)])
def test_one_beat_per_cycle_with_continuous_input(in_channels, kernel, tiles, passes):
    """No stall, two samples: W*G*v beats, one per cycle from edge latency + 1, so the last
    leaves on edge latency + W*G*v (G*v cycles per output pixel)."""
    rng = np.random.default_rng(4)
    xs, errs = random_problem(rng, in_channels=in_channels, out_channels=5, kernel=kernel, size=3, stride=1,
                              padding=kernel // 2, samples=2)
    engine = PGEngine(in_channels=in_channels, out_channels=5, kernel=kernel, ces=2, tiles=tiles, bias=True)
    run = run_engine(engine, *pixel_inputs(xs, errs, kernel, 1, kernel // 2), rng)
    beats = 2 * 9 * 3 * passes
    assert (engine.passes, engine.latency, len(run.grads), len(run.bias_grads)) == (passes, 2, beats, beats)
    assert run.transfers == list(range(engine.latency + 1, engine.latency + 1 + beats))


class EngineWithBuffers(wiring.Component):
    """PGEngine -> GradientBuffer -> ParamRam, for weights and biases: the engine's beats as they are."""

    def __init__(self, engine, weights_gb, weights_ram, bias_gb, bias_ram):
        self.engine = engine
        self.parts = [(weights_gb, weights_ram, engine.grads), (bias_gb, bias_ram, engine.bias_grads)]
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = self.engine
        for n, (gb, ram, source) in enumerate(self.parts):
            m.submodules[f"gb{n}"], m.submodules[f"ram{n}"] = gb, ram
            wiring.connect(m, source, gb.i)
            wiring.connect(m, gb.upd, ram.upd)
        return m


@pytest.mark.parametrize("ces, stall", [
    (2, 0.3),  # 3 groups, the last one half empty
    (8, 0.0),  # 1 group of 5 channels: back-to-back beats into one buffer address
    (2, 0.0),
])
def test_engine_feeds_the_gradient_buffers_of_weights_and_biases(ces, stall):
    """A mini-batch of two samples through PG and the LGB/BGB, then the SGD update, bit for bit.

    The buffers take the engine's beats as they are, so with no stall the engine runs
    at one beat per cycle.
    """
    rng = np.random.default_rng(9 + ces)
    s_range, o_range, in_total, out_total = (1, 3), (2, 7), 4, 9  # slice offsets: global indices matter
    s, o = s_range[1] - s_range[0], o_range[1] - o_range[0]
    kernel, size, stride, padding, batch = 3, 4, 2, 1, 6
    sl = layer_slice(in_channels=s_range, out_channels=o_range, kernel=kernel, ces=ces, in_total=in_total,
                     out_total=out_total, position=2, mode="ocp")
    training = Training(batch=2, lr=0.1, lr_constant=3000, bias_lr_constant=900)
    # Words of +-2**8 keep the steps gsum * lr >> shift inside the word range, so rounding decides.
    xs, errs = random_problem(rng, in_channels=s, out_channels=o, kernel=kernel, size=size, stride=stride,
                              padding=padding, samples=2, low=-256, high=255)
    weights = rng.integers(WORD_MIN, WORD_MAX + 1, (o, s, kernel, kernel))
    biases = rng.integers(WORD_MIN, WORD_MAX + 1, (o, 1))
    engine = PGEngine(in_channels=s, out_channels=o, kernel=kernel, ces=ces, bias=True)
    gbs = [GradientBuffer.from_slice(sl, FORMATS, training), GradientBuffer.from_slice(sl, FORMATS, training,
                                                                                        bias=True)]
    rams = [ParamRam.from_slice(sl, init=weights), ParamRam(banks=ces, rows=gbs[1].rows, words=1, init=biases)]
    dut = EngineWithBuffers(engine, gbs[0], rams[0], gbs[1], rams[1])
    windows, pixels = pixel_inputs(xs, errs, kernel, stride, padding)
    beats = len(pixels) * engine.groups  # of each buffer
    got, transfers = [], [[], []]  # cycles at which each buffer took a beat

    async def windows_in(ctx):
        await put(ctx, engine.windows, windows, rng, stall)

    async def errors_in(ctx):
        await put(ctx, engine.errors, pixels, rng, stall)

    async def control(ctx):
        now = 0
        while [len(t) for t in transfers] != [beats, beats]:
            _, _, *flags = await ctx.tick().sample(*(x for gb in gbs for x in (gb.i.valid, gb.i.ready)))
            now += 1
            for n, taken in enumerate(transfers):
                if flags[2 * n] and flags[2 * n + 1]:
                    taken.append(now)
        for gb in gbs:
            ctx.set(gb.update, 1)
            ctx.set(gb.batch, batch)
        await ctx.tick()
        for gb in gbs:
            ctx.set(gb.update, 0)
        while any(ctx.get(gb.busy) for gb in gbs):
            await ctx.tick()
        for ram in rams:
            got.append(await read_param_rows(ctx, ram))

    simulate(dut, windows_in, errors_in, control, deadline=4000)

    dw = sum(tensor_ops.conv_weight_grad(x, e, kernel, stride, padding) for x, e in zip(xs, errs))
    db = sum(tensor_ops.bias_grad(e) for e in errs).reshape(o, 1)
    tensor = numerics.tensor_id(2, numerics.WEIGHT_UPDATE)
    index = full_index(out_total, in_total, kernel, o_range, s_range)
    want_w = sgd(weights.reshape(o, -1), dw.reshape(o, -1), 3000, FORMATS.weight_update_shift, tensor, batch,
                 index)
    bias_index = np.arange(*o_range, dtype=np.uint64).reshape(-1, 1)
    want_b = sgd(biases, db, 900, FORMATS.bias_update_shift, numerics.tensor_id(2, numerics.BIAS_UPDATE),
                 batch, bias_index)
    np.testing.assert_array_equal(got[0], banked(want_w, ces, rams[0].rows))
    np.testing.assert_array_equal(got[1], banked(want_b, ces, rams[1].rows))
    if not stall:  # full rate: from the engine's first beat on, one beat per cycle into both buffers
        first = engine.latency + 1
        assert transfers == [list(range(first, first + beats))] * 2
    # The steps were rounded, not saturated, and the update changed most words.
    assert (want_w != weights.reshape(o, -1)).mean() > 0.5 and (want_b != biases).mean() > 0.5
    assert WORD_MIN < want_w.min() and want_w.max() < WORD_MAX


def test_from_slice_reads_the_pg_engine_and_bias_ownership():
    engine = PGEngine.from_slice(eb_slice(last=True))
    assert (engine.in_channels, engine.out_channels, engine.kernel, engine.ces, engine.groups) == (3, 10, 3, 4, 3)
    assert mults(engine) == engine.multipliers == eb_slice().pg.multipliers == 4 * 3 * 9
    # Biases belong to the last node of an ICP layer and to every OCP node.
    assert "bias_grads" in engine.signature.members
    before_last = PGEngine.from_slice(eb_slice(last=False))
    assert "bias_grads" not in before_last.signature.members and mults(before_last) == 4 * 3 * 9
    wide = Engine(ces=2, tiles=8, kernel=3)
    ocp = PGEngine.from_slice(eb_slice(mode="ocp", in_range=(0, 8), out_range=(2, 5), fp=wide, pg=wide))
    assert "bias_grads" in ocp.signature.members and mults(ocp) == 2 * 8 * 9
    narrow = Engine(ces=4, tiles=2, kernel=3)
    folded = PGEngine.from_slice(eb_slice(fp=narrow, pg=narrow))
    assert (folded.tiles, folded.passes, folded.rows) == (2, 2, 6) and mults(folded) == 4 * 2 * 9
    with pytest.raises(ValueError, match=r"gradient engine: layer conv2 has a PG engine of 4 CEs of 2 tiles "
                                         r"of 3x3, but its slice needs 3 tiles \(as its FP engine"):
        PGEngine.from_slice(eb_slice(pg=Engine(ces=4, tiles=2, kernel=3)))


def test_refuses_zero_ces_and_tiles_outside_the_channels():
    with pytest.raises(ValueError, match="gradient engine: ces = 0 must be at least 1"):
        PGEngine(in_channels=2, out_channels=3, kernel=3, ces=0)
    for tiles in (0, 3):
        with pytest.raises(ValueError, match=f"gradient engine: tiles = {tiles} is not between 1 and "
                                             f"the slice's 2 input channels"):
            PGEngine(in_channels=2, out_channels=3, kernel=3, ces=2, tiles=tiles)


def test_bias_terms_make_one_beat_per_group_of_lanes_under_stalls():
    """BiasTerms (the bias beats of a grouped ICP layer's last slice): each pixel's errors as
    C / P beats, ``row`` g and the errors of channels gP .. gP+P-1, in order."""
    rng = np.random.default_rng(7)
    terms = BiasTerms(channels=6, lanes=2)
    pixels = [[int(v) for v in rng.integers(WORD_MIN, WORD_MAX + 1, 6)] for _ in range(40)]
    got = {}

    async def source(ctx):
        await put(ctx, terms.errors, pixels, rng, 0.3)

    async def sink(ctx):
        got["beats"] = await get(ctx, terms.bias_grads, 3 * len(pixels), rng, 0.3,
                                 decode=lambda p: (int(p.row), as_ints(p.values)))

    simulate(terms, source, sink, deadline=2000)
    assert got["beats"] == [(g, p[2 * g:2 * g + 2]) for p in pixels for g in range(3)]

