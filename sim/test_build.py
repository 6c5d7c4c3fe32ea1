"""Synthesis of the default mapping's nodes agrees with the mapping's estimate (issue: within 10%)."""

import pytest

from hw.build import build, parse_args

TOLERANCE = 0.10
# LUT and FF come from a linear model fitted to eight nodes, these four among them
# (mapping/resources.py: within 18% on each).
LOGIC_TOLERANCE = 0.20


@pytest.mark.slow
@pytest.mark.parametrize("node", [0, 1, 2, 3])
def test_synthesis_matches_the_mapping_estimate(node, tmp_path):
    config, device, result = build(parse_args(["--node", str(node), "--out", str(tmp_path)]),
                                   log=lambda *a, **k: None)
    estimate = config.estimate
    print(f"\nnode {node}: multipliers {result.dsp} (estimate {estimate.dsp}), "
          f"block RAM {result.bram} (estimate {estimate.bram_blocks}), LUT {result.lut} (estimate "
          f"{estimate.lut}), FF {result.ff} (estimate {estimate.ff})")
    assert result.dsp <= device.dsp and result.bram <= device.bram_blocks
    assert abs(result.dsp - estimate.dsp) <= TOLERANCE * estimate.dsp
    assert abs(result.bram - estimate.bram_blocks) <= TOLERANCE * estimate.bram_blocks
    assert abs(result.lut - estimate.lut) <= LOGIC_TOLERANCE * estimate.lut
    assert abs(result.ff - estimate.ff) <= LOGIC_TOLERANCE * estimate.ff


@pytest.mark.slow
@pytest.mark.parametrize("node", [2, 3])
def test_weight_balanced_nodes_use_exactly_the_estimated_multipliers_and_block_ram(node, tmp_path):
    # With 6% of the block RAM node 3 keeps fc rows 1..9 on node 2 (BPRAM and BGB there:
    # the BGB's update adds 3 multipliers); LUT and FF are printed, not asserted: the
    # linear logic model was not fitted to hosts.
    config, _, result = build(parse_args(["--node", str(node), "--bram-fraction", "0.06",
                                          "--out", str(tmp_path)]), log=lambda *a, **k: None)
    assert [(b.owner, b.host, b.out_range) for b in config.hosted] == ([(3, 2, (1, 10))] if node == 2 else [])
    estimate = config.estimate
    print(f"\nbalanced node {node}: LUT {result.lut} (estimate {estimate.lut}), FF {result.ff} "
          f"(estimate {estimate.ff})")
    assert (result.dsp, result.bram) == (estimate.dsp, estimate.bram_blocks) == \
        {2: (9, 5), 3: (12, 2)}[node]


@pytest.mark.slow
def test_relaying_node_uses_exactly_the_estimated_multipliers_and_block_ram(tmp_path):
    # tiny on three ECP5-85s with 5% of the block RAM: node 0 hosts node 2's fc rows 8..9 and
    # node 1 relays their streams (three FIFOs in distributed RAM, no multiplier)
    config, _, result = build(parse_args(["--node", "1", "--cluster", "ecp5-85:3", "--bram-fraction", "0.05",
                                          "--out", str(tmp_path)]), log=lambda *a, **k: None)
    assert [(b.owner, b.host, b.out_range) for b in config.relays] == [(2, 0, (8, 10))]
    estimate = config.estimate
    print(f"\nrelaying node 1: multipliers {result.dsp}, block RAM {result.bram}, LUT {result.lut} "
          f"(estimate {estimate.lut}), FF {result.ff} (estimate {estimate.ff})")
    assert (result.dsp, result.bram) == (estimate.dsp, estimate.bram_blocks)
