"""FC weights in DRAM (hw/memory/dram_weights.py): the rows each engine reads and the rows written
back, bit for bit, against the weight versions docs/weight_versions.md fixes and the golden update
``saturate(w - requantize(gsum * lr, shift, seed, tensor, batch, index))``, with random stalls on
every stream and a DRAM that refreshes."""

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import Module, UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from hw.base.layouts import bank_layout
from hw.memory.dram_model import SimulatedDram
from hw.memory.dram_weights import DramWeights
from hw.memory.param_ram import WeightLayout
from mapping import numerics
from sim.chain import memory_row
from sim.helpers import FORMATS, folded, full_index, random_words, sgd
from sim.testbench import get, put, simulate

LR, SHIFT = 3000, FORMATS.weight_update_shift
TENSOR = numerics.tensor_id(2, numerics.WEIGHT_UPDATE)


class WeightsOverDram(wiring.Component):
    """A DramWeights and the SimulatedDram that holds its rows, with the DramWeights' ports."""

    def __init__(self, layout, initial, *, fp_stale, **options):
        self.weights = DramWeights(layout, fp_stale=fp_stale, shift=SHIFT, lr=LR, seed=FORMATS.seed,
                                   tensor=TENSOR, out_offset=1, in_offset=2, in_total=layout.in_channels + 3,
                                   **options)
        width = self.weights.queue.width
        self.dram = SimulatedDram(width, layout.rows, latency=6, refresh_every=40, refresh_cycles=5,
                                  init=[memory_row(r.reshape(-1).tolist()) for r in initial])
        signature = self.weights.signature.members
        super().__init__({name: signature[name] for name in ("fp", "eb", "grads", "total_samples", "stored")})

    def elaborate(self, platform):
        m = Module()
        m.submodules.weights, m.submodules.dram = self.weights, self.dram
        connect(m, self.weights.dram, self.dram.port)
        for name in ("fp", "eb"):
            connect(m, getattr(self.weights, name), flipped(getattr(self, name)))
        connect(m, flipped(self.grads), self.weights.grads)
        m.d.comb += [self.weights.total_samples.eq(self.total_samples), self.stored.eq(self.weights.stored)]
        return m


def _words(payload):
    """A row beat's (P, words) words, flat, bank-major."""
    return [int(word) for bank in payload for word in bank]


@pytest.mark.parametrize("out_channels, in_channels, banks, tiles, fp_stale, stall", [
    (3, 5, 2, 2, 1, 0.3),  # 2 groups x 3 passes, the last group and pass padded; EB one sample behind
    (4, 3, 4, 3, 0, 0.5),  # one address per pass: aligned, FP and EB of a sample in one pass
])
def test_passes_read_the_versions_and_write_the_update(out_channels, in_channels, banks, tiles, fp_stale,
                                                       stall):
    rng = np.random.default_rng(out_channels + fp_stale)
    layout = WeightLayout(out_channels, in_channels, 1, banks, tiles)
    samples = 4
    weights = random_words(rng, (out_channels, in_channels, 1, 1))
    products = [rng.integers(-(1 << 23), 1 << 23, (out_channels, in_channels, 1, 1)) for _ in range(samples)]
    products[1][0, 0] = 1 << 30  # the largest product (-32768 squared): its step saturates the weight
    dut = WeightsOverDram(layout, folded(weights, banks, tiles), fp_stale=fp_stale)
    results = {}

    async def host(ctx):
        """Counts the updates stored, then reads the DRAM: every update must be in it."""
        ctx.set(dut.total_samples, samples)
        stored = 0
        while stored < samples:
            _, _, pulse = await ctx.tick().sample(dut.stored)
            stored += pulse
        results["dram"] = [ctx.get(dut.dram.mem.data[r]) for r in range(layout.rows)]
        await ctx.tick().repeat(30)
        assert not ctx.get(dut.stored)  # no pass after the last sample's

    async def read_fp(ctx):
        results["fp"] = await get(ctx, dut.fp, samples * layout.rows, rng, stall, decode=_words)

    async def read_eb(ctx):
        results["eb"] = await get(ctx, dut.eb, samples * layout.rows, rng, stall, decode=_words)

    async def send_grads(ctx):
        beats = [{"row": a, "values": [[int(v) for v in bank] for bank in rows]}
                 for product in products for a, rows in enumerate(folded(product, banks, tiles))]
        await put(ctx, dut.grads, beats, rng, stall)

    simulate(dut, host, read_fp, read_eb, send_grads, deadline=4000)

    index = full_index(out_channels + 1, in_channels + 3, 1, (1, out_channels + 1), (2, in_channels + 2))
    versions = [weights.reshape(out_channels, -1)]
    for s in range(samples):
        versions.append(sgd(versions[-1], products[s].reshape(out_channels, -1), LR, SHIFT, TENSOR, s, index))
    assert (versions[2] == numerics.WORD_MAX).any() or (versions[2] == numerics.WORD_MIN).any()
    as_rows = [folded(v.reshape(weights.shape), banks, tiles).reshape(layout.rows, -1).tolist() for v in versions]
    got_fp = np.asarray(results["fp"]).reshape(samples, layout.rows, -1).tolist()
    got_eb = np.asarray(results["eb"]).reshape(samples, layout.rows, -1).tolist()
    for s in range(samples):
        assert got_fp[s] == as_rows[max(0, s - fp_stale)], f"FP of sample {s}"
        assert got_eb[s] == as_rows[s], f"EB of sample {s}"
    assert results["dram"] == [memory_row(r) for r in as_rows[samples]]


def test_initial_words_pack_each_row_as_the_rows_stream():
    """The DRAM image is packed with numpy (hw.base.layouts.packed_words), not a Const per word:
    each row the integer ``Layout.const`` gives for the stream's ``bank_layout``."""
    layout = WeightLayout(5, 3, 3, 2, 2)
    weights = np.random.default_rng(7).integers(numerics.WORD_MIN, numerics.WORD_MAX + 1, size=(5, 3, 3, 3))
    weights[0, 0, 0, 0], weights[0, 0, 0, 1] = numerics.WORD_MIN, -1
    rows = bank_layout(layout.banks, layout.words)
    expected = [rows.const(row.tolist()).as_value().value for row in layout.fold(weights)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)  # built for its DRAM image only
        dram_weights = DramWeights(layout, fp_stale=0, shift=SHIFT, lr=LR, seed=FORMATS.seed, tensor=TENSOR,
                                   out_offset=0, in_offset=0, in_total=3)
        assert dram_weights.initial_words(weights) == expected
        del dram_weights
        gc.collect()
    assert len(expected) == layout.rows and expected[0] & 0xFFFFFFFF == 0xFFFF8000  # -1, WORD_MIN
