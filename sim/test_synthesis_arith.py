"""What Yosys makes of the arithmetic blocks: hard multipliers where there are multiplies, none elsewhere.

These counts ground the mapping's resource estimates (one DSP block per multiplier
of an engine). On xc7 the design is flattened first: with Amaranth's hierarchy kept,
synth_xilinx (Yosys 0.70) trips an assertion in ABC9's reintegration step.
"""

import pytest

from hw.arith.mult import Multiplier
from hw.arith.rounding import StochasticRounder
from hw.engines.fp_engine import FPEngine
from hw.synth import synthesize

EXTRA = {"ecp5": "", "xc7": "-flatten"}


def synth(design, family):
    return synthesize(design, family, extra=EXTRA[family])


def test_ecp5_multiplier_is_one_mult18x18d_with_its_own_registers():
    result = synth(Multiplier(16, 16, family="ecp5"), "ecp5")
    assert result.cells == {"MULT18X18D": 1}  # no fabric registers, no LUT multiplier


def test_inferred_ecp5_multiply_leaves_its_registers_in_the_fabric():
    """Why hw.arith.mult instantiates the primitive: Yosys does not pack registers into MULT18X18D."""
    result = synth(Multiplier(16, 16), "ecp5")
    assert result.dsp == 1 and result.lut == 0
    assert result.ff == 16 + 16 + 32


def test_xc7_multiplier_is_one_dsp48e1_with_its_registers():
    result = synth(Multiplier(16, 16, family="xc7"), "xc7")
    assert result.dsp == 1 and result.ff == 0 and result.lut == 0


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_conv_engine_uses_one_dsp_per_multiplier(family):
    engine = FPEngine(channels=2, kernel=3, ces=2, out_channels=4, family=family)
    result = synth(engine, family)
    assert result.dsp == engine.multipliers == 36
    # The adder tree is carry chains (about 1,200 LUT4 sites on ECP5, carry cells counted
    # as two); a LUT multiplier would need hundreds of LUTs per product.
    assert result.lut < 1500
    # The output buffer (8 beats of two 48-bit sums) is distributed RAM: on ECP5 24 DPR16X4
    # of 4 bits x 16 words.
    assert result.bram == 0
    if family == "ecp5":
        assert result.cells["TRELLIS_DPR16X4"] == 2 * 48 // 4


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_rounder_uses_adders_only(family):
    result = synth(StochasticRounder(lanes=1, shift=12, seed=0x2545F491, tensor=3), family)
    assert result.dsp == 0
    assert result.ff > 0
