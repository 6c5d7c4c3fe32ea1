"""RowStreamer, WeightSource and GradientSplit (hw/balance/weight_stream.py), bit for bit, with random stalls."""

import re

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from hw.balance.weight_stream import GradientSplit, RowStreamer, WeightSource
from hw.base.layouts import PRODUCT_BITS
from hw.engines.eb_engine import EBEngine
from hw.engines.fp_engine import FPEngine
from hw.memory.param_ram import ParamRam, WeightLayout
from sim.helpers import as_rows, random_words
from sim.testbench import as_ints, get, put, simulate

STALL = 0.35


def walk(layout, group_major):
    """The addresses of one pass in the order an engine reads them: FP g*v + i ascending,
    EB the G groups of pass 0, then of pass 1, ..."""
    g, v = layout.groups, layout.passes
    return ([a for a in range(g * v)] if group_major else
            [gi * v + i for i in range(v) for gi in range(g)])


def test_walk_orders_of_the_folded_layout():
    # The model itself, written out for G = 3 groups and v = 3 passes.
    layout = WeightLayout(out_channels=5, in_channels=5, kernel=1, banks=2, tiles=2)
    assert (layout.groups, layout.passes) == (3, 3)
    assert walk(layout, True) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert walk(layout, False) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


# ---------------------------------------------------------------------------------------
# RowStreamer


class StreamedRam(wiring.Component):
    """A ParamRam whose port A (FP order) or B (EB order) a RowStreamer walks, as in HostedRows."""

    def __init__(self, layout, weights, *, group_major):
        self.ram = ParamRam(banks=layout.banks, rows=layout.rows, words=layout.words,
                            init=layout.fold(weights).reshape(-1, layout.words))
        self.streamer = RowStreamer(layout, group_major=group_major)
        super().__init__({"rows": Out(self.streamer.rows.signature), "allow": In(1),
                          "start": Out(1), "done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram, m.submodules.streamer = self.ram, self.streamer
        connect(m, self.streamer.port, self.ram.a if self.streamer.group_major else self.ram.b)
        connect(m, self.streamer.rows, flipped(self.rows))
        m.d.comb += [self.streamer.allow.eq(self.allow), self.start.eq(self.streamer.start),
                     self.done.eq(self.streamer.done)]
        return m


@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("group_major", [True, False], ids=["fp", "eb"])
def test_row_streamer_one_pass_per_allow_in_engine_order(kernel, group_major):
    # G = 3 groups (the last holds one channel of P = 2), v = 3 passes (the last one of b = 2
    # holds one channel): padded rows are streamed too, as the engines read them.
    layout = WeightLayout(out_channels=5, in_channels=5, kernel=kernel, banks=2, tiles=2)
    rng = np.random.default_rng(kernel * 2 + group_major)
    weights = random_words(rng, (5, 5, kernel, kernel))
    dut = StreamedRam(layout, weights, group_major=group_major)
    port = dut.streamer.port
    order = walk(layout, group_major)
    rows = layout.rows
    passes = 8
    seen = {"reads": [], "beats": [], "finished_unallowed": 0}

    async def gate(ctx):
        """Raises allow for one pass (sometimes two back to back), lowering it the cycle the pass
        starts, then keeps it low for a random while."""
        started = 0
        while started < passes:
            for _ in range(int(rng.integers(0, 3 * rows))):
                await ctx.tick()
            want = min(passes - started, int(rng.integers(1, 3)))
            ctx.set(dut.allow, 1)
            while want:
                _, _, start = await ctx.tick().sample(dut.start)
                want -= start
                started += start
            ctx.set(dut.allow, 0)

    async def consumer(ctx):
        await get(ctx, dut.rows, passes * rows, rng, STALL)
        # No pass past the allowed ones: the stream stays empty with ready high.
        ctx.set(dut.rows.ready, 1)
        for _ in range(3 * rows):
            _, _, valid = await ctx.tick().sample(dut.rows.valid)
            assert not valid

    async def monitor(ctx):
        async for _, _, allow, en, addr, start, done, valid, ready, payload in ctx.tick().sample(
                dut.allow, port.en, port.addr, dut.start, dut.done, dut.rows.valid,
                dut.rows.ready, dut.rows.payload):
            first_read = en and len(seen["reads"]) % rows == 0
            # start: a pass's first read, only while allowed.
            assert start == first_read
            assert allow or not first_read
            if en:
                seen["reads"].append(addr)
                seen["finished_unallowed"] += not allow and len(seen["reads"]) % rows == 0
            taken = valid and ready
            # done: with a pass's last beat taken.
            assert done == (taken and len(seen["beats"]) % rows == rows - 1)
            if taken:
                seen["beats"].append(as_rows(payload))

    simulate(dut, gate, consumer, processes=[monitor], deadline=passes * rows * 12)
    assert seen["reads"] == order * passes
    folded = layout.fold(weights)
    assert seen["beats"] == [folded[a].tolist() for a in order] * passes
    # The case under test happened: passes that ran to their end after allow had dropped
    # (with busy ignored they would stop at their second read and the run would time out).
    assert seen["finished_unallowed"] >= 2


# ---------------------------------------------------------------------------------------
# WeightSource


class SourcedEngine(wiring.Component):
    """An engine whose weight port goes through a WeightSource: addresses below ``starts[0]``
    from a ParamRam holding ``local`` rows, those of range k from ``remote[k]``.

    ``ports``: the engine's window and output streams, forwarded as they are.
    """

    def __init__(self, engine, local, starts, ports):
        self.engine, self.ports, self.starts = engine, ports, starts
        self.source = WeightSource(rows=engine.rows, banks=engine.ces, words=engine.words,
                                   starts=starts, window=engine.windows.payload.shape())
        self.ram = (ParamRam(banks=engine.ces, rows=starts[0], words=engine.words,
                             init=local.reshape(-1, engine.words)) if starts[0] else None)
        inp, out = ports
        members = {inp: In(getattr(engine, inp).signature.flip()), out: Out(getattr(engine, out).signature)}
        members["remote"] = In(self.source.remote[0].signature.flip()).array(len(starts))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        engine, source = self.engine, self.source
        m.submodules.engine, m.submodules.source = engine, source
        wiring.connect(m, engine.weights, source.engine)
        if self.ram is not None:
            m.submodules.ram = self.ram
            connect(m, source.ram, self.ram.a)
        inp, out = self.ports
        for outer, inner in zip(self.remote, source.remote):
            connect(m, flipped(outer), inner)
        connect(m, flipped(getattr(self, inp)), source.windows_in)
        connect(m, source.windows_out, engine.windows)
        connect(m, getattr(engine, out), flipped(getattr(self, out)))
        return m


# FC-like: S = 6 input channels, O = 7 outputs, P = 2 CEs of b = 2 tiles: G = 4 groups of
# v = 3 passes, 12 addresses; the last group holds one channel.
S, O, P, B = 6, 7, 2, 2
GROUPS, PASSES = 4, 3


# Engine groups each host's rows start at: half the rows on one host, all on one host,
# the top three groups on two hosts (one group, then two), all four groups on three hosts.
HOST_GROUPS = {"half-remote": (2,), "all-remote": (0,), "two-hosts": (1, 2), "three-hosts": (0, 1, 3)}


@pytest.mark.parametrize("hosts", HOST_GROUPS.values(), ids=HOST_GROUPS.keys())
@pytest.mark.parametrize("role", ["fp", "eb"])
def test_weight_source_feeds_the_engine_the_full_weight_matrix(role, hosts):
    rng = np.random.default_rng(sum(hosts) * 10 + len(hosts) + len(role))
    weights = random_words(rng, (O, S))
    group_major = role == "fp"
    if group_major:
        engine = FPEngine(channels=S, kernel=1, ces=P, out_channels=O, tiles=B)
        ports, width = ("windows", "psums"), S
    else:
        engine = EBEngine(in_channels=S, out_channels=O, kernel=1, ces=P, tiles=B)
        ports, width = ("windows", "errors"), O
    assert (engine.groups, engine.passes) == (GROUPS, PASSES)
    layout = WeightLayout(O, S, 1, P, B)
    starts = [g * PASSES for g in hosts]
    folded = layout.fold(weights)
    # Each host's rows: its output channels, laid out by themselves.
    host_beats = []
    for first, end in zip(hosts, list(hosts[1:]) + [GROUPS]):
        rows = weights[first * P:end * P]
        host = WeightLayout(len(rows), S, 1, P, B)
        np.testing.assert_array_equal(host.fold(rows), folded[first * PASSES:end * PASSES])
        host_beats.append([host.fold(rows)[a].tolist() for a in walk(host, group_major)])
    dut = SourcedEngine(engine, folded[:starts[0]], starts, ports)

    windows = 5
    xs = random_words(rng, (windows, width))
    if group_major:  # G beats of P lanes per window (lanes past O zero)
        want = np.pad(xs @ weights.T, ((0, 0), (0, GROUPS * P - O))).reshape(-1, P)
    else:  # one beat of the S input-channel errors per window
        want = xs @ weights
    got = {}

    async def producer(ctx):
        await put(ctx, getattr(dut, ports[0]), [x.tolist() for x in xs], rng, STALL)

    def host_rows(k):
        async def testbench(ctx):
            # One pass of host k's rows per window, in the engine's order.
            await put(ctx, dut.remote[k], host_beats[k] * windows, rng, STALL)
        return testbench

    async def consumer(ctx):
        got["beats"] = await get(ctx, getattr(dut, ports[1]), len(want), rng, STALL,
                                 decode=lambda p: as_ints(p.values))
        # Every remote row sent was taken, none twice.
        assert not any(ctx.get(dut.remote[k].valid) for k in range(len(hosts)))

    simulate(dut, producer, *map(host_rows, range(len(hosts))), consumer,
             deadline=windows * layout.rows * 20 + 100)
    np.testing.assert_array_equal(np.array(got["beats"]), want)


@pytest.mark.parametrize("starts", [[-1], [12], [13], [3, 3], [6, 3], []])
def test_weight_source_refuses_remote_ranges_outside_the_engine(starts):
    with pytest.raises(ValueError, match=rf"^weight source: the remote ranges' first addresses "
                                         rf"{re.escape(str(starts))} are not ascending addresses below "
                                         r"the engine's 12$"):
        WeightSource(rows=12, banks=P, words=B, starts=starts, window=1)


# ---------------------------------------------------------------------------------------
# GradientSplit


@pytest.mark.parametrize("starts", [[6], [0, 5], [3, 4, 9]], ids=["local+1", "2-hosts", "local+3"])
def test_gradient_split_routes_and_renumbers_in_order(starts):
    rows, banks, words = 12, 2, 2
    split = GradientSplit(rows=rows, banks=banks, words=words, starts=starts)
    rng = np.random.default_rng(len(starts))
    low, high = -(1 << (PRODUCT_BITS - 1)), (1 << (PRODUCT_BITS - 1)) - 1
    beats = [{"row": int(rng.integers(0, rows)),
              "values": rng.integers(low, high, (banks, words), endpoint=True).tolist()} for _ in range(150)]
    for n, first in enumerate(starts):  # both sides of every cut
        beats[2 * n]["row"], beats[2 * n + 1]["row"] = max(first - 1, 0), first
    beats[-2]["values"][0][0], beats[-1]["values"][1][1] = low, high
    bounds = [0, *starts, rows]
    outputs = (["local"] if starts[0] else []) + [f"remote{k}" for k in range(len(starts))]
    firsts = ([0] if starts[0] else []) + starts
    want = {name: [] for name in outputs}
    for b in beats:
        k = np.searchsorted(bounds, b["row"], side="right") - 1 - (0 if starts[0] else 1)
        want[outputs[k]].append((b["row"] - firsts[k], b["values"]))
    got = {}
    decode = lambda p: (int(p.row), as_rows(p.values))  # noqa: E731

    async def producer(ctx):
        await put(ctx, split.i, beats, rng, STALL)

    def sink(name):
        async def testbench(ctx):
            got[name] = await get(ctx, getattr(split, name), len(want[name]), rng, STALL, decode=decode)
        return testbench

    simulate(split, producer, *map(sink, outputs), deadline=len(beats) * 10)
    assert got == want
    assert min(map(len, want.values())) >= 10


def test_gradient_split_refuses_ranges_that_are_not_ascending():
    with pytest.raises(ValueError, match=r"^gradient split: the remote ranges' first addresses \[4, 2\] are "
                                         r"not ascending addresses below the engine's 12$"):
        GradientSplit(rows=12, banks=2, words=2, starts=[4, 2])
