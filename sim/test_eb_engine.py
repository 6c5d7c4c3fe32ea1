"""EBEngine against tensor_ops.conv_backward, bit for bit, with random stalls on both streams."""

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.base.layouts import pixel_layout, psum_layout
from hw.engines.eb_engine import EBEngine
from hw.memory.line_buffer import LineBuffer
from hw.memory.param_ram import ParamRam
from mapping import tensor_ops
from mapping.nodeconfig import Engine
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.helpers import lpram_rows, mults
from sim.testbench import EngineWithWeights, as_ints, get, put, simulate
from sim.helpers import eb_slice


def error_windows(err, kernel, stride, padding, in_hw):
    """What LineBuffer.for_errors emits: windows of the dilated, padded map cropped at [p, p+H)."""
    h, w = in_hw
    full = tensor_ops.dilate_pad_errors(err, kernel, stride, padding, in_hw)
    win = tensor_ops.windows(full, kernel)[padding:padding + h, padding:padding + w]
    return [[int(v) for v in window.reshape(-1)] for row in win for window in row]


def random_problem(rng, *, in_channels, out_channels, kernel, size, stride, padding, samples):
    """Weights (O, S, K, K) and per-sample output errors (O, OH, OW), with extremes on sample 0."""
    out_size = (size + 2 * padding - kernel) // stride + 1
    weights = rng.integers(WORD_MIN, WORD_MAX + 1, (out_channels, in_channels, kernel, kernel))
    errs = [rng.integers(WORD_MIN, WORD_MAX + 1, (out_channels, out_size, out_size)) for _ in range(samples)]
    # The largest products and sums the words allow: WORD_MIN * WORD_MIN everywhere in a window.
    weights[:, 0] = WORD_MIN
    errs[0][:, 0, :] = WORD_MIN
    return weights, errs


def expected(errs, weights, in_shape, stride, padding):
    """conv_backward of every sample as (pixels, S) beats in raster order."""
    return np.concatenate([tensor_ops.conv_backward(e, weights, in_shape, stride, padding)
                           .reshape(in_shape[0], -1).T for e in errs])


@dataclass
class Run:
    got: np.ndarray
    want: np.ndarray
    transfers: list  # clock edges (counted from 1) at which an errors beat was taken
    issues: int      # cycles with weights.en high
    addrs: list      # weights.addr of the first window's G*v steps
    engine: EBEngine


def run_engine(*, in_channels, out_channels, kernel, ces, size, stride=1, padding=0, tiles=None, rng,
               stall=0.0, samples=1, group_major=False, pass_errors=False, group_windows=False):
    weights, errs = random_problem(rng, in_channels=in_channels, out_channels=out_channels, kernel=kernel,
                                   size=size, stride=stride, padding=padding, samples=samples)
    engine = EBEngine(in_channels=in_channels, out_channels=out_channels, kernel=kernel, ces=ces, tiles=tiles,
                      group_major=group_major, pass_errors=pass_errors, group_windows=group_windows)
    dut = EngineWithWeights(engine, lpram_rows(weights, ces, engine.tiles, rng).tolist(), ("windows", "errors"))
    windows = [w for e in errs for w in error_windows(e, kernel, stride, padding, (size, size))]

    want = expected(errs, weights, (in_channels, size, size), stride, padding)
    assert len(windows) == len(want)
    fed = windows
    if group_windows:  # each window as its groups' P*K*K taps, in the walk's order (i-major), zero past O
        taps = engine.ces * kernel * kernel
        fed = [(w + [0] * (engine.groups * taps - len(w)))[g * taps:(g + 1) * taps]
               for w in windows for _ in range(engine.passes) for g in range(engine.groups)]
    if pass_errors:  # each window's sums as v beats of b, the last pass's lanes past S dropped
        v, b = engine.passes, engine.tiles
        padded = np.zeros((len(want), v * b), np.int64)
        padded[:, :in_channels] = want
        want = padded.reshape(-1, b)
    state = {"now": 0, "transfers": [], "issues": 0, "addrs": []}

    async def producer(ctx):
        await put(ctx, dut.windows, fed, rng, stall)

    async def consumer(ctx):
        state["beats"] = await get(ctx, dut.errors, len(want), rng, stall, decode=lambda p: as_ints(p.values))

    async def clock(ctx):
        async for _, _, valid, ready, en, addr in ctx.tick().sample(dut.errors.valid, dut.errors.ready,
                                                                     engine.weights.en, engine.weights.addr):
            state["now"] += 1
            state["issues"] += en
            if en and len(state["addrs"]) < engine.rows:
                state["addrs"].append(addr)
            if valid and ready:
                state["transfers"].append(state["now"])

    deadline = int(len(windows) * engine.rows / (1 - stall) ** 2 * 3) + engine.latency + 20
    simulate(dut, producer, consumer, processes=[clock], deadline=deadline)
    got = np.array(state["beats"], dtype=np.int64).reshape(want.shape)
    if pass_errors:  # lanes past S in the last pass are the accumulators' garbage: not errors
        live = np.tile(np.arange(engine.passes * engine.tiles).reshape(-1, engine.tiles) < in_channels,
                       (len(windows), 1))
        got, want = np.where(live, got, 0), np.where(live, want, 0)
    return Run(got, want, state["transfers"],
               state["issues"], state["addrs"], engine)


CORNERS = {
    # name: (in_channels S, out_channels O, kernel, ces P, size H = W, stride, padding, tiles b)
    "3x3-pad-o-not-multiple-of-p": (2, 5, 3, 2, 4, 1, 1, None),
    "3x3-stride-2-pad": (3, 3, 3, 2, 5, 2, 1, None),
    "1x1-one-input-channel": (1, 7, 1, 3, 3, 1, 0, None),
    "1x1-stride-2": (2, 4, 1, 4, 4, 2, 0, None),
    "5x5-stride-2-unpadded": (1, 3, 5, 2, 7, 2, 0, None),
    "5x5-pad-one-group": (2, 2, 5, 4, 3, 1, 1, None),
    "one-tile-per-ce": (3, 3, 3, 1, 3, 1, 0, None),
    "fold-3x3-s5-b2-padded-pass": (5, 5, 3, 2, 4, 1, 1, 2),
    "fold-1x1-s5-b2-padded-pass": (5, 5, 1, 2, 3, 1, 0, 2),
    "fold-3x3-stride-2-s4-b2-exact-passes": (4, 5, 3, 2, 5, 2, 1, 2),
    "fold-1x1-s4-b2-exact-passes": (4, 7, 1, 3, 3, 1, 0, 2),
    "fold-b-equals-s": (3, 5, 3, 2, 4, 1, 1, 3),
    "fold-one-ce-one-group": (3, 2, 3, 4, 3, 1, 1, 1),
}


@pytest.mark.parametrize("name", CORNERS)
def test_matches_conv_backward_with_stalls(name):
    s, o, kernel, ces, size, stride, padding, tiles = CORNERS[name]
    run = run_engine(in_channels=s, out_channels=o, kernel=kernel, ces=ces, size=size, stride=stride,
                     padding=padding, tiles=tiles, rng=np.random.default_rng(len(name)), stall=0.3)
    np.testing.assert_array_equal(run.got, run.want)


@pytest.mark.parametrize("name", ["fold-1x1-s5-b2-padded-pass", "fold-3x3-stride-2-s4-b2-exact-passes",
                                  "fold-one-ce-one-group"])
def test_group_major_matches_conv_backward_with_stalls(name):
    """In LPRAM address order (the rows of a slice whose weights stream from DRAM): the same errors,
    the steps g-major."""
    s, o, kernel, ces, size, stride, padding, tiles = CORNERS[name]
    run = run_engine(in_channels=s, out_channels=o, kernel=kernel, ces=ces, size=size, stride=stride,
                     padding=padding, tiles=tiles, rng=np.random.default_rng(len(name)), stall=0.3,
                     samples=2, group_major=True)
    np.testing.assert_array_equal(run.got, run.want)
    assert run.addrs == list(range(run.engine.rows))


@pytest.mark.parametrize("name", ["fold-1x1-s5-b2-padded-pass", "1x1-one-input-channel"])
def test_group_windows_take_a_groups_errors_per_step(name):
    """``group_windows`` (a fully connected layer's output errors a group at a time, replayed
    once per pass): the same errors as one window holding all O."""
    s, o, kernel, ces, size, stride, padding, tiles = CORNERS[name]
    run = run_engine(in_channels=s, out_channels=o, kernel=kernel, ces=ces, size=size, stride=stride,
                     padding=padding, tiles=tiles, rng=np.random.default_rng(len(name)), stall=0.3,
                     samples=2, group_windows=True)
    np.testing.assert_array_equal(run.got, run.want)


@pytest.mark.parametrize("group_major", [False, True])
@pytest.mark.parametrize("name", ["fold-1x1-s5-b2-padded-pass", "fold-1x1-s4-b2-exact-passes", "fold-one-ce-one-group"])
def test_pass_errors_give_each_pass_as_it_completes(name, group_major):
    """A fully connected layer's EB (hw/memory/fc_store.py): each pass's b sums a beat, in pass order."""
    s, o, kernel, ces, size, stride, padding, tiles = CORNERS[name]
    run = run_engine(in_channels=s, out_channels=o, kernel=kernel, ces=ces, size=size, stride=stride,
                     padding=padding, tiles=tiles, rng=np.random.default_rng(len(name)), stall=0.3,
                     samples=2, group_major=group_major, pass_errors=True)
    np.testing.assert_array_equal(run.got, run.want)


@pytest.mark.parametrize("in_channels, kernel, tiles, passes, latency", [
    (2, 3, None, 1, 2 + 2 + 5),  # adder trees of P*K*K = 18 products, 5 levels
    (5, 3, 2, 3, 2 + 2 + 5),     # folding adds no stage: the accumulator is there anyway
    (4, 1, 2, 2, 2 + 2 + 1),
])
def test_g_times_v_cycles_per_window_with_continuous_input(in_channels, kernel, tiles, passes, latency):
    """No stall, two samples: the weight port (hence every multiplier) is busy every cycle.

    The first window's last step issues in cycle G*v - 1, so its beat leaves on edge
    G*v + latency and window n's on edge n*G*v + latency (n from 1).
    """
    run = run_engine(in_channels=in_channels, out_channels=5, kernel=kernel, ces=2, size=3,
                     padding=kernel // 2, tiles=tiles, rng=np.random.default_rng(3), samples=2)
    np.testing.assert_array_equal(run.got, run.want)
    e = run.engine
    assert (e.groups, e.passes, e.latency) == (3, passes, latency)
    steps = e.groups * passes
    assert run.transfers == [n * steps + latency for n in range(1, len(run.want) + 1)]
    assert run.issues == steps * len(run.want)
    # i-major, g-minor: address g*v + i.
    assert run.addrs == [g * passes + i for i in range(passes) for g in range(e.groups)]


class ErrorPath(wiring.Component):
    """The node's EB path: error pixels -> LineBuffer.for_errors -> EBEngine <- LPRAM port B."""

    def __init__(self, line_buffer, engine, ram):
        self.line_buffer, self.engine, self.ram = line_buffer, engine, ram
        super().__init__({
            "pixels": In(stream.Signature(pixel_layout(engine.out_channels))),
            "errors": Out(stream.Signature(psum_layout(engine.in_channels))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.lb, m.submodules.engine, m.submodules.ram = self.line_buffer, self.engine, self.ram
        e, port = self.engine, self.ram.b
        wiring.connect(m, e.weights, port)
        wiring.connect(m, wiring.flipped(self.pixels), self.line_buffer.i)
        wiring.connect(m, self.line_buffer.o, e.windows)
        wiring.connect(m, e.errors, wiring.flipped(self.errors))
        return m


def test_behind_the_error_line_buffer_and_lpram_port_b():
    """Stride 2, padding 1: the dilated walk of the line buffer feeds the engine, weights from ParamRam."""
    rng = np.random.default_rng(17)
    s, o, kernel, ces, size, stride, padding = 2, 3, 3, 2, 5, 2, 1
    weights, errs = random_problem(rng, in_channels=s, out_channels=o, kernel=kernel, size=size,
                                   stride=stride, padding=padding, samples=2)
    lb = LineBuffer.for_errors(channels=o, in_height=size, in_width=size, kernel=kernel, stride=stride,
                               padding=padding)
    engine = EBEngine(in_channels=s, out_channels=o, kernel=kernel, ces=ces)
    ram = ParamRam(banks=ces, rows=engine.groups, words=s * kernel * kernel, init=weights)
    dut = ErrorPath(lb, engine, ram)
    pixels = [[int(v) for v in e[:, y, x]] for e in errs for y in range(e.shape[1]) for x in range(e.shape[2])]
    want = expected(errs, weights, (s, size, size), stride, padding)
    got = {}

    async def producer(ctx):
        await put(ctx, dut.pixels, pixels, rng, 0.3)

    async def consumer(ctx):
        got["beats"] = await get(ctx, dut.errors, len(want), rng, 0.3, decode=lambda p: as_ints(p.values))

    simulate(dut, producer, consumer, deadline=2000)
    np.testing.assert_array_equal(np.array(got["beats"]), want)


def test_from_slice_reads_the_eb_engine():
    engine = EBEngine.from_slice(eb_slice())
    assert (engine.in_channels, engine.out_channels, engine.kernel, engine.ces, engine.groups) == (3, 10, 3, 4, 3)
    assert (engine.tiles, engine.passes) == (3, 1)
    assert mults(engine) == engine.multipliers == eb_slice().eb.multipliers == 3 * 4 * 9
    folded = eb_slice(fp=Engine(ces=4, tiles=2, kernel=3), eb=Engine(ces=2, tiles=4, kernel=3))
    engine = EBEngine.from_slice(folded)
    assert (engine.tiles, engine.passes, engine.rows) == (2, 2, 6)
    assert mults(engine) == engine.multipliers == folded.eb.multipliers == 2 * 4 * 9
    with pytest.raises(ValueError, match=r"EB engine of 3 CEs of 2 tiles of 3x3, but its slice needs 3 CEs "
                                         r"\(one per FP tile\) of 4 tiles \(one per LPRAM bank\)"):
        EBEngine.from_slice(eb_slice(eb=Engine(ces=3, tiles=2, kernel=3)))
    with pytest.raises(ValueError, match="EB engine of 3 CEs of 4 tiles of 3x3, but its slice needs 2 CEs"):
        EBEngine.from_slice(eb_slice(fp=Engine(ces=4, tiles=2, kernel=3)))
    with pytest.raises(ValueError, match="error engine: layer conv2 is the network's first weighted layer"):
        EBEngine.from_slice(eb_slice(needs_eb=False, eb=Engine(0, 0, 3)))


def test_refuses_zero_out_channels_and_tiles_outside_the_channels():
    with pytest.raises(ValueError, match="error engine: out_channels = 0 must be at least 1"):
        EBEngine(in_channels=2, out_channels=0, kernel=3, ces=2)
    for tiles in (0, 3):
        with pytest.raises(ValueError, match=f"error engine: tiles = {tiles} is not between 1 and "
                                             f"the slice's 2 input channels"):
            EBEngine(in_channels=2, out_channels=3, kernel=3, ces=2, tiles=tiles)
