"""python -m hw.build: refusals and the RTL it writes (synthesis is in sim/test_build.py)."""

import subprocess
import sys

import pytest

from hw.build import build, parse_args


def test_node_outside_the_mapping_is_refused_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hw.build", "--node", "4", "--out", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: node 4 is not in the mapping: it has nodes 0..3"


def test_unknown_network_is_refused_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hw.build", "--node", "0", "--network", "vgg17",
                             "--out", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown network 'vgg17'") and "Traceback" not in result.stderr


def test_no_synth_writes_rtlil_verilog_and_the_mapping(tmp_path):
    lines = []
    config, device, result = build(parse_args(["--node", "3", "--out", str(tmp_path), "--no-synth"]),
                                   log=lambda *a, **k: lines.append(a[0]))
    out = tmp_path / "node3"
    assert result is None and config.index == 3 and device.name == "lfe5um5g-45f"
    assert "module top" in (out / "top.v").read_text()
    assert "module \\top" in (out / "top.il").read_text()
    assert (out / "mapping.json").exists()
    assert lines[0].startswith("node 3 of 4 on lfe5um5g-45f (ecp5): fc[icp in 0:32 out 0:10]")


def _build_refusal(tmp_path, map_args, node):
    """stderr of hw.build --no-synth on node ``node`` of the mapping ``python -m mapping`` writes
    with ``map_args``, which must refuse it with status 2."""
    mapped = subprocess.run([sys.executable, "-m", "mapping", *map_args, "--out", str(tmp_path / "map")],
                            capture_output=True, text=True)
    assert mapped.returncode == 0, mapped.stderr
    result = subprocess.run([sys.executable, "-m", "hw.build", "--mapping", str(tmp_path / "map" / "mapping.json"),
                             "--node", str(node), "--out", str(tmp_path), "--no-synth"], capture_output=True, text=True)
    assert result.returncode == 2
    return result.stderr.strip()


def test_a_mapping_with_fc_weights_in_dram_is_refused_in_one_line(tmp_path):
    assert _build_refusal(tmp_path, ["--network", "tiny", "--cluster", "vc709:2"], 1) == (
        "error: layer 'fc': the slice keeps weights in DRAM, which the generator does not build yet; "
        "map with mapper.GENERATOR_OPTIONS (python -m mapping --for-hardware)")


def test_a_mapping_with_conv_rows_on_another_node_is_refused_in_one_line(tmp_path):
    # the unrestricted balancer keeps conv2 rows of node 1 on node 0
    refusal = _build_refusal(tmp_path, ["--network", "lenet-digits", "--cluster", "ecp5-45:4", "--bram-fraction",
                                        "0.16", "--batch", "3"], 1)
    assert refusal == (
        "error: layer 'conv2' on node 1 keeps weight rows on node 0: the generator streams only fully "
        "connected rows from other nodes (a convolution row would need a weight-stationary engine); map "
        "with mapper.GENERATOR_OPTIONS (python -m mapping --for-hardware)")


def test_place_and_route_options_follow_the_device():
    from hw.synth import nextpnr_ecp5_options

    assert nextpnr_ecp5_options("lfe5um5g-45f") == ["--um5g-45k", "--package", "CABGA381", "--speed", "8"]
    with pytest.raises(ValueError) as error:
        nextpnr_ecp5_options("xc7vx690t")
    assert str(error.value) == ("no nextpnr-ecp5 device for 'xc7vx690t' "
                                "(known: lfe5um5g-25f, lfe5um5g-45f, lfe5um5g-85f)")
