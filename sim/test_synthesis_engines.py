"""What Yosys makes of the EB and PG engines: exactly one hard multiplier per multiplier of the engine.

These counts ground the mapping's DSP estimate of a slice (``LayerSlice.multipliers``:
FP + EB + PG, each ``S * P * K * K``). On xc7 the design is flattened and gets no I/O
buffers (a block, not a chip top): with either left in, Yosys 0.70's ABC9 trips an
internal assertion (as noted in sim/test_synthesis_arith.py and test_synthesis_dataflow.py).
"""

import pytest

from hw.eb_engine import ErrorEngine
from hw.pg_engine import GradientEngine
from hw.synth import synthesize

EXTRA = {"ecp5": "", "xc7": "-flatten -noiopad"}
S, O, K, P = 2, 3, 3, 2  # O not a multiple of P: the last group's dead lanes cost no multiplier


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_error_engine_uses_one_dsp_per_multiplier(family):
    engine = ErrorEngine(in_channels=S, out_channels=O, kernel=K, ces=P, family=family)
    result = synthesize(engine, family, extra=EXTRA[family])
    assert result.dsp == engine.multipliers == S * P * K * K
    assert result.bram == 0
    # Group mux, adder trees and accumulators: about a thousand LUTs. Products built in
    # LUTs would cost a few hundred each, about ten thousand here.
    assert result.lut < 1500


@pytest.mark.parametrize("family", ["ecp5", "xc7"])
def test_gradient_engine_uses_one_dsp_per_multiplier(family):
    engine = GradientEngine(in_channels=S, out_channels=O, kernel=K, ces=P, bias=True, family=family)
    result = synthesize(engine, family, extra=EXTRA[family])
    assert result.dsp == engine.multipliers == S * P * K * K
    assert result.bram == 0
    # No adders at all: the group mux of the errors and the handshake only.
    assert result.lut < 100
