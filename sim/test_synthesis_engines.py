"""What Yosys makes of the EB and PG engines, and of all three folded: exactly one hard multiplier
per multiplier of the engine.

These counts ground the mapping's DSP estimate of a slice (``LayerSlice.multipliers``:
FP + EB + PG, each ``S * P * K * K``). On xc7 the design is flattened and gets no I/O
buffers (a block, not a chip top): with either left in, Yosys 0.70's ABC9 trips an
internal assertion (as noted in sim/test_synthesis_arith.py and test_synthesis_dataflow.py).
"""

import pytest

from hw.engines.eb_engine import EBEngine
from hw.engines.fp_engine import FPEngine
from hw.engines.pg_engine import PGEngine
from hw.synth import synthesize

EXTRA = {"ecp5": "", "xc7": "-flatten -noiopad"}
S, O, K, P = 2, 3, 3, 2  # O not a multiple of P: the last group's dead lanes cost no multiplier


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_error_engine_uses_one_dsp_per_multiplier(family):
    engine = EBEngine(in_channels=S, out_channels=O, kernel=K, ces=P, family=family)
    result = synthesize(engine, family, extra=EXTRA[family])
    assert result.dsp == engine.multipliers == S * P * K * K
    assert result.bram == 0
    # Group mux, adder trees and accumulators: about 1,700 LUT4 sites on ECP5 (390 LUT4 and
    # 636 carry cells of two). Products built in LUTs would cost a few hundred each, about
    # ten thousand here.
    assert result.lut < 2000


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_gradient_engine_uses_one_dsp_per_multiplier(family):
    engine = PGEngine(in_channels=S, out_channels=O, kernel=K, ces=P, bias=True, family=family)
    result = synthesize(engine, family, extra=EXTRA[family])
    assert result.dsp == engine.multipliers == S * P * K * K
    assert result.bram == 0
    # No adders at all: the group mux of the errors and the handshake only.
    assert result.lut < 100


FOLDED = {  # S = 5 input channels on b = 2 tiles: 3 passes, the last one half padding
    "fp": lambda: FPEngine(channels=5, kernel=K, ces=P, out_channels=O, tiles=2, family="ecp5"),
    "eb": lambda: EBEngine(in_channels=5, out_channels=O, kernel=K, ces=P, tiles=2, family="ecp5"),
    "pg": lambda: PGEngine(in_channels=5, out_channels=O, kernel=K, ces=P, tiles=2, bias=True,
                                 family="ecp5"),
}


@pytest.mark.parametrize("name", FOLDED)
def test_folded_engine_uses_p_b_k_k_dsps_on_ecp5(name):
    """Folding shrinks the array: 2*2*9 = 36 MULT18X18D, not the 2*5*9 = 90 of one tile per channel."""
    engine = FOLDED[name]()
    result = synthesize(engine, "ecp5")
    assert result.dsp == engine.multipliers == P * 2 * K * K == 36
    assert result.bram == 0
    # The 3:1 pass select of FP and PG costs about two LUT4 per selected window bit
    # (b*K*K*16 = 288), EB's group mux about 400, and the adder trees' carry cells about
    # 1,200 LUT4 sites; products built in LUTs would cost a few hundred each, over ten
    # thousand here.
    assert result.lut < 2500
