"""Each node of the default mapping in context on its board (issue 14): Fmax of the node clock
against the clock mapping/devices.py gives its device, and the worst path.

The default chain (``tiny`` on ecp5-85:2+ecp5-45:2): nodes 0 and 1 on the ECP5-5G Evaluation
Board (LFE5UM5G-85F), nodes 2 and 3 on the Versa (LFE5UM5G-45F), each with the board top
(PLL, reset, host interface, LEDs, and the link cores and PHYs towards the neighbouring boards).
Every node meets its clock (docs/boards.md, "Measured"); a node that does not fails. nextpnr
takes 15 to 35 minutes per node alone (the 85F nodes the longest); builds are cached, so a
second run only reads the reports:
``python -m pytest tests/bench_board_fmax.py -m bench -s -p no:xdist``.
"""

import pytest

from boards.boards import BOARDS
from boards.build import build, parse_args
from sim.chain import CHAIN

NODE_DEVICES = ("lfe5um5g-85f", "lfe5um5g-85f", "lfe5um5g-45f", "lfe5um5g-45f")  # CHAIN's nodes


@pytest.mark.bench
@pytest.mark.parametrize("node", range(len(NODE_DEVICES)))
def test_node_fmax_in_context(node, tmp_path):
    board = next(b.name for b in BOARDS.values() if b.device == NODE_DEVICES[node])
    result = build(parse_args(["--board", board, "--node", str(node), "--cluster", CHAIN, "--out", str(tmp_path)]),
                   log=lambda *a, **k: None)
    print(f"\nnode {node} on {board}: {result.synth.dsp} multipliers, {result.synth.lut} LUT4; "
          f"{result.fmax:.1f} MHz reached, {result.target:g} MHz needed "
          f"({'met' if result.met else 'NOT met'}), {result.seconds:.0f} s; worst path\n  "
          + "\n  ".join(result.worst.lines()))
    assert result.met, f"node {node}: {result.fmax:.1f} MHz, {result.target:g} MHz needed"
