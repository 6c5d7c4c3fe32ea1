import json
import subprocess
import sys

import pytest

from mapping.__main__ import main
from mapping.nodeconfig import Mapping


def test_cli_writes_table_json_and_plots(tmp_path, capsys):
    main(["--network", "tiny", "--cluster", "ecp5-85:4", "--out", str(tmp_path), "--sizes", "2:4"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("tiny on ecp5-85:4:")
    assert "conv2 ICP[3:4], fc ICP[0:32]" in out and "conv1 OCP[0:4]" in out
    mapping = Mapping.from_json((tmp_path / "mapping.json").read_text())
    assert len(mapping.nodes) == 4 and mapping.network == "tiny"
    points = json.loads((tmp_path / "scaling.json").read_text())
    assert [p["devices"] for p in points] == [2, 3, 4]
    for name in ("utilisation.png", "scaling.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_cli_sweep_reports_the_sizes_it_refused(tmp_path, capsys):
    main(["--network", "vgg16", "--cluster", "vc709:50@150", "--out", str(tmp_path), "--sizes", "10:50:40"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("10 devices: refused: network 'vgg16' on cluster 'xc7vx690t:10@150' does "
                               "not fit even with weight balancing") for line in lines)
    points = json.loads((tmp_path / "scaling.json").read_text())
    assert [("error" in p) for p in points] == [True, False]


def test_cli_link_override_changes_the_bound(tmp_path, capsys):
    main(["--network", "tiny", "--cluster", "ecp5-85:4", "--out", str(tmp_path), "--link-gbps", "100"])
    assert "(compute bound)" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--network", "vgg16", "--cluster", "vc709:1"], "conv weights alone"),
    (["--network", "nosuchnet", "--cluster", "vc709:1"], "unknown network 'nosuchnet'"),
    (["--network", "tiny", "--cluster", "ecp5-85:4", "--sizes", "5:3"], "--sizes must be"),
    (["--network", "tiny", "--cluster", "ecp5-85:4", "--max-multipliers", "20"], "needs 27 multipliers"),
    (["--network", "tiny", "--cluster", "ecp5-85:4", "--bram-fraction", "1.5"],
     "bram_fraction must be above 0 and at most 1, got 1.5"),
])
def test_cli_refusals_are_one_line_with_status_2(tmp_path, args, message):
    result = subprocess.run([sys.executable, "-m", "mapping", *args, "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
