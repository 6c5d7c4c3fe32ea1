"""One real bitstream in CI (issue 14): the board top around the smallest node of the default
mapping on the Versa, through Yosys, nextpnr-ecp5 and ecppack. Place and route takes minutes,
so it runs once and its products are cached (boards/build.py: keyed by the RTLIL, the
constraints, the nextpnr options and the tool versions)."""

import pytest

from boards.build import build, parse_args


@pytest.mark.slow
def test_smallest_versa_node_builds_to_a_bitstream(tmp_path):
    # Node 1 of tiny on four 45F (conv2's first input channel: 27 engine multipliers and a
    # weight update in 9 lanes of 3, 54 in all) at the 100 MHz of mapping/devices.py: nextpnr-ecp5
    # 0.11, seed 1, reaches 103.6 MHz in context.
    result = build(parse_args(["--board", "versa-ecp5-5g", "--node", "1", "--out", str(tmp_path)]),
                   log=lambda *a, **k: None)
    bitstream = (result.folder / "top.bit").read_bytes()
    assert bitstream[:2] == b"\xff\x00" and b"\xff\xff\xbd\xb3" in bitstream[:4096]  # ECP5 preamble
    assert (result.folder / "top.svf").stat().st_size > 100_000
    assert result.met and result.target == 100 and result.fmax >= 100
    assert result.synth.dsp == 54
