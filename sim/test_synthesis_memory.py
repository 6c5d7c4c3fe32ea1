"""Yosys maps the memory blocks to block RAM, in exactly the number of blocks width x depth predicts.

Every block is built for the family it is synthesized for, so its memories carry the
``ram_style`` of ``mapping.resources.ram_style``: block RAM past LUTRAM_MAX_DEPTH words,
distributed RAM up to it (checked on the Fifo at the boundary).

Prediction: the cheapest single shape of the family's 18 Kb block (RAMB36 counts as two)
that the memory's ports allow, ``ceil(width / shape width) * ceil(depth / shape depth)``.
A 16-bit word written on its own takes two 9-bit bytes (byte enables), so a ParamRam
row of n words is 18n bits wide. True dual-port shapes go up to 18 bits (36 for
RAMB36); only simple dual-port memories (one read, one write port) may use 36 (72).
"""

import math
from dataclasses import replace

import pytest

from hw.balance.blocks import hosted_blocks, relayed_blocks
from hw.balance.hosted_rows import HostedRows
from hw.balance.relay import Relay
from hw.memory.act_ram import ActRam
from hw.memory.fc_store import DeepFcErrorStore, DeepFcWindowStore
from hw.memory.fifo import Fifo
from hw.memory.grad_buffer import GradientBuffer
from hw.memory.param_ram import ParamRam
from hw.synth import SynthResult, synthesize
from mapping.memories import Memory, cost as memories_cost, hosted_memories
from mapping.cluster import parse_cluster
from mapping.mapper import map_network
from sim.chain import STOPPING_UPDATE_OPTIONS
from mapping.nodeconfig import Training
from mapping.numerics import Formats
from mapping.resources import LUTRAM_MAX_DEPTH, bram_blocks, register_bits
from mapping.zoo import tiny
from sim.helpers import memories
from sim.helpers import layer_slice

# (width, depth, 18 Kb units, simple-dual-port only)
SHAPES = {
    "ecp5": [(w, 16384 // w if w < 9 else 18432 // w, 1, False) for w in (1, 2, 4, 9, 18)]
            + [(36, 512, 1, True)],
    "xc7": [(w, 16384 // w if w < 9 else 18432 // w, 1, False) for w in (1, 2, 4, 9, 18)]
           + [(36, 512, 1, True)]
           + [(w, 32768 // w if w < 9 else 36864 // w, 2, False) for w in (1, 2, 4, 9, 18, 36)]
           + [(72, 512, 2, True)],
}


def predicted_blocks(family, width, depth, true_dual_port):
    return min(math.ceil(width / w) * math.ceil(depth / d) * units
               for w, d, units, sdp_only in SHAPES[family] if not (sdp_only and true_dual_port))


def synth(dut, family, tmp_path, inference_only=True):
    """Block RAM, distributed RAM and multiplier counts (hw.synth's inference-only flow); the
    whole flow where a test counts flip-flops."""
    return synthesize(dut, family, workdir=tmp_path, inference_only=inference_only)


def test_an_inference_only_result_refuses_logic_counts():
    result = SynthResult("ecp5", {"DP16KD": 2, "LUT4": 7, "TRELLIS_FF": 3}, inference_only=True)
    assert (result.bram, result.dsp) == (2, 0)
    for count, what in (("lut", "LUT"), ("ff", "flip-flop")):
        with pytest.raises(ValueError) as error:
            getattr(result, count)
        assert str(error.value) == f"no {what} count: synthesis stopped once memories and multipliers were mapped"
    assert SynthResult("ecp5", {"LUT4": 7, "TRELLIS_FF": 3}).lut == 7


def bram_cells(result):
    return {cell: n for cell, n in result.cells.items() if cell.startswith(("DP16KD", "RAMB"))}


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_act_ram_16_channels_1024_deep(family, tmp_path):
    result = synth(ActRam(channels=16, depth=1024, family=family), family, tmp_path, inference_only=False)
    # 256 bits x 1024: fifteen 1K x 18 blocks (sixteen 512 x 36 ones would cost more).
    assert result.bram == predicted_blocks(family, 16 * 16, 1024, False) == 15
    assert bram_cells(result) == ({"DP16KD": 15} if family == "ecp5" else {"RAMB18E1": 15})
    # Only the pointers, the two counters, the valid bit and the full flag are flip-flops: data
    # stays in the RAM.
    assert result.ff == 10 + 10 + 11 + 11 + 1 + 1


def test_act_ram_odd_width_and_depth(tmp_path):
    result = synth(ActRam(channels=3, depth=700, family="ecp5"), "ecp5", tmp_path)
    assert result.bram == predicted_blocks("ecp5", 3 * 16, 700, False) == 3


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_lpram_true_dual_port(family, tmp_path):
    # P = 2 banks of 3x3 kernels for one input channel: 18 words per address, 512 addresses.
    result = synth(ParamRam(banks=2, rows=512, words=9, family=family), family, tmp_path,
                   inference_only=family != "ecp5")
    assert result.bram == predicted_blocks(family, 2 * 9 * 18, 512, True) == 18
    assert bram_cells(result) == ({"DP16KD": 18} if family == "ecp5" else {"RAMB36E1": 9})
    if family == "ecp5":
        # Both read registers, their hold and the word writes are the DP16KD's own; the
        # only flip-flops are the host read's lane select, one of 2*9 = 18 words (5 bits).
        # (On xc7 a port has one enable for reads and writes, so Yosys emulates port B's
        # hold through writes with a register per bit.)
        assert result.ff == (2 * 9 - 1).bit_length() == 5


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_lpram_of_one_row_is_registers(family, tmp_path):
    # A first layer's weights: 4 output channels of one 3x3 kernel, one address of 36 words.
    # As distributed RAM it took 2 x 36 x 16 / 4 = 288 DPR16X4 on ECP5 (two read ports).
    result = synth(ParamRam(banks=4, rows=1, words=9, family=family), family, tmp_path,
                   inference_only=family != "ecp5")
    assert result.bram == 0
    assert not {cell for cell in result.cells if cell.startswith(("TRELLIS_DPR", "RAM"))}
    if family == "ecp5":
        # the words (as the mapping prices them), both read registers and the host read's word
        # select (of 36: 6 bits)
        assert result.ff == register_bits(36 * 16, 1) + 2 * 36 * 16 + 6


def test_lpram_wide_rows(tmp_path):
    # 4 input channels x 3x3: 36 words per row, one DP16KD column per word.
    result = synth(ParamRam(banks=1, rows=100, words=36, family="ecp5"), "ecp5", tmp_path)
    assert result.bram == predicted_blocks("ecp5", 36 * 18, 100, True) == 36


def hosted_fc_block():
    """The block node 1 hosts in tiny on three ECP5-85s at 6% of their block RAM: fc's output
    channels 2..9 for node 2, whose FP engine has P = 1 CE of b = 4 tiles over S = 32 inputs:
    G = 8 groups x v = 8 passes, 64 addresses of P*b = 4 words."""
    mapping = map_network(tiny(), parse_cluster("ecp5-85:3"), batch=3, lr=0.05, bram_fraction=0.06,
                          **STOPPING_UPDATE_OPTIONS)
    config = mapping.nodes[1]
    (block,) = hosted_blocks(config)
    assert (block.owner, block.layer, block.out_range) == (2, "fc", (2, 10))
    return block, config


def test_hosted_rows_in_lut_ram(tmp_path):
    # The block cut to its top two rows (not a mapping's: its rows reach past the LUT-RAM
    # depth): G = 2 groups x v = 8 passes = 16 addresses.
    block, config = hosted_fc_block()
    block = replace(block, out_range=(8, 10), words=2 * 32,
                    owner_slice=replace(block.owner_slice, out_range=(8, 10)))
    hosted = HostedRows(block, config.formats, config.training, family="ecp5")
    # Both memories laid out like the owner's LPRAM / LGB: 16 addresses of 4 words (16-bit
    # weights, 48-bit sums). 16 deep is the ECP5 LUT-RAM depth: distributed RAM, no DP16KD.
    assert memories(hosted) == {"bpram.mem": (4 * 16, 16, "distributed"),
                                "bgb.mem": (4 * 48, 16, "distributed")}
    assert bram_blocks(4 * 16, 16, "ecp5", dual_read=True) == bram_blocks(4 * 48, 16, "ecp5") == 0
    result = synth(hosted, "ecp5", tmp_path)
    assert bram_cells(result) == {}
    # TRELLIS_DPR16X4: 16 x 4 bits, one read port each. The BPRAM's two read ports (the FP
    # and EB row streamers) take a copy each, 2 x 64 / 4 = 32; the BGB's one read port
    # 192 / 4 = 48. (So neither memory became flip-flops.)
    assert result.cells.get("TRELLIS_DPR16X4") == 2 * 64 // 4 + 192 // 4 == 80
    # The BGB's update: gsum (48 bits) x lr as three 18 x 17 multipliers; the streamers,
    # the update gate and the sample gate have none.
    assert result.cells.get("MULT18X18D") == result.dsp == 3


def test_hosted_rows_in_block_ram(tmp_path):
    block, config = hosted_fc_block()
    hosted = HostedRows(block, config.formats, config.training, family="ecp5")
    assert memories(hosted) == {"bpram.mem": (4 * 16, 64, "block"), "bgb.mem": (4 * 48, 64, "block")}
    result = synth(hosted, "ecp5", tmp_path)
    # BPRAM: 4 words of 18 bits (word writes), read by both streamers: 1024 x 18 true dual
    # port, 4 blocks. BGB: 192 bits, one read and one write port: 512 x 36, 6 blocks.
    assert result.bram == (predicted_blocks("ecp5", 4 * 18, 64, True)
                           + predicted_blocks("ecp5", 4 * 48, 64, False)) == 4 + 6
    assert bram_cells(result) == {"DP16KD": 10}
    assert result.cells.get("MULT18X18D") == result.dsp == 3


def test_hosted_rows_of_the_overlapped_update_in_block_ram(tmp_path):
    # The same block with the update that does not stop the engines: the BPRAM's two engine
    # copies as above (4 blocks each), the walk's copy read by the walk only (512 x 36: 2
    # blocks), the BGB's two sums (6 blocks each): what mapping/memories.py plans.
    block, config = hosted_fc_block()
    owner = replace(block.owner_slice, overlapped_update=True)
    hosted = HostedRows(replace(block, owner_slice=owner), config.formats, config.training, family="ecp5")
    assert memories(hosted) == {"bpram.copy0.mem": (4 * 16, 64, "block"), "bpram.copy1.mem": (4 * 16, 64, "block"),
                                "bpram.walk.mem": (4 * 16, 64, "block"),
                                "bgb.sums0": (4 * 48, 64, "block"), "bgb.sums1": (4 * 48, 64, "block")}
    result = synth(hosted, "ecp5", tmp_path)
    assert result.bram == memories_cost(hosted_memories(owner, 8), "ecp5").bram_blocks == 2 * 4 + 2 + 2 * 6
    assert bram_cells(result) == {"DP16KD": 22}
    assert result.cells.get("MULT18X18D") == result.dsp == 3


@pytest.mark.parametrize("family, out_channels", [
    ("ecp5", 64),
    pytest.param("xc7", 512, marks=pytest.mark.slow),
])
def test_gradient_buffer_accumulator_and_update_multipliers(family, out_channels, tmp_path):
    gb = GradientBuffer(out_channels=out_channels, in_channels=1, kernel=3, banks=2, shift=24, lr=3000,
                        seed=1, tensor=2, family=family)
    result = synth(gb, family, tmp_path)
    # Sums: one address per group of P = 2 channels, 2 x 9 x 48 = 864 bits, one read and
    # one write port: 512 x 36 (x72) shapes; deeper than LUT RAM (32 > 16, 256 > 64).
    assert result.bram == predicted_blocks(family, 2 * 9 * 48, out_channels // 2, False) == 24
    assert bram_cells(result) == ({"DP16KD": 24} if family == "ecp5" else {"RAMB36E1": 12})
    # gsum (48 bits) x lr: three 18 x 17 multipliers.
    assert result.dsp == 3
    assert result.cells.get("MULT18X18D" if family == "ecp5" else "DSP48E1") == 3


# S = 5 input channels folded into v = 3 passes of b = 2, O = 64 on P = 2 CEs: both
# memories have rows of P*b*K*K = 36 words, G*v = 96 deep.
FOLDED = layer_slice(in_channels=(0, 5), out_channels=(0, 64), kernel=3, ces=2, tiles=2)


def test_folded_lpram(tmp_path):
    lpram = ParamRam.from_slice(FOLDED, family="ecp5")
    assert (lpram.rows, lpram.words) == (32 * 3, 2 * 9)
    result = synth(lpram, "ecp5", tmp_path)
    # 36 words of 18 bits: 36 DP16KD (unfolded, 2 x 45 words 32 deep: 90).
    assert result.bram == predicted_blocks("ecp5", 2 * 18 * 18, 96, True) == 36
    assert bram_cells(result) == {"DP16KD": 36}


@pytest.mark.parametrize("grad_bits, blocks", [(48, 48), (16, 16)])
def test_folded_gradient_buffer(grad_bits, blocks, tmp_path):
    training = Training(batch=2, lr=0.01, lr_constant=700, bias_lr_constant=900)
    lgb = GradientBuffer.from_slice(FOLDED, Formats(grad_bits=grad_bits), training, family="ecp5")
    result = synth(lgb, "ecp5", tmp_path)
    # 36 sums of 48 (16) bits, one read and one write port: 512 x 36 shapes (unfolded, 48-bit:
    # 120 blocks); the mapping plans the narrow sums as Yosys infers them.
    assert result.bram == predicted_blocks("ecp5", 2 * 18 * grad_bits, 96, False) == blocks
    assert bram_cells(result) == {"DP16KD": blocks}
    assert result.cells.get("MULT18X18D") == result.dsp == 3


@pytest.mark.parametrize("family, depth, cells", [
    ("ecp5", 16, {"TRELLIS_DPR16X4": 36 // 4}),  # 16 x 4 LUT RAMs side by side
    ("ecp5", 17, {"DP16KD": 1}),                 # one 512 x 36 block in PDP mode
    ("xc7", 64, {"RAM64M": 36 // 3}),            # 64 x 3 bits (one write, three read ports) each
    ("xc7", 65, {"RAMB18E1": 1}),
])
def test_fifo_memory_style_switches_at_the_lutram_depth(family, depth, cells, tmp_path):
    result = synth(Fifo(36, depth, family=family), family, tmp_path)
    rams = {cell: n for cell, n in result.cells.items()
            if cell.startswith(("DP16KD", "RAMB", "TRELLIS_DPR", "RAM32", "RAM64", "RAM128", "RAM256"))}
    assert rams == cells
    assert result.bram == (depth > LUTRAM_MAX_DEPTH[family])


def test_relayed_streams_in_lut_ram(tmp_path):
    # tiny on three ECP5-85s with 6.5% of the block RAM: node 0 hosts node 2's fc rows 2..7,
    # node 1 relays their three streams through FIFOs of RELAY_DEPTH = 3 beats.
    mapping = map_network(tiny(), parse_cluster("ecp5-85:3"), batch=3, lr=0.05, bram_fraction=0.065,
                          **STOPPING_UPDATE_OPTIONS)
    (block,) = relayed_blocks(mapping.nodes[1])
    assert (block.owner, block.host, block.out_range) == (2, 0, (2, 8))
    relay = Relay(block, family="ecp5")
    # towards the owner (FP, EB) one address of P = 1 row of b = 4 words; back, the address
    # (6 groups x 8 passes: 6 bits) and 4 exact 32-bit products
    assert memories(relay) == {"fp.mem": (64, 3, "distributed"), "eb.mem": (64, 3, "distributed"),
                               "grad.mem": (6 + 4 * 32, 3, "distributed")}
    result = synth(relay, "ecp5", tmp_path)
    assert bram_cells(result) == {} and result.dsp == 0
    # TRELLIS_DPR16X4: 16 x 4 bits per cell, one read port each
    assert result.cells.get("TRELLIS_DPR16X4") == 64 // 4 + 64 // 4 + math.ceil(134 / 4) == 66


@pytest.mark.parametrize("store, word_writes", [(DeepFcWindowStore, True), (DeepFcErrorStore, False)])
def test_deep_fc_corner_turns_map_to_the_block_ram_the_mapping_counts(store, word_writes, tmp_path):
    """Two samples of 1,152 flattened inputs in passes of 6: 384 rows of 96 bits (the window
    store written a word at a time, so 6 x 18-bit columns) in 3 DP16KD, no distributed RAM."""
    fields = dict(channels=32, pixels=36, tiles=6, family="ecp5")
    dut = store(**fields, replays=16) if store is DeepFcWindowStore else store(**fields)
    result = synth(dut, "ecp5", tmp_path)
    assert (result.bram, result.cells.get("TRELLIS_DPR16X4", 0)) == (3, 0)
    assert memories_cost([Memory("passes", 96, 384, word_writes=word_writes)], "ecp5").bram_blocks == 3
