"""RowStreamer, WeightSource and GradientSplit (hw/weight_stream.py), bit for bit, with random stalls."""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from hw.conv_engine import ConvEngine
from hw.eb_engine import ErrorEngine
from hw.param_ram import ParamRam, WeightLayout
from hw.pg_engine import PRODUCT_BITS
from hw.slice_unit import _connect_weight_port
from hw.weight_stream import GradientSplit, RowStreamer, WeightSource

from sim.test_param_ram import as_rows, random_words
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
                dut.allow, port.weight_en, port.weight_addr, dut.start, dut.done, dut.rows.valid,
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
    """An engine whose weight port goes through a WeightSource: addresses below
    ``first_remote`` from a ParamRam holding ``local`` rows, the others from ``remote``.

    ``ports``: the engine's window and output streams, forwarded as they are.
    """

    def __init__(self, engine, local, first_remote, ports):
        self.engine, self.ports = engine, ports
        self.source = WeightSource(rows=engine.rows, banks=engine.ces, words=engine.words,
                                   first_remote=first_remote, window=engine.windows.payload.shape())
        self.ram = (ParamRam(banks=engine.ces, rows=first_remote, words=engine.words,
                             init=local.reshape(-1, engine.words)) if first_remote else None)
        inp, out = ports
        super().__init__({inp: In(getattr(engine, inp).signature.flip()),
                          out: Out(getattr(engine, out).signature),
                          "remote": In(self.source.remote.signature.flip())})

    def elaborate(self, platform):
        m = Module()
        engine, source = self.engine, self.source
        m.submodules.engine, m.submodules.source = engine, source
        _connect_weight_port(m, engine, source.engine)
        if self.ram is not None:
            m.submodules.ram = self.ram
            connect(m, source.ram, self.ram.a)
        inp, out = self.ports
        connect(m, flipped(self.remote), source.remote)
        connect(m, flipped(getattr(self, inp)), source.windows_in)
        connect(m, source.windows_out, engine.windows)
        connect(m, getattr(engine, out), flipped(getattr(self, out)))
        return m


# FC-like: S = 6 input channels, O = 7 outputs, P = 2 CEs of b = 2 tiles: G = 4 groups of
# v = 3 passes, 12 addresses; the last group holds one channel.
S, O, P, B = 6, 7, 2, 2
GROUPS, PASSES = 4, 3


@pytest.mark.parametrize("remote_groups", [2, 4], ids=["half-remote", "all-remote"])
@pytest.mark.parametrize("role", ["fp", "eb"])
def test_weight_source_feeds_the_engine_the_full_weight_matrix(role, remote_groups):
    rng = np.random.default_rng(remote_groups * 10 + len(role))
    weights = random_words(rng, (O, S))
    group_major = role == "fp"
    if group_major:
        engine = ConvEngine(channels=S, kernel=1, ces=P, out_channels=O, tiles=B)
        ports, width = ("windows", "psums"), S
    else:
        engine = ErrorEngine(in_channels=S, out_channels=O, kernel=1, ces=P, tiles=B)
        ports, width = ("windows", "errors"), O
    assert (engine.groups, engine.passes) == (GROUPS, PASSES)
    layout = WeightLayout(O, S, 1, P, B)
    local_groups = GROUPS - remote_groups
    first_remote = local_groups * PASSES
    folded = layout.fold(weights)
    # The host's rows: output channels from the first remote group on, laid out by themselves.
    host = WeightLayout(O - local_groups * P, S, 1, P, B)
    np.testing.assert_array_equal(host.fold(weights[local_groups * P:]), folded[first_remote:])
    pass_beats = [host.fold(weights[local_groups * P:])[a].tolist() for a in walk(host, group_major)]
    dut = SourcedEngine(engine, folded[:first_remote], first_remote, ports)

    windows = 5
    xs = random_words(rng, (windows, width))
    if group_major:  # G beats of P lanes per window (lanes past O zero)
        want = np.pad(xs @ weights.T, ((0, 0), (0, GROUPS * P - O))).reshape(-1, P)
    else:  # one beat of the S input-channel errors per window
        want = xs @ weights
    got = {}

    async def producer(ctx):
        await put(ctx, getattr(dut, ports[0]), [x.tolist() for x in xs], rng, STALL)

    async def host_rows(ctx):
        # One pass of the remote rows per window, in the engine's order.
        await put(ctx, dut.remote, pass_beats * windows, rng, STALL)

    async def consumer(ctx):
        got["beats"] = await get(ctx, getattr(dut, ports[1]), len(want), rng, STALL,
                                 decode=lambda p: as_ints(p.values))
        # Every remote row sent was taken, none twice.
        assert not ctx.get(dut.remote.valid)

    simulate(dut, producer, host_rows, consumer, deadline=windows * layout.rows * 20 + 100)
    np.testing.assert_array_equal(np.array(got["beats"]), want)


@pytest.mark.parametrize("first_remote", [-1, 12, 13])
def test_weight_source_refuses_a_first_remote_address_outside_the_engine(first_remote):
    with pytest.raises(ValueError, match=rf"^weight source: the first remote address {first_remote} is "
                                         r"not below the engine's 12 addresses$"):
        WeightSource(rows=12, banks=P, words=B, first_remote=first_remote, window=1)


# ---------------------------------------------------------------------------------------
# GradientSplit


def test_gradient_split_routes_and_renumbers_in_order():
    rows, banks, words, first_remote = 12, 2, 2, 6
    split = GradientSplit(rows=rows, banks=banks, words=words, first_remote=first_remote)
    rng = np.random.default_rng(3)
    low, high = -(1 << (PRODUCT_BITS - 1)), (1 << (PRODUCT_BITS - 1)) - 1
    beats = [{"row": int(rng.integers(0, rows)),
              "values": rng.integers(low, high, (banks, words), endpoint=True).tolist()} for _ in range(120)]
    beats[0]["row"], beats[1]["row"] = first_remote - 1, first_remote  # both sides of the cut
    beats[2]["values"][0][0], beats[3]["values"][1][1] = low, high
    local = [(b["row"], b["values"]) for b in beats if b["row"] < first_remote]
    remote = [(b["row"] - first_remote, b["values"]) for b in beats if b["row"] >= first_remote]
    got = {}
    decode = lambda p: (int(p.row), as_rows(p.values))  # noqa: E731

    async def producer(ctx):
        await put(ctx, split.i, beats, rng, STALL)

    async def local_sink(ctx):
        got["local"] = await get(ctx, split.local, len(local), rng, STALL, decode=decode)

    async def remote_sink(ctx):
        got["remote"] = await get(ctx, split.remote, len(remote), rng, STALL, decode=decode)

    simulate(split, producer, local_sink, remote_sink, deadline=len(beats) * 10)
    assert got == {"local": local, "remote": remote}
    assert min(len(local), len(remote)) > 40


@pytest.mark.parametrize("first_remote", [0, 12])
def test_gradient_split_refuses_a_cut_that_splits_nothing(first_remote):
    with pytest.raises(ValueError, match=rf"^gradient split: the first remote address {first_remote} does "
                                         r"not split the engine's 12 addresses$"):
        GradientSplit(rows=12, banks=2, words=2, first_remote=first_remote)
