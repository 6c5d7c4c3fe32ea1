import json
import subprocess
import sys

import pytest

from mapping import memories, plots, report, zoo
from mapping.__main__ import main
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import map_network
from mapping.nodeconfig import Mapping

from .cli_refusal import BAD_OPTIONS, PADDED_POOL_REFUSAL, bad_network_files, refusal

def test_cli_writes_table_json_and_plots(tmp_path, capsys):
    main(["--network", "tiny", "--cluster", "ecp5-85:4", "--out", str(tmp_path), "--sizes", "2:4"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    # link bound on the ECP5s' lanes with exact partial sums: conv2's cross as 32-bit ones
    assert lines[0] == ("partial sums: 32-bit between slices (exact 48-bit ones leave this chain link bound; "
                        "--psum-bits 48 keeps them; docs/numerics.md)")
    assert lines[1].startswith("tiny on ecp5-85:4:")
    assert "conv2 ICP[3:4], fc ICP[0:32]" in out and "conv1 OCP[0:4]" in out
    mapping = Mapping.from_json((tmp_path / "mapping.json").read_text())
    assert len(mapping.nodes) == 4 and mapping.network == "tiny"
    points = json.loads((tmp_path / "scaling.json").read_text())
    assert [p["devices"] for p in points] == [2, 3, 4]
    # each size with the widths the tools choose for it: from 3 devices the links are short for
    # exact partial sums
    assert [(p["grad_bits"], p["psum_bits"]) for p in points] == [(48, 48), (48, 32), (48, 32)]
    assert "widths by size: 2 devices 48-bit gradient sums, 48-bit partial sums; 3-4 devices 48-bit gradient " \
           "sums, 32-bit partial sums" in lines
    for name in ("utilisation.png", "scaling.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_vgg16_maps_on_15_vc709_with_its_activations_in_dram(tmp_path, capsys):
    """Refused for block RAM with every activation on chip (node 2 needed 2862 blocks of its
    2646); with them in the nodes' DRAM (--act-storage auto) it maps, each DRAM well within
    the VC709's 29.9 GB/s but the two fully connected nodes', which the FC weights fill."""
    main(["--network", "vgg16", "--cluster", "vc709:15@150", "--grad-bits", "16", "--out", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("vgg16 on vc709:15@150: 166.1 samples/s (compute bound), 1026 GOPS per device, ")
    assert lines[1].split() == ["node", "device", "DSP%", "BRAM%", "link", "Gb/s", "idle%", "acts", "DRAM", "GB/s",
                                "DRAM", "MB", "slices"]
    nodes = [line.split() for line in lines[2:17]]
    assert [row[6] for row in nodes] == ["DRAM"] * 15
    dram_gbs = [float(row[7]) for row in nodes]
    assert max(dram_gbs[:12]) == 1.37 and dram_gbs[13:] == [29.74, 29.74]  # of 29.86
    assert all(float(row[8]) < 100 for row in nodes)  # MB of the 8 GB


def test_cli_maps_with_the_loss_given(tmp_path, capsys):
    main(["--network", "tiny", "--cluster", "ecp5-85:2", "--loss", "ce", "--for-hardware", "--out", str(tmp_path)])
    mapping = Mapping.from_json((tmp_path / "mapping.json").read_text())
    assert {node.formats.loss for node in mapping.nodes} == {"ce"}


def test_cli_sweep_reports_the_sizes_it_refused(tmp_path, capsys):
    main(["--network", "vgg16", "--cluster", "vc709:50@150", "--out", str(tmp_path), "--sizes", "10:50:40"])
    lines = capsys.readouterr().out.splitlines()
    # refused with the widths the tools would choose for 10 devices, each tried
    assert any(line.startswith("10 devices: refused: network 'vgg16' on cluster 'xc7vx690t:10@150': node ")
               and line.endswith("(with 16-bit gradient sums, tried as exact 48-bit ones were refused too)")
               for line in lines)
    assert "only 50 devices map in the sweep: no scaling to judge" in lines
    points = json.loads((tmp_path / "scaling.json").read_text())
    assert [("error" in p) for p in points] == [True, False]


def test_hardware_mappings_count_the_weight_update_walks(tmp_path, capsys):
    # Stopping the engines for each update's walk, node 3's fc walks 95 cycles per sample at
    # mini-batch 1, so the chain runs at 200 MHz / (80 + 95) below its compute (and link)
    # bound; the update that does not stop them walks beside them, 95 + 6 cycles a sample
    # (docs/node_dataflow.md), and --update auto (the default) takes it: 200 MHz / 101. A
    # mapping of the paper's model does not print the figure.
    main(["--network", "tiny", "--cluster", "vc709:4", "--for-hardware", "--update", "stop",
          "--out", str(tmp_path / "stop")])
    assert capsys.readouterr().out.splitlines()[0].startswith(
        "tiny on vc709:4: 2500000.0 samples/s (compute bound; 1142857.1 with the weight update's walks "
        "at mini-batch 1), ")
    main(["--network", "tiny", "--cluster", "vc709:4", "--for-hardware", "--out", str(tmp_path / "hw")])
    assert capsys.readouterr().out.splitlines()[0].startswith(
        "tiny on vc709:4: 2500000.0 samples/s (compute bound; 1980198.0 with the weight update's walks "
        "(overlapped) at mini-batch 1), ")
    main(["--network", "tiny", "--cluster", "vc709:4", "--out", str(tmp_path / "model")])
    assert "walks" not in capsys.readouterr().out


def test_cli_link_override_changes_the_bound(tmp_path, capsys):
    main(["--network", "tiny", "--cluster", "ecp5-85:4", "--out", str(tmp_path), "--link-gbps", "100"])
    assert "(compute bound)" in capsys.readouterr().out


def test_python_m_mapping_refuses_in_one_line_with_status_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mapping", "--network", "nosuchnet",
                             "--out", str(tmp_path / "m")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == ("error: unknown network 'nosuchnet' (zoo: tiny, tiny-grouped, micro, lenet-digits, alexnet-digits, alexnet-towers, alexnet, "
                             "alexnet-ungrouped, vgg16, vgg19, resnet18, lenet5, vgg11, vgg13, vgg16-bn, "
                             "resnet34, resnet50; or a .toml/.json file)\n")
    assert not (tmp_path / "m").exists()  # no empty output folder left behind


@pytest.mark.parametrize("args, message", [
    (["--network", "tiny", "--cluster", "ecp5-85:4", "--sizes", "5:3"],
     "--sizes must be FIRST:LAST or FIRST:LAST:STEP with 1 <= FIRST <= LAST, got '5:3'"),
    (["--network", "tiny", "--cluster", "ecp5-85:4", "--max-multipliers", "20"],
     "layer 'conv2' needs 27 multipliers for one 3x3 tile in each of its 3 engines (FP, EB, PG), but the largest "
     "device of the cluster, lfe5um5g-85f, offers 20"),
])
def test_mappings_that_cannot_be_made_are_refused_in_one_line(tmp_path, capsys, args, message):
    assert refusal(main, [*args, "--out", str(tmp_path / "m")], capsys) == f"error: {message}"
    assert not (tmp_path / "m").exists()


def test_a_network_too_large_for_the_cluster_is_refused_in_one_line(tmp_path, capsys):
    assert refusal(main, ["--network", "vgg16", "--cluster", "vc709:1", "--out", str(tmp_path)], capsys).endswith(
        "its conv weights alone (235.4 Mbit) exceed it (largest layer: 'conv4_2', 2,359,296 weights) "
        "(with activations in DRAM, tried as on-chip ones were refused too) "
        "(with 16-bit gradient sums, tried as exact 48-bit ones were refused too)")


@pytest.mark.parametrize("args, message", [
    *BAD_OPTIONS,
    (["--link-gbps", "0"], "argument --link-gbps: must be a positive finite number, got '0'"),
    (["--max-multipliers", "0"], "argument --max-multipliers: must be a positive integer, got '0'"),
    (["--grad-bits", "20"], "argument --grad-bits: invalid choice: 20 (choose from 16, 24, 32, 48)"),
])
def test_bad_options_are_refused_in_one_line(capsys, args, message):
    assert refusal(main, args, capsys) == f"error: {message} (see python -m mapping --help)"


def test_bad_network_files_and_output_folders_are_refused_in_one_line(tmp_path, capsys):
    latin, padded = bad_network_files(tmp_path)
    out = tmp_path / "new" / "m"
    cases = [(["--network", str(latin)], f"network file {latin}: not UTF-8 text (byte 9 is 0xe9)"),
             (["--network", str(padded), "--cluster", "ecp5-85:2", "--for-hardware"],
              f"network '{padded}' on cluster 'ecp5-85:2': {PADDED_POOL_REFUSAL}"),
             (["--out", str(latin)], f"--out {latin}: it is a file, not a folder"),
             (["--out", str(latin / "m")], f"--out {latin / 'm'}: {latin} is a file, not a folder")]
    for args, message in cases:
        assert refusal(main, ["--out", str(out), *args], capsys) == f"error: {message}"
        assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("network, headline, chunked", [
    ("alexnet-ungrouped", "857.3 samples/s (compute bound; 828.8 with the weight update's walks at mini-batch 1), "
                          "377 GOPS per device", {"conv2": 163}),
    ("vgg16", "83.0 samples/s (compute bound; 58.8 with the weight update's walks at mini-batch 1), 513 GOPS per "
              "device", {f"conv{stage}_{n}": 455 for stage in (4, 5) for n in (1, 2, 3)})])
def test_the_paper_networks_map_for_hardware(tmp_path, capsys, network, headline, chunked):
    """As the generator builds them: AlexNet's 3x3 stride-2 max-pools (hw/node/sfu.OverlappingPoolSFU),
    fully connected weights streamed from DRAM (hw/memory/dram_weights.py), fc6 taking the
    last map's pixels and fc6 and fc7 handing their 4,096 outputs on as a 1,024 x 1 x 4 map's
    (hw/memory/fc_store.py), and the EB windows no word holds (AlexNet's conv2: 256 x 5 x 5
    taps, VGG's conv4 and conv5: 512 x 3 x 3) in chunks of output channels (hw/memory/eb_windows.py)."""
    main(["--network", network, "--cluster", "vc709:15@150", "--for-hardware", "--out", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{network} on vc709:15@150: {headline}, ") for line in lines[:2])
    mapping = Mapping.from_json((tmp_path / "mapping.json").read_text())
    slices = [s for n in mapping.nodes for s in n.slices]
    assert {s.layer: s.eb_chunk for s in slices if s.eb_chunk} == chunked
    assert {s.layer: s.out_map for s in slices if s.out_map} == {"fc6": (1024, 1, 4), "fc7": (1024, 1, 4)}
    assert all(memories.generator_problem(s, n.formats.grad_bits) is None for n in mapping.nodes for s in n.slices)


def test_grouped_alexnet_maps_for_hardware(tmp_path, capsys):
    """The paper's two-tower AlexNet maps on 15 VC709s (docs/paper_comparison.md), and as the
    generator builds it: fc6's and fc7's 4,096 outputs travel as the pixels of a 1,024 x 1 x 4
    map (LayerSlice.out_map), which fc7 and fc8 take as a map they flatten."""
    main(["--network", "alexnet", "--cluster", "vc709:15@150", "--out", str(tmp_path / "model")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("alexnet on vc709:15@150: 1388.9 samples/s (compute bound), 383 GOPS per device, ")
    assert "conv2 ICP[9:48], conv2 ICP[48:72]" in lines[3]  # node 1: a slice of each group
    mapping = Mapping.from_json((tmp_path / "model" / "mapping.json").read_text())
    assert all(n.estimate.bram_blocks <= b for n, b in zip(mapping.nodes, mapping.summary["usable_blocks"]))
    main(["--network", "alexnet", "--cluster", "vc709:15@150", "--for-hardware", "--out", str(tmp_path / "hw")])
    assert capsys.readouterr().out.startswith(
        "alexnet on vc709:15@150: 1232.7 samples/s (compute bound; 1128.5 with the weight update's walks at "
        "mini-batch 1), 340 GOPS per device, ")
    mapping = Mapping.from_json((tmp_path / "hw" / "mapping.json").read_text())
    maps = {(s.layer, s.flatten_from, s.out_map) for n in mapping.nodes for s in n.slices if s.kind == "fc"}
    assert maps == {("fc6", (256, 6, 6), (1024, 1, 4)), ("fc7", (1024, 1, 4), (1024, 1, 4)),
                    ("fc8", (1024, 1, 4), None)}


def test_ctrl_c_prints_interrupted(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("mapping.mapper.map_with_default_gradient_sums", interrupted)
    assert refusal(main, ["--network", "tiny", "--out", str(tmp_path / "m")], capsys, status=130) == "interrupted"
    assert not (tmp_path / "m").exists()


def test_the_rows_weight_balancing_moves_are_listed(tmp_path, capsys):
    main(["--network", "lenet-digits", "--cluster", "ecp5-45:4", "--bram-fraction", "0.16", "--batch", "3",
          "--out", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("weight balancing (--bram-fraction 0.16: each node may use 16% of its block RAM):")
    # conv2 has 6 inputs and 5x5 kernels: 12 rows of 150 weights
    assert lines[at + 1:at + 3] == ["  node 1's layer 'conv2': output channels 4..15 (432 weights) kept on node 0",
                                    f"wrote {tmp_path / 'mapping.json'}, {tmp_path / 'utilisation.png'}"]


def test_help_shows_every_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # argparse wraps at hyphens too
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: alexnet-ungrouped)", "(default: vc709:15)", "(default: mapping-out)",
                    "(default: 1)", "(default: 0.01)", "(default: 0.9)"):
        assert default in text
    assert "mini-batch size" in text and "learning rate" in text


def point(devices, samples_per_s, limited_by="compute"):
    return {"devices": devices, "samples_per_s": samples_per_s, "limited_by": limited_by}


def test_linear_scaling_is_claimed_only_where_throughput_scales():
    # 100 samples/s per device up to 4 devices (one size refused, one adding nothing), then
    # 5 devices reach only 440 (88 per device, under 90% of 100): linear up to 4
    points = [point(2, 200), {"devices": 3, "error": "refused"}, point(4, 400), point(5, 440), point(6, 440)]
    assert report.linear_limit(points) == 4
    assert report.scaling_summary(points, 150) == (
        "linear scaling up to 4 devices (samples/s per device within 90% of the best of the smaller sizes); "
        "larger clusters add less (compute bound from 5 devices), up to 440 samples/s at 5 devices")
    flat = [point(2, 200), point(3, 300), point(4, 300, "link bandwidth")]
    assert report.scaling_summary(flat, 10) == (
        "linear scaling up to 3 devices (samples/s per device within 90% of the best of the smaller sizes); "
        "larger clusters add no throughput (link bound at 10 Gb/s per link from 4 devices)")
    assert report.scaling_summary(points[:3], 150) == (
        "linear scaling over the whole sweep, up to 4 devices (samples/s per device within 90% of the best of "
        "the smaller sizes)")
    assert report.scaling_summary([{"devices": 3, "error": "refused"}], 150) == "no size of the sweep maps"


def test_plots_show_the_network_whole_devices_and_refused_sizes(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    mapping = map_network(zoo.tiny(), parse_cluster("ecp5-85:3"))
    plots.utilisation(mapping, "tiny on ecp5-85:3", tmp_path / "u.png")
    (ax,) = figures[0].axes
    assert ax.get_title() == "tiny on ecp5-85:3"
    assert [t for t in ax.get_xticks() if 0 <= t <= 2] == [0, 1, 2]
    points = [{"devices": 2, "error": "refused"},
              {"devices": 3, "compute_samples_per_s": 300, "link_samples_per_s": 900, "samples_per_s": 300,
               "idle": 0.1}]
    plots.scaling(points, 150, "tiny on ecp5-85 chains", tmp_path / "s.png")
    top, _ = figures[1].axes
    assert top.get_title() == "tiny on ecp5-85 chains"
    assert [t.get_text() for t in top.get_legend().get_texts()][-1] == "refused: 2"


@pytest.mark.parametrize("lr", [float("nan"), float("inf"), -0.5, 0])
def test_map_network_refuses_a_learning_rate_that_is_not_positive_and_finite(lr):
    with pytest.raises(SpecError) as error:
        map_network(zoo.tiny(), parse_cluster("ecp5-85:4"), lr=lr)
    assert str(error.value) == f"lr must be a positive finite number, got {lr!r}"


def test_gradient_sums_narrower_than_the_evidence_supports_are_warned_about(tmp_path, capsys):
    main(["--network", "tiny", "--grad-bits", "16", "--batch", "4", "--out", str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[0] == (
        "warning: 16-bit gradient sums trained 1.4 points below float aligned SGD on one seed of three at "
        "mini-batch 16 (docs/numerics.md); at mini-batch 4 the evidence supports 24 bits or more")
    main(["--network", "tiny", "--grad-bits", "16", "--out", str(tmp_path)])  # mini-batch 1: measured within
    assert not capsys.readouterr().out.startswith("warning")


def test_fc_weights_in_dram_on_boards_without_dram_are_refused_in_one_line(tmp_path, capsys):
    """The ECP5-5G evaluation board has no DRAM: fully connected weights cannot stream from it,
    and --fc-weights dram says so rather than keep them on chip."""
    args = ["--network", "lenet-digits", "--cluster", "ecp5-85:3", "--fc-weights", "dram", "--out", str(tmp_path)]
    assert refusal(main, args, capsys) == (
        "error: --fc-weights dram: no fully connected slice of the mapping on cluster 'ecp5-85:3' is on a device "
        "with DRAM (devices with DRAM: lfe5u-85f, lfe5um5g-45f, xc7vx690t, xc7z015, xc7z045, xcu30, xcu50, "
        "xcvu37p, xczu7ev, xczu9eg)")
    main(["--network", "lenet-digits", "--cluster", "ecp5-45:3", "--fc-weights", "dram", "--for-hardware",
          "--out", str(tmp_path)])
    mapping = Mapping.from_json((tmp_path / "mapping.json").read_text())
    assert [s.layer for n in mapping.nodes for s in n.slices if s.weights_offchip] == ["fc1", "fc1", "fc2"]
