"""Yosys maps the dataflow blocks' memories as ``mapping.resources.ram_style`` says (so the
mapping's BRAM estimates hold): block RAM past LUTRAM_MAX_DEPTH words, LUT RAM up to it."""

import pytest

from hw.memory.line_buffer import LineBuffer
from hw.memory.pab import PartialActivationBuffer
from hw.node.sfu import SFU, OverlappingPoolSFU
from hw.synth import synthesize
from mapping.nodeconfig import Pool

# A 3x3 line buffer over 32 channels x 65 pixels: K-1 = 2 row memories, each 65 deep (past
# the LUT RAM depth of both families) and 32 * 16 = 512 bits wide. Both families build it
# from 512 x 36 pieces (DP16KD in PDP mode, RAMB18E1 in SDP mode): ceil(512 / 36) = 15
# blocks per row.
LB = dict(channels=32, height=64, width=65, kernel=3, pad_before=1)
BLOCKS_PER_ROW = -(-32 * 16 // 36)


def synth(design, family, workdir):
    return synthesize(design, family, workdir=workdir, inference_only=True)


def test_line_buffer_rows_map_to_dp16kd_on_ecp5(tmp_path):
    result = synth(LineBuffer(**LB, family="ecp5"), "ecp5", tmp_path)
    assert result.cells.get("DP16KD") == result.bram == 2 * BLOCKS_PER_ROW


@pytest.mark.slow  # synth_xilinx reads its cell library for about 5 s
def test_line_buffer_rows_map_to_ramb_on_xc7(tmp_path):
    result = synth(LineBuffer(**LB, family="xc7"), "xc7", tmp_path)
    assert result.cells.get("RAMB18E1") == result.bram == 2 * BLOCKS_PER_ROW  # RAMB18 units
    assert not any(cell.startswith(("RAM32", "RAM64", "RAM128")) for cell in result.cells)


def test_pab_fifo_maps_to_dp16kd_on_ecp5(tmp_path):
    # 8 lanes x 48 bits = 384 bits x 512 entries: 512 x 36 pieces.
    result = synth(PartialActivationBuffer(lanes=8, depth=512, family="ecp5"), "ecp5", tmp_path)
    assert result.cells.get("DP16KD") == -(-8 * 48 // 36)


def test_sfu_memories_map_to_dp16kd_on_ecp5(tmp_path):
    # 16 channels, 32 x 32 conv output, 2 x 2 pool (16 x 16 pooled), two samples in flight:
    # mask FIFO 16 x (2 code bits + 1 ReLU bit) = 48 bits x 512 deep: 2 blocks (512 x 36);
    # forward band 16 x (16 + 2) = 288 bits and backward replay 16 x (16 + 3) = 304 bits,
    # both 16 deep: LUT RAM, 288 / 4 + 304 / 4 TRELLIS_DPR16X4; the rounder's output buffer,
    # 4 lanes x 16 bits, 11 deep: 64 / 4 more.
    sfu = SFU(out_channels=16, height=32, width=32, lanes=4, position=1, pool=Pool(2, 2),
              samples_in_flight=2, family="ecp5")
    result = synth(sfu, "ecp5", tmp_path)
    assert result.cells.get("DP16KD") == result.bram == 2
    assert result.cells.get("TRELLIS_DPR16X4") == 288 // 4 + 304 // 4 + 64 // 4
    # One pooled column more: the band and replay rows (17 deep) move to block RAM.
    wider = SFU(out_channels=16, height=32, width=34, lanes=4, position=1, pool=Pool(2, 2),
                samples_in_flight=2, family="ecp5")
    result = synth(wider, "ecp5", tmp_path / "wider")
    # Mask FIFO 48 bits x 2 * 16 * 17 = 544: three 1024 x 18 blocks; band 288 / 36 = 8 and
    # replay ceil(304 / 36) = 9 blocks of 512 x 36; the rounder's buffer as before.
    assert result.cells.get("DP16KD") == result.bram == 3 + 8 + 9
    assert result.cells.get("TRELLIS_DPR16X4") == 64 // 4


def test_overlapping_pool_rows_map_to_dp16kd_on_ecp5(tmp_path):
    # 4 channels, 8 x 35 conv output, 3x3 windows at stride 2 (3 x 17 pooled), no ReLU, two
    # samples in flight: mask FIFO 4 x 4 code bits = 16 bits x 102: one 1024 x 18 block; two band
    # rows 4 x (16 + 4) = 80 bits and two replay rows as wide, 17 deep: 3 blocks of 512 x 36
    # each; the rounder's output buffer in LUT RAM as in the SFU above. No multiplier: window
    # positions are counted, not multiplied out (ky * 3 took a MULT18X18D per product).
    sfu = OverlappingPoolSFU(out_channels=4, height=8, width=35, lanes=4, position=1, pool=Pool(3, 2),
                             relu=False, samples_in_flight=2, family="ecp5")
    result = synth(sfu, "ecp5", tmp_path)
    assert result.cells.get("DP16KD") == result.bram == 1 + 4 * 3
    assert result.cells.get("TRELLIS_DPR16X4") == 64 // 4 and result.dsp == 0
