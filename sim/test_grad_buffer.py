"""GradientBuffer (LGB / BGB): accumulation of PG beats and SGD update into a ParamRam, bit for bit.

The reference is the update as the golden model defines it (``mapping.golden``):
``saturate(w - requantize(gsum * lr, shift, seed, tensor, batch, index))`` with index
the row-major position in the whole layer's tensor; it is computed here with
``numerics`` directly on the slice and, for the whole layer, with the golden model's
own update function. Beats are the PG engine's (a group g and its P rows); the rows
past the slice's output channels carry nonzero junk here, which must change nothing.
"""

from dataclasses import replace

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from hw.memory.grad_buffer import GradientBuffer
from hw.memory.param_ram import ParamRam, VersionedParamRam
from mapping import golden, numerics
from mapping.network import Layer, infer
from mapping.nodeconfig import Training
from sim.helpers import memories
from sim.helpers import banked, folded, layer_slice, random_words
from sim.testbench import put, read_param_rows, simulate
from sim.helpers import FORMATS, full_index, sgd

ACC_MAX = (1 << (numerics.ACC_BITS - 1)) - 1


class Pair(wiring.Component):
    """A GradientBuffer wired to the ParamRam it updates; port A reads the results."""

    def __init__(self, gb, ram):
        self.gb, self.ram = gb, ram
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.gb, m.submodules.ram = self.gb, self.ram
        wiring.connect(m, self.gb.upd, self.ram.upd)
        return m


def gradient_beats(rng, rows, banks, words, count, big_rows=(), magnitude=1 << 23, big=1 << 30):
    """Random (address, (P, words) terms) beats for ceil(``rows`` / P) addresses, with runs of
    one address (back-to-back hits); row r is bank r % P of address r // P.

    Sums of a dozen +-2**23 terms (``magnitude``) give steps well inside the word range
    at lr ~ 3000 and shift 24, so the rounding noise decides the last bit; rows in
    ``big_rows`` also get two beats of about +-``big``, so their steps saturate. Padded
    words (rows past the slice's output channels, channels past its input channels)
    carry junk.
    """
    groups = -(-rows // banks)
    beats, group = [], 0
    for _ in range(count):
        if rng.random() > 0.5:
            group = int(rng.integers(0, groups))
        beats.append((group, rng.integers(-magnitude, magnitude, (banks, words))))
    for row in big_rows:
        signs = rng.choice([-1, 1], words)
        for _ in range(2):
            values = rng.integers(-magnitude, magnitude, (banks, words))
            values[row % banks] = signs * big + rng.integers(-99, 99, words)
            beats.insert(int(rng.integers(0, len(beats))), (row // banks, values))
    return beats


def summed(beats, layout):
    """The beats' sums per weight, (O, S*K*K), as the layout contract places them: word
    (c, ky, kx) of bank p at address g*v + i is weight (g*P + p, i*b + c, ky, kx); padding
    dropped."""
    o, s, kk, banks, tiles = (layout.out_channels, layout.in_channels, layout.kernel ** 2,
                              layout.banks, layout.tiles)
    gsum = np.zeros((layout.groups * banks, layout.passes * tiles, kk), dtype=np.int64)
    for address, values in beats:
        g, i = divmod(address, layout.passes)
        gsum[g * banks:(g + 1) * banks, i * tiles:(i + 1) * tiles] += values.reshape(banks, tiles, kk)
    gsum = gsum[:o, :s].reshape(o, s * kk)
    assert np.abs(gsum).max() <= ACC_MAX
    return gsum


def payload(gb, group, values):
    """A beat of ``gb.i``: ``grads`` (P rows of words) or ``bias_grads`` (one word per row)."""
    rows = [int(v) for v in values[:, 0]] if gb.bias else [[int(v) for v in row] for row in values]
    return {"row": group, "values": rows}


def run_batches(pair, batches, rng, stall):
    """Accumulate each mini-batch's beats, update, and read the ParamRam back after each update.

    Returns (contents after each update as (rows, banks, words), update durations in cycles).
    """
    gb, ram = pair.gb, pair.ram
    contents, durations = [], []

    async def bench(ctx):
        for number, beats in batches:
            await put(ctx, gb.i, [payload(gb, group, values) for group, values in beats], rng, stall)
            # The strobe comes right after the last beat, which is still being written back.
            ctx.set(gb.update, 1)
            ctx.set(gb.batch, number)
            await ctx.tick()
            ctx.set(gb.update, 0)
            cycles = 1
            while True:
                _, _, done, busy = await ctx.tick().sample(gb.done, gb.busy)
                assert busy
                cycles += 1
                if done:
                    break
            _, _, done, busy = await ctx.tick().sample(gb.done, gb.busy)
            assert not done and not busy  # done pulses once; accumulation resumes
            durations.append(cycles)
            contents.append(await read_param_rows(ctx, ram))

    simulate(pair, bench, deadline=20000)
    return contents, durations


def golden_layer_update(w, gsum, lr, batch, out_total, in_total, kernel, out_range, in_range):
    """The golden model's own update of a whole one-conv-layer network, on the slice's block.

    The slice's words are placed in zero layer tensors; its block of the result is returned.
    """
    net = infer("one", (in_total, 6, 6), [Layer("conv2d", "conv", out_channels=out_total,
                                                 kernel=kernel, padding=kernel // 2, bias=False)])
    block = np.s_[out_range[0]:out_range[1], in_range[0]:in_range[1]]
    full_w = np.zeros((out_total, in_total, kernel, kernel), dtype=np.int64)
    full_g = np.zeros_like(full_w)
    full_w[block] = w.reshape(full_w[block].shape)
    full_g[block] = gsum.reshape(full_g[block].shape)
    new = golden._sgd_update(net, {"conv": (full_w, None)}, {"conv": (full_g, None)}, lr,
                             golden.arithmetic("fixed", FORMATS), batch)
    return new["conv"][0][block].reshape(w.shape)


@pytest.mark.parametrize("banks, stall", [
    (2, 0.3),  # 3 groups, the last one half empty
    (1, 0.0),  # 5 groups of one row
    (4, 0.5),  # 2 groups, the last one with 3 empty rows
    (6, 0.0),  # 1 group: every beat adds into the address written the cycle before
])
def test_weight_update_matches_golden_over_two_batches(banks, stall):
    rng = np.random.default_rng(banks)
    out_range, in_range, kernel = (4, 9), (3, 5), 3  # slice offsets: global indices matter
    out_total, in_total = 12, 7
    out_channels, words = 5, 2 * kernel * kernel
    lr = 3000
    s = layer_slice(in_channels=in_range, out_channels=out_range, kernel=kernel, ces=banks,
                    in_total=in_total, out_total=out_total, position=0)
    weights = random_words(rng, (out_channels, words))
    weights[0, :4] = [numerics.WORD_MIN, numerics.WORD_MAX, numerics.WORD_MIN, numerics.WORD_MAX]
    training = Training(batch=4, lr=0.1, lr_constant=lr, bias_lr_constant=lr)
    gb = GradientBuffer.from_slice(s, FORMATS, training)
    ram = ParamRam.from_slice(s, init=weights)
    # Mini-batch 7 has rows whose sums saturate the update; 8 checks the sums were cleared.
    batches = [(7, gradient_beats(rng, out_channels, banks, words, 60, big_rows=(0, 3))),
               (8, gradient_beats(rng, out_channels, banks, words, 40))]
    contents, durations = run_batches(Pair(gb, ram), batches, rng, stall)

    tensor = numerics.tensor_id(0, numerics.WEIGHT_UPDATE)
    index = full_index(out_total, in_total, kernel, out_range, in_range)
    w = weights
    for (number, beats), got in zip(batches, contents):
        gsum = summed(beats, gb.layout)
        want = sgd(w, gsum, lr, FORMATS.weight_update_shift, tensor, number, index)
        np.testing.assert_array_equal(got, banked(want, banks, ram.rows))
        np.testing.assert_array_equal(
            golden_layer_update(w, gsum, lr, number, out_total, in_total, kernel, out_range, in_range), want)
        if number == 7:  # saturation really happened, both ways
            assert (want == numerics.WORD_MIN).any() and (want == numerics.WORD_MAX).any()
        w = want
    # One word per cycle, plus the strobe, the first address's read and the pipeline.
    assert durations == [out_channels * words + 5 + gb.rounder.latency] * 2


@pytest.mark.parametrize("out_channels, in_channels, kernel, banks, tiles, lanes, stall", [
    (5, 5, 3, 2, 2, 1, 0.3),  # 3 groups x 3 passes: the last group and the last pass half padded
    (5, 5, 3, 2, 2, 4, 0.0),  # chunks of 4 words: 5 per row of 18, 3 in the last pass's 9
    (5, 5, 3, 2, 2, 36, 0.3),  # a whole address per chunk, padded banks and words masked
    (3, 4, 1, 2, 2, 1, 0.0),  # 2 groups x 2 full passes, the last group half padded
    (3, 4, 1, 2, 2, 4, 0.0),  # both banks' rows in one chunk
    (4, 7, 1, 4, 3, 1, 0.5),  # 1 group, passes of 3, 3 and 1 channels
    (4, 7, 1, 4, 3, 6, 0.5),  # chunks of two banks' rows, the last pass's padded words masked
])
def test_folded_weight_update_matches_numpy_over_two_batches(out_channels, in_channels, kernel, banks,
                                                             tiles, lanes, stall):
    """Sums of (g*v + i)-addressed beats, updated with the whole layer's noise index; padding
    stays zero; ``lanes`` words a cycle."""
    rng = np.random.default_rng(out_channels * 100 + in_channels * 10 + tiles)
    out_range, in_range = (4, 4 + out_channels), (3, 3 + in_channels)
    out_total, in_total, lr = 12, 11, 3000
    s = replace(layer_slice(in_channels=in_range, out_channels=out_range, kernel=kernel, ces=banks, tiles=tiles,
                            in_total=in_total, out_total=out_total, position=0), update_lanes=lanes)
    weights = random_words(rng, (out_channels, in_channels, kernel, kernel))
    training = Training(batch=4, lr=0.1, lr_constant=lr, bias_lr_constant=lr)
    gb = GradientBuffer.from_slice(s, FORMATS, training)
    ram = ParamRam.from_slice(s, init=weights)
    layout = ram.layout
    assert gb.layout == layout and (gb.tiles, gb.passes) == (tiles, -(-in_channels // tiles))
    rows, words = layout.rows * banks, layout.words
    # Row 0 (address 0, bank 0) and row P (address 1, bank 0) hold real weights that saturate.
    batches = [(7, gradient_beats(rng, rows, banks, words, 60, big_rows=(0, banks))),
               (8, gradient_beats(rng, rows, banks, words, 40))]
    contents, durations = run_batches(Pair(gb, ram), batches, rng, stall)

    tensor = numerics.tensor_id(0, numerics.WEIGHT_UPDATE)
    index = full_index(out_total, in_total, kernel, out_range, in_range).reshape(weights.shape)
    w = weights
    for (number, beats), got in zip(batches, contents):
        gsum = summed(beats, layout).reshape(weights.shape)
        want = sgd(w, gsum, lr, FORMATS.weight_update_shift, tensor, number, index)
        np.testing.assert_array_equal(got, folded(want, banks, tiles))  # padded words zero
        np.testing.assert_array_equal(
            golden_layer_update(w, gsum, lr, number, out_total, in_total, kernel, out_range, in_range), want)
        if number == 7:
            assert (want == numerics.WORD_MIN).any() and (want == numerics.WORD_MAX).any()
        w = want
    # One cycle per chunk holding a real weight, plus the strobe, the first read and the
    # pipeline: the performance model's update walk for the slice.
    chunks = {(5, 1): 5 * 5 * 9, (5, 4): (2 + 2 + 1) * (5 + 5 + 3), (5, 36): 3 * 3,
              (3, 1): 3 * 4, (3, 4): 2 * 2, (4, 1): 4 * 7, (4, 6): 2 * 3}[out_channels, lanes]
    assert durations == [chunks + 5 + gb.rounder.latency] * 2
    assert durations == [s.update_cycles(FORMATS.weight_update_shift)] * 2


@pytest.mark.parametrize("shift", [0, -3])
def test_update_with_exact_shifts(shift):
    """shift <= 0: no noise, a one-stage rounder; the update is still exact and complete."""
    rng = np.random.default_rng(30 - shift)
    out_channels, words, banks, lr = 3, 4, 2, 5
    gb = GradientBuffer(out_channels=out_channels, in_channels=4, kernel=1, banks=banks, shift=shift,
                        lr=lr, seed=FORMATS.seed, tensor=9)
    weights = random_words(rng, (out_channels, words))
    ram = ParamRam(banks=banks, rows=gb.rows, words=words, init=weights)
    beats = gradient_beats(rng, out_channels, banks, words, 20, magnitude=1 << 9)
    contents, durations = run_batches(Pair(gb, ram), [(1, beats)], rng, 0.3)
    want = sgd(weights, summed(beats, gb.layout), lr, shift, 9, 1,
               np.arange(out_channels * words, dtype=np.uint64).reshape(out_channels, words))
    np.testing.assert_array_equal(contents[0], banked(want, banks, ram.rows))
    assert durations == [out_channels * words + 5 + 1]


def test_bias_update_of_a_slice_owning_channels_past_the_first():
    """An OCP slice's biases (its own output channels 2..8 of 10): indices from channel 2 on."""
    rng = np.random.default_rng(21)
    banks, out_range, lr = 3, (2, 9), 40000
    out_channels = out_range[1] - out_range[0]
    s = layer_slice(in_channels=(0, 8), out_channels=out_range, ces=banks, in_total=8, out_total=10,
                    position=3, mode="ocp", last=True)
    training = Training(batch=2, lr=0.01, lr_constant=700, bias_lr_constant=lr)
    gb = GradientBuffer.from_slice(s, FORMATS, training, bias=True)
    biases = random_words(rng, (out_channels, 1))
    ram = ParamRam(banks=banks, rows=gb.rows, words=1, init=biases, shared_update=True)
    # The beats are the PG engine's errors (16-bit words). Steps of gsum * 40000 / 2**16:
    # terms of 2**11 keep most of them inside the word range, two of 2**15 saturate.
    beats = gradient_beats(rng, out_channels, banks, 1, 30, big_rows=(1, 4, 6), magnitude=1 << 11,
                           big=32000)
    contents, _ = run_batches(Pair(gb, ram), [(5, beats), (6, beats[:9])], rng, 0.3)
    index = np.arange(*out_range, dtype=np.uint64).reshape(-1, 1)
    tensor, shift = numerics.tensor_id(3, numerics.BIAS_UPDATE), FORMATS.bias_update_shift
    b = biases
    for (number, part), got in zip([(5, beats), (6, beats[:9])], contents):
        gsum = summed(part, gb.layout)
        want = sgd(b, gsum, lr, shift, tensor, number, index)
        np.testing.assert_array_equal(got, banked(want, banks, ram.rows))
        b = want
    steps = numerics.requantize(summed(beats, gb.layout) * lr, shift, FORMATS.seed, tensor, 5,
                                index)
    assert (np.abs(steps) < numerics.WORD_MAX).sum() >= 3 and (np.abs(steps) > numerics.WORD_MAX).any()


def test_from_slice_refuses_biases_of_a_slice_that_does_not_own_them():
    s = layer_slice(in_channels=(0, 3), out_channels=(0, 5), last=False)
    training = Training(batch=2, lr=0.01, lr_constant=700, bias_lr_constant=900)
    with pytest.raises(ValueError, match=r"gradient buffer: the icp slice of layer 'conv' on channels "
                                         r"\(0, 3\)->\(0, 5\) owns no biases"):
        GradientBuffer.from_slice(s, FORMATS, training, bias=True)


def test_bias_buffer_refuses_more_than_one_word_per_row():
    with pytest.raises(ValueError, match=r"gradient buffer: a bias buffer has one word per row, not "
                                         r"in_channels = 2 x kernel = 3x3"):
        GradientBuffer(out_channels=4, in_channels=2, kernel=3, banks=2, shift=4, lr=1, seed=0, tensor=0,
                       bias=True)


@pytest.mark.parametrize("tiles", [0, 3])
def test_refuses_tiles_outside_the_input_channels(tiles):
    with pytest.raises(ValueError, match=f"^gradient buffer: tiles = {tiles} is not between 1 and the "
                                         f"slice's 2 input channels$"):
        GradientBuffer(out_channels=4, in_channels=2, kernel=3, banks=2, tiles=tiles, shift=4, lr=1, seed=0,
                       tensor=0)


def test_update_strobe_while_updating_fails_the_simulation():
    gb = GradientBuffer(out_channels=2, in_channels=1, kernel=1, banks=1, shift=4, lr=1, seed=0, tensor=0)
    ram = ParamRam(banks=1, rows=2, words=1)
    pair = Pair(gb, ram)

    async def bench(ctx):
        for _ in range(3):
            ctx.set(gb.update, 1)
            await ctx.tick()

    with pytest.raises(AssertionError, match="gradient buffer: update strobe while updating"):
        simulate(pair, bench, deadline=10)


def test_beat_during_the_update_fails_the_simulation():
    # The buffer never refuses a beat: the update gate must hold PG from the strobe to done.
    gb = GradientBuffer(out_channels=2, in_channels=1, kernel=1, banks=1, shift=4, lr=1, seed=0, tensor=0)
    pair = Pair(gb, ParamRam(banks=1, rows=2, words=1))

    async def bench(ctx):
        ctx.set(gb.update, 1)
        await ctx.tick()
        ctx.set(gb.update, 0)
        await ctx.tick()
        ctx.set(gb.i.payload, {"row": 1, "values": [[1]]})
        ctx.set(gb.i.valid, 1)
        for _ in range(2):
            await ctx.tick()

    with pytest.raises(AssertionError, match="gradient buffer: a beat during the update"):
        simulate(pair, bench, deadline=10)


def test_group_past_the_slice_fails_the_simulation():
    # 5 channels on 2 banks: groups 0..2, but the 2-bit group field can say 3.
    gb = GradientBuffer(out_channels=5, in_channels=1, kernel=1, banks=2, shift=4, lr=1, seed=0, tensor=0)
    pair = Pair(gb, ParamRam(banks=2, rows=3, words=1))

    async def bench(ctx):
        ctx.set(gb.i.payload, {"row": 3, "values": [[1], [2]]})
        ctx.set(gb.i.valid, 1)
        for _ in range(2):
            await ctx.tick()

    with pytest.raises(AssertionError, match="gradient buffer: gradient row beyond the slice's addresses"):
        simulate(pair, bench, deadline=10)


def test_memory_shape_and_ram_style():
    """Sums: G*v addresses (G = ceil(OC/P)) of P*b*K*K 48-bit words; biases one word per row."""
    s = layer_slice(in_channels=(0, 3), out_channels=(0, 34), ces=2, last=True)
    training = Training(batch=2, lr=0.01, lr_constant=700, bias_lr_constant=900)
    lgb = GradientBuffer.from_slice(s, FORMATS, training, family="ecp5")
    assert memories(lgb)["mem"] == (2 * 3 * 9 * numerics.ACC_BITS, 17, "block")
    bias = GradientBuffer.from_slice(s, FORMATS, training, bias=True, family="xc7")
    assert memories(bias)["mem"] == (2 * numerics.ACC_BITS, 17, "distributed")
    folded_slice = layer_slice(in_channels=(0, 5), out_channels=(0, 34), ces=2, tiles=2)
    folded_lgb = GradientBuffer.from_slice(folded_slice, FORMATS, training, family="ecp5")
    assert memories(folded_lgb)["mem"] == (2 * 2 * 9 * numerics.ACC_BITS, 17 * 3, "block")


@pytest.mark.parametrize("stall", [0.0, 0.4])
def test_overlapped_update_sums_the_next_batch_while_it_walks(stall):
    """The update that does not stop the engines (``overlapped_batch``): PG's beats of mini-batch
    m + 1 go on into the second sums while the walk of m reads the first and writes version
    m + 1 into the engines' idle copy and the walk's copy; the engines read version m until
    ``swap``. Three mini-batches, so each sum is walked, cleared and filled again."""
    rng = np.random.default_rng(int(stall * 10))
    banks, kernel, batch = 2, 3, 2
    out_range, in_range, out_total, in_total = (1, 6), (0, 2), 8, 2
    out_channels, words, lr = 5, 2 * kernel * kernel, 3000
    s = replace(layer_slice(in_channels=in_range, out_channels=out_range, kernel=kernel, ces=banks,
                            in_total=in_total, out_total=out_total, position=0), overlapped_update=True)
    weights = random_words(rng, (out_channels, words))
    training = Training(batch=batch, lr=0.1, lr_constant=lr, bias_lr_constant=lr)
    gb = GradientBuffer.from_slice(s, FORMATS, training)
    ram = VersionedParamRam.from_slice(s, init=weights)
    sample_beats = gb.sample_beats  # an address per output pixel: 3 groups x 8 x 8 pixels
    assert sample_beats == 3 * 64
    batches = [gradient_beats(rng, out_channels, banks, words, batch * sample_beats) for _ in range(3)]
    engines_saw, walked = [], []

    async def feeder(ctx):
        for beats in batches:
            await put(ctx, gb.i, [payload(gb, group, values) for group, values in beats], rng, stall)

    async def updater(ctx):
        for number in range(len(batches)):
            # the strobe once the mini-batch's last beat is in, the next mini-batch's arriving
            while gb_beats[0] < (number + 1) * batch * sample_beats:
                await ctx.tick()
            ctx.set(gb.update, 1)
            ctx.set(gb.batch, number)
            await ctx.tick()
            ctx.set(gb.update, 0)
            await ctx.tick().until(gb.done)
            await ctx.tick()
            engines_saw.append(await read_param_rows(ctx, ram))  # walked, not swapped: version m
            ctx.set(ram.swap, 1)
            await ctx.tick()
            ctx.set(ram.swap, 0)
            walked.append(await read_param_rows(ctx, ram))  # after the swap: version m + 1

    gb_beats = [0]

    async def counter(ctx):
        async for _, _, valid, ready in ctx.tick().sample(gb.i.valid, gb.i.ready):
            gb_beats[0] += bool(valid and ready)

    simulate(Pair(gb, ram), feeder, updater, processes=[counter], deadline=20000)
    tensor = numerics.tensor_id(0, numerics.WEIGHT_UPDATE)
    index = full_index(out_total, in_total, kernel, out_range, in_range)
    w = weights
    for number, beats in enumerate(batches):
        np.testing.assert_array_equal(engines_saw[number], banked(w, banks, ram.rows))
        w = sgd(w, summed(beats, gb.layout), lr, FORMATS.weight_update_shift, tensor, number, index)
        np.testing.assert_array_equal(walked[number], banked(w, banks, ram.rows))
