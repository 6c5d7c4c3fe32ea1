"""Helpers shared by the cycle-level tests: slices and weights to test with, the memories
of an elaborated design, stream runs and the golden arithmetic they are checked against."""

from dataclasses import dataclass

import numpy as np
from amaranth.back import rtlil
from amaranth.hdl import Fragment

from hw.engines.fp_engine import FPEngine
from mapping import numerics, tensor_ops, zoo
from mapping.network import Layer, infer
from mapping.nodeconfig import Engine, LayerSlice, Pool
from mapping.numerics import WORD_MAX, WORD_MIN
from sim.testbench import EngineWithWeights, as_ints, get, put, simulate


def expected_beats(out, ces):
    """Partial-sum beats of conv_forward's (OC, OH, OW) output: per pixel, ceil(OC/P) groups."""
    oc = out.shape[0]
    groups = -(-oc // ces)
    padded = np.zeros((groups * ces,) + out.shape[1:], dtype=np.int64)
    padded[:oc] = out
    # (OH, OW, G, P) in raster order, then group.
    return padded.reshape(groups, ces, -1).transpose(2, 0, 1).reshape(-1, ces)


@dataclass
class Run:
    got: np.ndarray
    want: np.ndarray
    transfers: list  # clock edges (counted from 1) at which a partial-sum beat was taken
    simulated: int   # clock edges simulated in all
    engine: FPEngine


def run_fifo(dut, payloads, rng, stall_in, stall_out, hold_out=0, decode=None):
    """Push ``payloads`` and pop them back; a monitor checks every cycle against the handshakes.

    ``hold_out``: cycles the consumer waits before it starts taking (fills the queue).
    Returns (popped payloads, level seen at every clock edge).
    """
    count = len(payloads)
    result, levels = {}, []

    async def producer(ctx):
        await put(ctx, dut.i, payloads, rng, stall_in)

    async def consumer(ctx):
        if hold_out:
            await ctx.tick().repeat(hold_out)
        result["out"] = await get(ctx, dut.o, count, rng, stall_out, decode=decode)

    async def monitor(ctx):
        # ``expected`` is the level the handshakes give: beats pushed minus beats popped, a pop
        # counted a cycle late with ``pop_register``; ``held`` is what the queue holds.
        expected, held, popped, late_pop = 0, 0, 0, 0
        while popped < count:
            _, _, i_valid, i_ready, o_valid, o_ready, level = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.level)
            assert level == expected, f"level {level}, handshakes say {expected}"
            assert i_ready == (expected < dut.depth)  # full: nothing more goes in
            assert not (o_valid and held == 0)        # empty: nothing comes out
            levels.append(level)
            pushed, pop = i_valid and i_ready, o_valid and o_ready
            popped += pop
            held += pushed - pop
            expected += pushed - (late_pop if dut.pop_register else pop)
            late_pop = pop

    simulate(dut, producer, consumer, monitor, deadline=12 * count + 4 * hold_out + 50)
    return result["out"], np.array(levels)


def memories(design):
    """(width, depth, ram_style or None) of every memory in ``design``'s RTLIL, by hierarchical name."""
    found, module, style = {}, "", None
    for line in rtlil.convert(design, name="top").splitlines():
        words = line.split()
        if words[:1] == ["module"]:
            module = words[1].lstrip("\\").removeprefix("top").lstrip(".")
        elif words[:2] == ["attribute", "\\ram_style"]:
            style = words[2].strip('"')
        elif words[:1] == ["memory"]:
            name = ".".join(filter(None, (module, words[-1].lstrip("\\"))))
            found[name] = (int(words[words.index("width") + 1]), int(words[words.index("size") + 1]), style)
        if words[:1] != ["attribute"]:
            style = None  # attributes belong to the next declaration only
    return found


def layer_slice(*, in_channels=(0, 3), out_channels=(0, 5), kernel=3, ces=2, tiles=None, in_total=None,
                out_total=None, position=1, mode="icp", last=True, bias=True, act_ram_words=0):
    """A LayerSlice with the geometry the memory blocks read (the rest is filler).

    Its engines are the mapping's: P = ``ces`` x b = ``tiles`` (None: S, unfolded) for FP
    and PG, b x P for EB.
    """
    tiles = in_channels[1] - in_channels[0] if tiles is None else tiles
    engine = Engine(ces=ces, tiles=tiles, kernel=kernel)
    return LayerSlice(
        layer="conv", position=position, kind="conv", mode=mode,
        in_shape=(in_total or in_channels[1], 8, 8), out_shape=(out_total or out_channels[1], 8, 8),
        kernel=kernel, stride=1, padding=kernel // 2, bias=bias, relu=True, pool=None,
        in_range=in_channels, out_range=out_channels, first=True, last=last, needs_eb=True,
        fp=engine, eb=Engine(ces=tiles, tiles=ces, kernel=kernel), pg=engine, act_ram_words=act_ram_words,
        line_buffer_words=0, pab_words=0, lgb_words=0, weights_offchip=False)


def random_words(rng, shape):
    words = rng.integers(WORD_MIN, WORD_MAX + 1, shape)
    words.flat[:2] = WORD_MIN, WORD_MAX
    return words


def banked(weights, banks, rows):
    """Model of the memory: (rows, banks, words), channel g*P + p at [g, p]."""
    flat = weights.reshape(weights.shape[0], -1)
    padded = np.zeros((rows * banks, flat.shape[1]), dtype=np.int64)
    padded[:len(flat)] = flat
    return padded.reshape(rows, banks, -1)


def folded(weights, banks, tiles):
    """Model of a folded LPRAM, (G*v, P, b*K*K), written out from the layout contract word by word."""
    out_channels, in_channels, kernel, _ = weights.shape
    groups, passes = -(-out_channels // banks), -(-in_channels // tiles)
    rows = np.zeros((groups * passes, banks, tiles, kernel, kernel), dtype=np.int64)
    for g in range(groups):
        for i in range(passes):
            for p in range(banks):
                for c in range(tiles):
                    o, channel = g * banks + p, i * tiles + c
                    if o < out_channels and channel < in_channels:
                        rows[g * passes + i, p, c] = weights[o, channel]
    return rows.reshape(groups * passes, banks, -1)


def as_rows(payload):
    return [as_ints(row) for row in payload]


def wide_fc():
    """A fully connected layer of 1,152 inputs (32 channels of a 6x6 map) and 32 outputs: on one
    ECP5-85 its slice keeps more flattened inputs than ``memories.DEEP_FC_STORE_INPUTS``, so its
    corner turns are the deep ones (hw/memory/fc_store.py)."""
    return infer("wide-fc", (1, 6, 6), [zoo.conv("conv1", 32, 3, pad=1), Layer("relu", "relu1"),
                                        Layer("flatten", "flatten"), Layer("linear", "fc", out_channels=32)])


# The widest output vector wide_vector() hands on as one stream word in its tests: fc1's 24
# outputs travel as the pixels of an 8 x 1 x 3 map (nodeconfig.vector_map).
WIDE_VECTOR_WORDS = 8


def wide_vector():
    """Two fully connected layers, fc1's 24 outputs wider than :data:`WIDE_VECTOR_WORDS`: mapped
    with it, they travel as a map's pixels, fc1's errors a group of P a beat
    (LayerSlice.out_map), as VGG's fc6 and fc7 outputs of 4,096 do at the default width."""
    return infer("wide-vector", (1, 4, 4), [zoo.conv("conv1", 4, 3, pad=1), Layer("relu", "relu1"),
                                            Layer("flatten", "flatten"), Layer("linear", "fc1", out_channels=24),
                                            Layer("relu", "relu2"), Layer("linear", "fc2", out_channels=6)])


def micro_overlap():
    """zoo.micro with AlexNet's max-pool: 3x3 windows at stride 2 over conv1's 7 x 7 output
    (hw/node/sfu.OverlappingPoolSFU)."""
    return infer("micro-overlap", (1, 7, 7), [
        zoo.conv("conv1", 2, 3, pad=1), Layer("relu", "relu1"), Layer("maxpool", "pool1", kernel=3, stride=2),
        Layer("flatten", "flatten"), Layer("linear", "fc", out_channels=4)])


def conv_slice(**fields):
    """A LayerSlice of a 3x3 conv layer (tiny's conv2 geometry unless overridden)."""
    base = dict(layer="conv2", position=3, kind="conv", mode="icp", in_shape=(4, 4, 4),
                out_shape=(8, 4, 4), kernel=3, stride=1, padding=1, bias=True, relu=True,
                pool=Pool(2, 2), in_range=(0, 4), out_range=(0, 8), first=True, last=True,
                needs_eb=True, fp=Engine(3, 4, 3), eb=Engine(2, 8, 3), pg=Engine(1, 1, 3),
                act_ram_words=0, line_buffer_words=0, pab_words=0, lgb_words=0,
                weights_offchip=False)
    return LayerSlice(**(base | fields))


def lpram_rows(weights, ces, tiles, rng=None):
    """The folded LPRAM layout of weights (O, S, K, K): (G*v, P, b*K*K) rows.

    Address g*v + i, bank p holds output channel g*P + p for input channels i*b .. i*b+b-1,
    flattened (b, K, K); padded words (channel >= O or >= S) are zero, or random junk from
    ``rng`` (the engines must not depend on them).
    """
    o, s, k, _ = weights.shape
    groups, passes = -(-o // ces), -(-s // tiles)
    full = np.zeros((groups * ces, passes * tiles, k, k), dtype=np.int64)
    if rng is not None:
        full[:] = rng.integers(WORD_MIN, WORD_MAX + 1, full.shape)
    full[:o, :s] = weights
    return (full.reshape(groups, ces, passes, tiles * k * k).transpose(0, 2, 1, 3)
            .reshape(groups * passes, ces, -1))


def run_engine(*, channels, kernel, ces, out_channels, size, stride=1, padding=0, tiles=None, rng,
               stall=0.0, samples=1, family=None, deadline=None):
    shape = (channels, size, size)
    xs = [rng.integers(WORD_MIN, WORD_MAX + 1, shape) for _ in range(samples)]
    weights = rng.integers(WORD_MIN, WORD_MAX + 1, (out_channels, channels, kernel, kernel))
    # Extremes on one sample: the largest products and sums the words allow.
    xs[0][:, 0, :] = WORD_MIN
    weights[0] = WORD_MIN
    engine = FPEngine(channels=channels, kernel=kernel, ces=ces, out_channels=out_channels, tiles=tiles,
                        family=family)
    dut = EngineWithWeights(engine, lpram_rows(weights, ces, engine.tiles, rng).tolist())
    windows = [[int(v) for v in win.reshape(-1)]
               for x in xs for row in tensor_ops.windows(x, kernel, stride, padding) for win in row]
    want = np.concatenate([expected_beats(tensor_ops.conv_forward(x, weights, stride, padding), ces)
                           for x in xs])
    state = {"now": 0, "transfers": []}

    async def producer(ctx):
        await put(ctx, dut.windows, windows, rng, stall)

    async def consumer(ctx):
        state["beats"] = await get(ctx, dut.psums, len(want), rng, stall, decode=lambda p: as_ints(p.values))

    async def clock(ctx):
        async for _, _, valid, ready in ctx.tick().sample(dut.psums.valid, dut.psums.ready):
            state["now"] += 1
            if valid and ready:
                state["transfers"].append(state["now"])

    if deadline is None:
        deadline = int(len(want) * engine.passes / (1 - stall) ** 2 * 3) + engine.latency + 20
    simulate(dut, producer, consumer, processes=[clock], deadline=deadline)
    return Run(np.array(state["beats"], dtype=np.int64).reshape(want.shape), want, state["transfers"],
               state["now"], engine)


def mults(engine):
    """The engine's multiplier instances, counted in its elaborated hierarchy."""
    return sum(name.startswith("mult_") for _, name, _ in Fragment.get(engine, None).subfragments)


def eb_slice(**changes):
    fields = dict(layer="conv2", position=1, kind="conv", mode="icp", in_shape=(8, 6, 6),
                  out_shape=(10, 6, 6), kernel=3, stride=1, padding=1, bias=True, relu=True, pool=None,
                  in_range=(2, 5), out_range=(0, 10), first=False, last=False, needs_eb=True,
                  fp=Engine(ces=4, tiles=3, kernel=3), eb=Engine(ces=3, tiles=4, kernel=3),
                  pg=Engine(ces=4, tiles=3, kernel=3), act_ram_words=0, line_buffer_words=0,
                  pab_words=0, lgb_words=0, weights_offchip=False)
    return LayerSlice(**(fields | changes))


FORMATS = numerics.Formats()


def sgd(w, gsum, lr, shift, tensor, batch, index):
    """The golden update on the slice's words."""
    step = numerics.requantize(gsum * lr, shift, FORMATS.seed, tensor, batch, index)
    return numerics.saturate(w - step)


def full_index(out_total, in_total, kernel, out_range, in_range):
    index = np.arange(out_total * in_total * kernel * kernel, dtype=np.uint64)
    index = index.reshape(out_total, in_total, kernel, kernel)
    return index[out_range[0]:out_range[1], in_range[0]:in_range[1]].reshape(out_range[1] - out_range[0], -1)


def accumulators(rng, count, shift, acc_width):
    """Random accumulators mixing every corner: in range, saturating both ways, exact multiples."""
    top = 1 << (acc_width - 1)
    scale = 1 << max(shift, 0)
    word = 1 << (numerics.WORD_BITS - 1)
    edge = word << shift if shift >= 0 else word >> -shift  # where the result starts to saturate
    kinds = rng.integers(0, 6, count)
    values = np.select(
        [kinds == 0, kinds == 1, kinds == 2, kinds == 3, kinds == 4],
        [rng.integers(-edge, edge, count),                            # inside the word range
         rng.integers(-2, 2, count) * scale + edge * rng.choice([-1, 1], count),  # at the edges
         rng.integers(-word, word, count) * scale,                    # exact multiples
         rng.integers(-top, top, count, dtype=np.int64),             # anywhere: mostly saturating
         rng.choice([-top, top - 1, -1, 0, 1], count)],               # extremes
        rng.integers(-scale, scale + 1, count))                       # around zero
    return np.clip(values, -top, top - 1).astype(np.int64)
