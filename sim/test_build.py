"""Synthesis of the default mapping's nodes agrees with the mapping's estimate: exactly for multipliers
and block RAM, within LOGIC_TOLERANCE for LUTs and FFs.

A whole node takes Yosys one to four minutes, so CI synthesizes the smallest real case (node 3);
the other nodes, and the weight-balanced ones (whose hosted rows and relays
sim/test_synthesis_memory.py checks in CI block by block), are the same check on larger
netlists and run under the bench marker:
``python -m pytest sim/test_build.py -m "slow or bench" -s``.
"""

import pytest

from hw.build import build, parse_args

# LUT and FF come from a linear model fitted to eight nodes, these four among them
# (mapping/resources.py: within 18% on each).
LOGIC_TOLERANCE = 0.20


@pytest.mark.slow
@pytest.mark.parametrize("node", [pytest.param(0, marks=pytest.mark.bench), pytest.param(1, marks=pytest.mark.bench),
                                  pytest.param(2, marks=pytest.mark.bench), 3])
def test_synthesis_matches_the_mapping_estimate(node, tmp_path):
    config, device, result = build(parse_args(["--node", str(node), "--out", str(tmp_path)]),
                                   log=lambda *a, **k: None)
    estimate = config.estimate
    print(f"\nnode {node}: multipliers {result.dsp} (estimate {estimate.dsp}), "
          f"block RAM {result.bram} (estimate {estimate.bram_blocks}), LUT {result.lut} (estimate "
          f"{estimate.lut}), FF {result.ff} (estimate {estimate.ff})")
    assert result.dsp <= device.dsp and result.bram <= device.bram_blocks
    assert (result.dsp, result.bram) == (estimate.dsp, estimate.bram_blocks)
    assert abs(result.lut - estimate.lut) <= LOGIC_TOLERANCE * estimate.lut
    assert abs(result.ff - estimate.ff) <= LOGIC_TOLERANCE * estimate.ff


@pytest.mark.slow
@pytest.mark.bench
@pytest.mark.parametrize("node", [0, 2, 3])
def test_weight_balanced_nodes_use_exactly_the_estimated_multipliers_and_block_ram(node, tmp_path):
    # With 6.5% of the block RAM node 3 keeps fc rows 2..5 on node 0, 6..7 on node 1 and 8..9
    # on node 2 (BPRAM and BGB there: each BGB's update adds 3 multipliers); node 2 also
    # relays the streams of nodes 0 and 1 (FIFOs in distributed RAM). LUT and FF are printed,
    # not asserted: the linear logic model was not fitted to hosts.
    config, _, result = build(parse_args(["--node", str(node), "--bram-fraction", "0.065",
                                          "--out", str(tmp_path)]), log=lambda *a, **k: None)
    assert [(b.owner, b.host, b.out_range) for b in config.hosted] == \
        {0: [(3, 0, (2, 6))], 2: [(3, 2, (8, 10))], 3: []}[node]
    assert [b.host for b in config.relays] == {0: [], 2: [1, 0], 3: []}[node]
    estimate = config.estimate
    print(f"\nbalanced node {node}: multipliers {result.dsp}, block RAM {result.bram}, LUT {result.lut} "
          f"(estimate {estimate.lut}), FF {result.ff} (estimate {estimate.ff})")
    assert (result.dsp, result.bram) == (estimate.dsp, estimate.bram_blocks) == \
        {0: (138, 13), 2: (66, 5), 3: (27, 0)}[node]
