"""ParamRam (LPRAM / BPRAM) cycle by cycle against a Python model of its words."""

import numpy as np
import pytest

from hw.memory.param_ram import ParamRam, VersionedParamRam, WeightLayout
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.helpers import memories
from sim.testbench import simulate
from sim.helpers import as_rows, banked, folded, layer_slice, random_words


@pytest.mark.parametrize("banks, out_channels, in_channels, kernel, tiles", [
    (2, 5, 3, 3, None),  # channels that do not fill the last address
    (3, 3, 1, 1, None),  # 1x1 kernel, one address
    (1, 4, 2, 3, None),
    (2, 5, 5, 3, 2),     # folded: 3 passes, the last one half zero
    (3, 4, 4, 1, 2),     # folded: 2 full passes
])
def test_read_after_init_both_ports_hold_data(banks, out_channels, in_channels, kernel, tiles):
    rng = np.random.default_rng(banks * 10 + out_channels + in_channels)
    weights = random_words(rng, (out_channels, in_channels, kernel, kernel))
    ram = ParamRam.from_slice(layer_slice(in_channels=(0, in_channels), out_channels=(0, out_channels),
                                          kernel=kernel, ces=banks, tiles=tiles), init=weights)
    model = folded(weights, banks, tiles or in_channels)
    assert (ram.rows, ram.words) == (len(model), model.shape[2])
    cycles = 200

    async def bench(ctx):
        held = {"a": None, "b": None}
        for _ in range(cycles):
            issued = {}
            for name, port in (("a", ram.a), ("b", ram.b)):
                en = rng.random() < 0.5
                addr = int(rng.integers(0, ram.rows))
                ctx.set(port.addr, addr)
                ctx.set(port.en, en)
                issued[name] = addr if en else None
            await ctx.tick()
            for name, port in (("a", ram.a), ("b", ram.b)):
                if issued[name] is not None:
                    held[name] = issued[name]
                if held[name] is not None:  # valid the cycle after en, held while en is low
                    assert as_rows(ctx.get(port.data)) == model[held[name]].tolist()

    simulate(ram, bench, deadline=cycles + 10)


@pytest.mark.parametrize("shared", [False, True])
def test_concurrent_reads_while_the_update_writes(shared):
    """Random cycles of FP reads (port A), EB reads (port B), update reads (port A, or B when
    ``shared``) and masked update writes (port B), as the ports allow them together."""
    rng = np.random.default_rng(5 + shared)
    banks, rows, words = 2, 4, 6
    model = banked(random_words(rng, (banks * rows, words)), banks, rows)
    ram = ParamRam(banks=banks, rows=rows, words=words, init=model.reshape(banks * rows, words),
                   shared_update=shared)
    cycles = 400
    writes = 0

    async def bench(ctx):
        nonlocal writes
        held = {"a": None, "b": None}
        update_port = "b" if shared else "a"  # the update's reads and ``data`` are that port's
        for _ in range(cycles):
            write = rng.random() < 0.4
            # The update's read shares port B with its writes and EB when ``shared``, else port A with FP.
            read = rng.random() < 0.3 and not (shared and write)
            eb = rng.random() < 0.5 and not write and not (shared and read)
            w_addr, r_addr, b_addr, a_addr = (int(x) for x in rng.integers(0, rows, 4))
            # Port A may read any row but the one written this cycle (a block-RAM collision).
            if write and not shared:
                r_addr = (w_addr + 1 + int(rng.integers(0, rows - 1))) % rows
            fp = rng.random() < 0.8 and not (read and not shared) and not (write and a_addr == w_addr)
            mask = int(rng.integers(0, 1 << banks * words))
            value = rng.integers(WORD_MIN, WORD_MAX + 1, (banks, words))
            # Addresses of idle users are garbage: the active one must win.
            ctx.set(ram.b.en, eb)
            ctx.set(ram.b.addr, b_addr)
            ctx.set(ram.upd.read, read)
            ctx.set(ram.upd.read_addr, r_addr)
            ctx.set(ram.upd.write, write)
            ctx.set(ram.upd.write_addr, w_addr)
            ctx.set(ram.upd.mask, mask)
            ctx.set(ram.upd.value, value.tolist())
            ctx.set(ram.a.addr, a_addr)
            ctx.set(ram.a.en, fp)
            snapshot = model.copy()  # reads see the contents before this cycle's write
            await ctx.tick()
            if fp:
                held["a"] = snapshot[a_addr]
            if eb:
                held["b"] = snapshot[b_addr]
            if read:
                held[update_port] = snapshot[r_addr]
            if write:
                chosen = np.array([(mask >> n) & 1 for n in range(banks * words)], bool).reshape(banks, words)
                model[w_addr][chosen] = value[chosen]
                writes += 1
            for name, port in (("a", ram.a), ("b", ram.b), (update_port, ram.upd)):
                if held[name] is not None:
                    assert as_rows(ctx.get(port.data)) == held[name].tolist()
        # Everything written is really in the memory: read it all back on port A.
        ctx.set(ram.upd.write, 0)
        ctx.set(ram.upd.read, 0)
        ctx.set(ram.b.en, 0)
        for addr in range(rows):
            ctx.set(ram.a.addr, addr)
            ctx.set(ram.a.en, 1)
            await ctx.tick()
            assert as_rows(ctx.get(ram.a.data)) == model[addr].tolist()

    simulate(ram, bench, deadline=cycles + rows + 10)
    assert writes > cycles // 5


@pytest.mark.parametrize("misuse, message", [
    ("eb_and_update", "EB read and weight update on port B"),
    ("fp_and_update", "FP read and weight update on port A"),
    ("a_collides", "port A reads the row the update writes"),
])
def test_port_misuse_fails_the_simulation(misuse, message):
    ram = ParamRam(banks=1, rows=4, words=2)

    async def bench(ctx):
        ctx.set(ram.upd.read_addr, 1)
        ctx.set(ram.upd.write_addr, 2)
        if misuse == "eb_and_update":
            ctx.set(ram.b.en, 1)
            ctx.set(ram.upd.write, 1)
        elif misuse == "fp_and_update":
            ctx.set(ram.a.en, 1)
            ctx.set(ram.upd.read, 1)
        else:
            ctx.set(ram.upd.write, 1)
            ctx.set(ram.a.addr, 2)
            ctx.set(ram.a.en, 1)
        await ctx.tick()

    with pytest.raises(AssertionError, match=message):
        simulate(ram, bench, deadline=10)


@pytest.mark.parametrize("out_channels, in_channels, kernel, banks, tiles", [
    (5, 5, 3, 2, 2),
    (4, 4, 1, 2, 2),
    (7, 10, 3, 3, 4),
    (3, 6, 1, 4, 1),
    (5, 3, 3, 2, None),
])
def test_layout_folds_as_the_contract_says_and_unfolds_back(out_channels, in_channels, kernel, banks, tiles):
    rng = np.random.default_rng(out_channels * in_channels)
    weights = random_words(rng, (out_channels, in_channels, kernel, kernel))
    layout = WeightLayout(out_channels, in_channels, kernel, banks, tiles)
    rows = layout.fold(weights)
    np.testing.assert_array_equal(rows, folded(weights, banks, layout.tiles))
    assert layout.passes == -(-in_channels // layout.tiles)
    assert (layout.rows, layout.banks, layout.words) == rows.shape
    np.testing.assert_array_equal(layout.unfold(rows), weights)
    np.testing.assert_array_equal(layout.unfold(rows.reshape(-1, layout.words)), weights)
    np.testing.assert_array_equal(layout.fold(weights.reshape(out_channels, -1)), rows)
    if tiles is None:  # unfolded: today's layout, one output channel per row
        np.testing.assert_array_equal(rows, banked(weights, banks, layout.groups))


def test_layout_refusals():
    for tiles in (0, 4):
        with pytest.raises(ValueError, match=f"^param ram: tiles = {tiles} is not between 1 and the "
                                             f"slice's 3 input channels$"):
            ParamRam.from_slice(layer_slice(in_channels=(2, 5), tiles=tiles))
    with pytest.raises(ValueError, match=r"^param ram: initial weights of shape \(5, 2, 3, 3\) are not 5 "
                                         r"output x 3 input channels of 3x3$"):
        ParamRam.from_slice(layer_slice(in_channels=(2, 5), tiles=2), init=np.zeros((5, 2, 3, 3)))
    with pytest.raises(ValueError, match="^param ram: initial weight -32769 is outside the 16-bit"):
        WeightLayout(1, 2, 1, 1, 1).fold([[3, -32769]])


def test_refuses_initial_weights_that_do_not_fit():
    with pytest.raises(ValueError, match=r"param ram: initial weights of shape \(7, 9\) do not fit "
                                         r"3 rows x 2 banks of 9 words"):
        ParamRam(banks=2, rows=3, words=9, init=np.zeros((7, 9)))
    with pytest.raises(ValueError, match="param ram: initial weight 40000 is outside the 16-bit"):
        ParamRam(banks=1, rows=1, words=2, init=[[1, 40000]])


def test_memory_shape_and_ram_style():
    """One memory of G*v rows (G = ceil(OC/P)) of P*b*K*K words, block RAM only past the LUT-RAM depth."""
    lpram = ParamRam.from_slice(layer_slice(in_channels=(0, 3), out_channels=(0, 5), ces=2), family="ecp5")
    assert memories(lpram) == {"mem": (2 * 3 * 9 * 16, 3, "distributed")}
    # Folded (b = 2 of S = 5): G*v = 3*3 addresses of P*b*K*K words.
    lpram = ParamRam.from_slice(layer_slice(in_channels=(0, 5), out_channels=(0, 5), ces=2, tiles=2))
    assert memories(lpram) == {"mem": (2 * 2 * 9 * 16, 9, None)}
    # One word past the xc7 LUT-RAM depth: block RAM.
    assert memories(ParamRam(banks=1, rows=65, words=18, family="xc7")) == {"mem": (18 * 16, 65, "block")}
    assert memories(ParamRam(banks=1, rows=64, words=1, family="xc7")) == {"mem": (16, 64, "distributed")}
    assert memories(ParamRam(banks=1, rows=64, words=1)) == {"mem": (16, 64, None)}


def test_versioned_ram_copies_follow_the_host_the_walk_and_the_swap():
    # The host writes every copy and reads the walk's; the walk's writes reach the engines
    # (port A, port B) only after the swap, and its own copy at once.
    ram = VersionedParamRam(banks=2, rows=4, words=3, init=np.arange(24).reshape(8, 3))
    seen = {}

    async def host_word(ctx, addr, lane, value=None):
        ctx.set(ram.host.addr, addr)
        ctx.set(ram.host.lane, lane)
        if value is None:
            ctx.set(ram.host.read, 1)
            await ctx.tick()
            ctx.set(ram.host.read, 0)
            return ctx.get(ram.host.data)
        ctx.set(ram.host.value, value)
        ctx.set(ram.host.write, 1)
        await ctx.tick()
        ctx.set(ram.host.write, 0)

    async def engines(ctx, addr):
        for port in (ram.a, ram.b):
            ctx.set(port.addr, addr)
            ctx.set(port.en, 1)
        await ctx.tick()
        for port in (ram.a, ram.b):
            ctx.set(port.en, 0)
        return [[int(w) for w in bank] for bank in ctx.get(ram.a.data)], \
               [[int(w) for w in bank] for bank in ctx.get(ram.b.data)]

    async def bench(ctx):
        await host_word(ctx, 1, 4, -7)  # address 1, bank 1, word 1
        seen["host"] = await host_word(ctx, 1, 4)
        seen["engines"] = await engines(ctx, 1)
        ctx.set(ram.upd.write, 1)  # the walk writes word 0 of bank 0 at address 1
        ctx.set(ram.upd.write_addr, 1)
        ctx.set(ram.upd.mask, 1)
        ctx.set(ram.upd.value, [[99, 0, 0], [0, 0, 0]])
        await ctx.tick()
        ctx.set(ram.upd.write, 0)
        seen["walked, engines"] = await engines(ctx, 1)
        seen["walked, host"] = await host_word(ctx, 1, 0)
        ctx.set(ram.swap, 1)
        await ctx.tick()
        ctx.set(ram.swap, 0)
        seen["swapped"] = await engines(ctx, 1)
        ctx.set(ram.swap, 1)  # back to the copy that missed the walk's write
        await ctx.tick()
        ctx.set(ram.swap, 0)
        seen["swapped back"] = await engines(ctx, 1)

    simulate(ram, bench, deadline=100)
    before = [[6, 7, 8], [9, -7, 11]]
    after = [[99, 7, 8], [9, -7, 11]]
    assert seen["host"] == -7 and seen["walked, host"] == 99
    assert seen["engines"] == seen["walked, engines"] == seen["swapped back"] == (before, before)
    assert seen["swapped"] == (after, after)
    assert ram.memory_paths == ("walk.mem", "copy0.mem", "copy1.mem")
