"""``python -m mapping.compare``: strategies side by side, refusals, the hybrid planner."""

from pathlib import Path
import subprocess
import sys

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.compare.__main__ import main
from mapping.compare.strategies import run
from mapping.errors import SpecError

FPDEEP_DEFAULT = "ecp5-85:2+ecp5-45:2"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "mapping.compare", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,message", [
    (["--strategies", "fpdeep,foo"],
     "error: unknown strategy 'foo' (known: fpdeep, accpar, hypar, owt, dp, mtrain, hap, hybrid)\n"),
    (["--cluster", "foo:2"],
     "error: cluster 'foo:2': unknown device 'foo' (known: ecp5-25, ecp5-45, ecp5-85, u30, u50lv, ulx3s-85f, vc709, "
     "vcu128, zc706, zcu102, zcu104, lfe5u-85f, lfe5um5g-25f, lfe5um5g-45f, lfe5um5g-85f, xc7vx690t, xc7z015, "
     "xc7z045, xcu30, xcu50, xcvu37p, xczu7ev, xczu9eg)\n"),
    (["--network", "nope", "--strategies", "dp"],
     "error: unknown network 'nope' (zoo: tiny, tiny-grouped, micro, lenet-digits, alexnet-digits, alexnet-towers, alexnet, alexnet-ungrouped, vgg16, vgg19, "
     "resnet18, lenet5, vgg11, vgg13, vgg16-bn, resnet34, resnet50; or a .toml/.json file)\n"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = _cli(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == message


@pytest.mark.parametrize("network", ["tiny", "lenet-digits"])
def test_fpdeep_default_cluster(network, tmp_path, capsys):
    main(["--network", network, "--cluster", FPDEEP_DEFAULT, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    for strategy in ("fpdeep", "accpar", "hypar", "owt", "dp", "hybrid"):
        assert f"\n{strategy} " in out
    assert ("  mtrain: device lfe5um5g-85f has no off-chip DRAM, where MTrain's training IPs keep "
            "activations and losses until the weight update") in out
    assert (tmp_path / "compare.png").stat().st_size > 0


@pytest.mark.parametrize("cluster", ["mtrain-cluster2.toml", "mtrain-cluster3.toml"])
def test_mtrain_cluster_files(cluster, tmp_path, capsys):
    path = Path(__file__).resolve().parents[1] / "mapping" / "examples" / cluster
    main(["--network", "alexnet-ungrouped", "--cluster", str(path), "--strategies", "mtrain,hap,accpar,dp",
          "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert all(f"\n{s} " in out for s in ("mtrain", "hap", "accpar", "dp"))
    assert "not applicable" not in out


def test_mtrain_cluster(tmp_path, capsys):
    main(["--network", "vgg16-bn", "--cluster", "u50lv+u30", "--strategies", "mtrain,hap,accpar,fpdeep",
          "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "\nmtrain: ratio " in out and "\nhap: ratio " in out
    assert "  fpdeep: network vgg16-bn: layer 'bn1_1' is batchnorm" in out


def test_hybrid_beats_every_pure_strategy_on_lenet_digits():
    network, cluster = zoo.get("lenet-digits"), parse_cluster(FPDEEP_DEFAULT)
    rates = {s: run(s, network, cluster, 16).samples_per_s for s in ("fpdeep", "accpar", "hypar", "owt", "dp")}
    hybrid = run("hybrid", network, cluster, 16)
    assert hybrid.partition == {"plan": "accpar on devices 0-1 for layers before 'fc2', fpdeep on 2-3",
                                "conv1": "I", "conv2": "I", "fc1": "II", "fc2": "fpdeep ICP[0:16]@2 ICP[16:32]@3"}
    # paced by the ECP5-85s (at 125 MHz), which train conv1 to fc1 as AccPar; the ECP5-45s
    # (at 100) pipeline fc2 and mostly wait
    assert hybrid.utilisation == pytest.approx([0.851, 0.851, 0.089, 0.095], abs=0.001)
    assert hybrid.samples_per_s == pytest.approx(614_735.9, rel=1e-4)
    assert hybrid.samples_per_s / max(rates.values()) == pytest.approx(1.017, abs=0.001)
    # compute bound: the link cores' bursts leave the ECP5s' 4 Gb/s lanes room
    assert rates["fpdeep"] == pytest.approx(434_027.8, rel=1e-6)


def test_no_plan_for_a_network_nothing_maps():
    with pytest.raises(SpecError) as error:
        run("mtrain", zoo.get("alexnet"), parse_cluster("u50lv+u30"), 16)
    assert str(error.value) == ("network alexnet: grouped convolution 'conv2' is not modelled by "
                                "MTrain's sub-operations")


@pytest.mark.parametrize("paper,tally,plots", [
    ("accpar", "within 20% of the paper: 17 of 18 figures", ["accpar_fig5.png", "accpar_fig6.png",
                                                              "accpar_fig8.png"]),
    ("mtrain", "within 20% of the paper: 8 of 17 figures", ["mtrain_speedup.png"]),
])
def test_paper_commands_end_with_the_tally(paper, tally, plots, tmp_path, capsys):
    main(["--paper", paper, "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == tally
    assert all((tmp_path / name).stat().st_size > 0 for name in plots)
    assert captured.err.startswith(f"{'AccPar' if paper == 'accpar' else 'MTrain'} section")
