"""PartialActivationBuffer: exact sums of two partial-sum streams under stalls and skew;
PartialSumWidth: partial sums between slices at Formats.psum_bits."""

import numpy as np
import pytest

from hw.memory.pab import GroupedPartialActivationBuffer, PartialActivationBuffer, PartialSumWidth
from mapping import numerics
from mapping.nodeconfig import Engine
from sim.helpers import memories
from sim.helpers import conv_slice
from sim.testbench import as_ints, get, put, simulate, take

# Partial sums that can be added without leaving 48 bits, as the mapping guarantees.
SPAN = 1 << 46


def beats(rng, count, lanes):
    return rng.integers(-SPAN, SPAN, (count, lanes), dtype=np.int64)


def payloads(values):
    return [{"values": [int(v) for v in row]} for row in values]


def run(pab, local, upstream, rng, stall, local_delay=0, upstream_delay=0):
    out, levels = {}, []

    async def wait(ctx, cycles):
        for _ in range(cycles):
            await ctx.tick()

    async def local_producer(ctx):
        await wait(ctx, local_delay)
        await put(ctx, pab.local, payloads(local), rng, stall)

    async def upstream_producer(ctx):
        await wait(ctx, upstream_delay)
        await put(ctx, pab.upstream, payloads(upstream), rng, stall)

    async def consumer(ctx):
        out["sums"] = await get(ctx, pab.o, len(local), rng, stall, decode=lambda p: as_ints(p.values))

    async def monitor(ctx):
        while "sums" not in out:
            levels.append(ctx.get(pab.level))
            await ctx.tick()

    benches = [local_producer, consumer]
    if not pab.first:
        benches += [upstream_producer, monitor]
    simulate(pab, *benches, deadline=4 * len(local) + local_delay + upstream_delay + 100)
    return np.array(out["sums"], dtype=np.int64), levels


@pytest.mark.parametrize("lanes, depth, local_delay, upstream_delay, stall", [
    (3, 4, 0, 0, 0.3),      # random stalls on all three interfaces
    (4, 16, 0, 150, 0.2),   # upstream much later than local: the FIFO fills, then the engine waits
    (2, 8, 150, 0, 0.2),    # local much later: upstream waits on its own stream
    (1, 2, 0, 0, 0.0),      # smallest FIFO, no stalls
])
def test_sums_are_exact(lanes, depth, local_delay, upstream_delay, stall):
    rng = np.random.default_rng(lanes * 10 + depth)
    count = 120
    local, upstream = beats(rng, count, lanes), beats(rng, count, lanes)
    pab = PartialActivationBuffer(lanes=lanes, depth=depth)
    sums, levels = run(pab, local, upstream, rng, stall, local_delay, upstream_delay)
    np.testing.assert_array_equal(sums, local + upstream)
    assert max(levels) <= depth
    if upstream_delay > count:
        assert max(levels) == depth  # the skew was absorbed up to the FIFO's depth, no further


def test_full_rate_when_both_inputs_are_ahead():
    """No stalls: one sum per cycle once both streams flow (plus FIFO and output latency)."""
    rng = np.random.default_rng(3)
    count, done = 200, {}
    local, upstream = beats(rng, count, 2), beats(rng, count, 2)
    pab = PartialActivationBuffer(lanes=2, depth=4)

    async def local_producer(ctx):
        await put(ctx, pab.local, payloads(local))

    async def upstream_producer(ctx):
        await put(ctx, pab.upstream, payloads(upstream))

    async def consumer(ctx):
        done["cycles"] = await take(ctx, pab.o, count)

    simulate(pab, local_producer, upstream_producer, consumer, deadline=count + 50)
    assert done["cycles"] <= count + 3


def test_first_node_passes_local_through():
    rng = np.random.default_rng(4)
    local = beats(rng, 50, 3)
    pab = PartialActivationBuffer(lanes=3, depth=0, first=True)
    assert "upstream" not in pab.signature.members
    sums, _ = run(pab, local, None, rng, 0.3)
    np.testing.assert_array_equal(sums, local)


def test_from_slice():
    """Lanes are the FP engine's CEs; pab_words (accumulator words) become ceil(words / lanes) beats."""
    pab = PartialActivationBuffer.from_slice(conv_slice(first=False, pab_words=50, fp=Engine(4, 4, 3)))
    assert (pab.lanes, pab.depth, pab.first) == (4, 13, False)
    rng = np.random.default_rng(5)
    local, upstream = beats(rng, 40, 4), beats(rng, 40, 4)
    sums, _ = run(pab, local, upstream, rng, 0.2, upstream_delay=60)
    np.testing.assert_array_equal(sums, local + upstream)
    first = PartialActivationBuffer.from_slice(conv_slice(first=True, fp=Engine(4, 4, 3)))
    assert first.first
    sums, _ = run(first, local, None, rng, 0.2)
    np.testing.assert_array_equal(sums, local)


def grouped_sums(local, upstream, passed, own, adds):
    """What a grouped slice's buffer emits (module docstring): per pixel the upstream's first
    ``passed`` beats, then the ``own`` local beats, plus the upstream's next ``own`` if ``adds``."""
    per_up = passed + (own if adds else 0)
    pixels = len(local) // own
    out = []
    for q in range(pixels):
        up, mine = upstream[q * per_up:(q + 1) * per_up], local[q * own:(q + 1) * own]
        out += list(up[:passed]) + list(mine + up[passed:] if adds else mine)
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("passed, own, adds, stall", [
    (2, 2, True, 0.3),    # the slice's group began upstream: add to its beats, pass group 0's
    (2, 2, False, 0.3),   # the slice's group begins here: group 0's pass, its own follow alone
    (3, 1, True, 0.0),
    (1, 3, False, 0.2),
])
def test_a_grouped_slice_adds_to_its_own_group_s_sums_only(passed, own, adds, stall):
    rng = np.random.default_rng(passed * 10 + own + adds)
    pixels, lanes = 30, 2
    local = beats(rng, pixels * own, lanes)
    upstream = beats(rng, pixels * (passed + (own if adds else 0)), lanes)
    pab = GroupedPartialActivationBuffer(lanes=lanes, depth=4, passed=passed, own=own, adds=adds)
    out = {}

    async def local_producer(ctx):
        await put(ctx, pab.local, payloads(local), rng, stall)

    async def upstream_producer(ctx):
        await put(ctx, pab.upstream, payloads(upstream), rng, stall)

    async def consumer(ctx):
        out["sums"] = await get(ctx, pab.o, pixels * (passed + own), rng, stall, decode=lambda p: as_ints(p.values))

    simulate(pab, local_producer, upstream_producer, consumer, deadline=20 * pixels * (passed + own) + 100)
    np.testing.assert_array_equal(np.array(out["sums"], dtype=np.int64),
                                  grouped_sums(local, upstream, passed, own, adds))


def test_from_slice_of_grouped_slices():
    """tiny-grouped's conv2 (two groups of 2 inputs and 4 outputs) at P = 2: the slice on channel 1
    adds to group 0's beats, the one starting group 1 appends to group 0's, the one on channel 3
    adds to group 1's after group 0's."""
    def grouped(in_range, out_range, first=False, last=False):
        return conv_slice(groups=2, in_range=in_range, out_range=out_range, first=first, last=last,
                          pab_words=16, fp=Engine(2, 1, 3))
    assert type(PartialActivationBuffer.from_slice(grouped((1, 2), (0, 4)))) is PartialActivationBuffer
    starts = PartialActivationBuffer.from_slice(grouped((2, 3), (4, 8)))
    assert (starts.passed, starts.own, starts.adds, starts.depth) == (2, 2, False, 8)
    adds = PartialActivationBuffer.from_slice(grouped((3, 4), (4, 8), last=True))
    assert (adds.passed, adds.own, adds.adds) == (2, 2, True)


@pytest.mark.parametrize("kwargs, message", [
    (dict(lanes=0, depth=4), "lanes = 0"),
    (dict(lanes=2, depth=1), "depth = 1 must be at least 2"),
])
def test_refuses_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PartialActivationBuffer(**kwargs)


def test_a_grouped_buffer_refuses_no_beats_to_pass():
    with pytest.raises(ValueError, match=r"^partial-activation buffer: passed = 0 must be at least 1$"):
        GroupedPartialActivationBuffer(lanes=2, depth=4, passed=0, own=2, adds=True)


def test_memory_shape_and_ram_style():
    """The FIFO: P 48-bit lanes x depth; none on the first node."""
    pab = PartialActivationBuffer.from_slice(conv_slice(first=False, pab_words=4 * 65, fp=Engine(4, 4, 3)),
                                             family="xc7")
    assert memories(pab) == {"fifo.mem": (4 * 48, 65, "block")}
    assert memories(PartialActivationBuffer(lanes=4, depth=64, family="xc7")) == {
        "fifo.mem": (4 * 48, 64, "distributed")}
    assert memories(PartialActivationBuffer(lanes=4, depth=64, first=True, family="xc7")) == {}


@pytest.mark.parametrize("i_bits, o_bits", [(48, 32), (32, 48)])
def test_partial_sums_leave_a_slice_saturated_and_arrive_sign_extended(i_bits, o_bits):
    """Leaving (48 -> 32): every value of the 48-bit range clipped to 32 bits, the edges too, as
    numerics.saturate; arriving (32 -> 48): every 32-bit value unchanged. Random stalls."""
    rng = np.random.default_rng(i_bits)
    lo, hi = -(1 << (i_bits - 1)), (1 << (i_bits - 1)) - 1
    edges = [lo, hi, -(1 << 31), (1 << 31) - 1, -(1 << 31) - 1, 1 << 31, 0, -1]
    values = np.concatenate([np.array([v for v in edges if lo <= v <= hi]),
                             rng.integers(lo, hi, 64, dtype=np.int64, endpoint=True)]).reshape(-1, 2)
    width = PartialSumWidth(lanes=2, i_bits=i_bits, o_bits=o_bits)
    out = {}

    async def producer(ctx):
        await put(ctx, width.i, payloads(values), rng, 0.3)

    async def consumer(ctx):
        out["values"] = await get(ctx, width.o, len(values), rng, 0.3, decode=lambda p: as_ints(p.values))

    simulate(width, producer, consumer, deadline=10 * len(values))
    np.testing.assert_array_equal(np.array(out["values"]), numerics.saturate(values, min(i_bits, o_bits)))
    if o_bits < i_bits:
        assert (np.array(out["values"]) != values).any()  # some values were clipped


def test_a_partial_sum_width_names_the_bad_parameter():
    with pytest.raises(ValueError, match=r"^partial-sum width: lanes = 0 must be at least 1$"):
        PartialSumWidth(lanes=0, i_bits=48, o_bits=32)
