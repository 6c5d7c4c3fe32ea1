"""One real bitstream in CI (issue 14): the board top around the smallest real node on the
Versa, through Yosys, nextpnr-ecp5 and ecppack. Place and route takes minutes, so it runs once,
on node 0 of the zoo's `micro` network (the tiny network's nodes take twice as long: their
figures are in docs/boards.md and tests/bench_board_fmax.py), and its products are cached
(boards/build.py: keyed by the RTLIL, the constraints, the nextpnr options and the tool
versions)."""

import pytest

from boards.build import build, parse_args


@pytest.mark.slow
def test_smallest_versa_node_builds_to_a_bitstream(tmp_path):
    # micro on two 45F, node 0: conv1's first output channel (FP and PG, 9 multipliers each; a
    # first layer has no EB) with its weight update in 5 lanes, 36 multipliers in all, at the 100
    # MHz of mapping/devices.py. nextpnr-ecp5 0.11, seed 1: router1 reaches 117.7 MHz in context
    # but spent 95 s routing one version of this node and 682 s the next; router2 with
    # timing-driven rip-up reaches 105.1 MHz in 92 s (about 6 minutes of one CPU in all).
    result = build(parse_args(["--board", "versa-ecp5-5g", "--network", "micro", "--cluster", "lfe5um5g-45f:2",
                               "--node", "0", "--router", "router2", "--out", str(tmp_path)]),
                   log=lambda *a, **k: None)
    bitstream = (result.folder / "top.bit").read_bytes()
    assert bitstream[:2] == b"\xff\x00" and b"\xff\xff\xbd\xb3" in bitstream[:4096]  # ECP5 preamble
    assert (result.folder / "top.svf").stat().st_size > 100_000
    assert result.met and result.target == 100 and result.fmax >= 100
    assert result.synth.dsp == 36
