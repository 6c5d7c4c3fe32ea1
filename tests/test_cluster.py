"""Cluster specs: every form, every refusal with its exact message."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mapping.cluster import Cluster, parse_cluster
from mapping.devices import DEVICES, get_device
from mapping.errors import SpecError

EXAMPLES = Path(__file__).resolve().parents[1] / "mapping" / "examples"
VC709, ECP5_85 = DEVICES["xc7vx690t"], DEVICES["lfe5um5g-85f"]
KNOWN = ("ecp5-25, ecp5-45, ecp5-85, u30, u50lv, ulx3s-85f, vc709, vcu128, zc706, zcu102, zcu104, "
         "lfe5u-85f, lfe5um5g-25f, lfe5um5g-45f, lfe5um5g-85f, xc7vx690t, xc7z015, xc7z045, xcu30, "
         "xcu50, xcvu37p, xczu7ev, xczu9eg")


def names(cluster):
    return [device.name for device in cluster]


def test_homogeneous_chain():
    cluster = parse_cluster("vc709:15")
    assert len(cluster) == 15 and all(device is VC709 for device in cluster)
    assert cluster.link_gbps == (20.0,) * 14
    assert cluster.spec == "vc709:15"
    assert cluster[0] is VC709 and cluster[-1] is VC709


def test_ecp5_chain():
    cluster = parse_cluster("ecp5-85:4")
    assert names(cluster) == ["lfe5um5g-85f"] * 4
    assert cluster.link_gbps == (8.0, 8.0, 8.0)


def test_mtrain_clusters():
    # MTrain Table II; default links run at the slower end's bandwidth.
    one = parse_cluster("u50lv+u30")
    assert names(one) == ["xcu50", "xcu30"] and one.link_gbps == (31.5,)
    two = parse_cluster("xczu9eg+xc7z045+xc7z015")
    assert names(two) == ["xczu9eg", "xc7z045", "xc7z015"] and two.link_gbps == (10.0, 10.0)
    three = parse_cluster("vcu128+zcu102+zcu104")
    assert names(three) == ["xcvu37p", "xczu9eg", "xczu7ev"] and three.link_gbps == (20.0, 1.0)


def test_mixed_counts_and_default_links():
    cluster = parse_cluster("vc709:3+ecp5-85:2")
    assert list(cluster) == [VC709] * 3 + [ECP5_85] * 2
    assert cluster.link_gbps == (20.0, 20.0, 8.0, 8.0)
    assert str(cluster) == ("3 x XC7VX690T-2FFG1761C (VC709) + "
                            "2 x LFE5UM5G-85F-8BG381C (ECP5-5G Evaluation Board)")


def test_bandwidth_override():
    cluster = parse_cluster("vc709:15@150")
    assert cluster.link_gbps == (150.0,) * 14
    assert parse_cluster("u50lv + u30 @ 0.5").link_gbps == (0.5,)


def test_single_device_has_no_links():
    cluster = parse_cluster("VC709")
    assert list(cluster) == [VC709] and cluster.link_gbps == ()
    assert cluster.neighbour_gbps(0) == (None, None)


def test_neighbour_bandwidths():
    cluster = parse_cluster("vc709:2+ecp5-85")
    assert [cluster.neighbour_gbps(i) for i in range(3)] == [(None, 20.0), (20.0, 8.0), (8.0, None)]


def test_already_parsed_cluster_passes_through():
    cluster = parse_cluster("vc709:2")
    assert parse_cluster(cluster) is cluster


def test_toml_file_with_links():
    path = EXAMPLES / "mixed-chain.toml"
    cluster = parse_cluster(str(path))
    assert list(cluster) == [VC709] * 3 + [ECP5_85] * 2
    assert cluster.link_gbps == (20.0, 20.0, 8.0, 8.0)
    assert cluster.spec == str(path)


def test_json_file_with_link_gbps():
    cluster = parse_cluster(str(EXAMPLES / "mtrain-cluster1.json"))
    assert list(cluster) == [get_device("u50lv"), get_device("u30")]
    assert cluster.link_gbps == (24.0,)


def test_file_without_bandwidth_uses_defaults(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"devices": [{"name": "zcu102"}, {"name": "ecp5-25", "count": 2}]}))
    assert parse_cluster(str(path)).link_gbps == (4.0, 4.0)


def test_cluster_is_a_value():
    assert parse_cluster("vc709:2") == Cluster((VC709, VC709), (20.0,), "vc709:2")


@pytest.mark.parametrize("spec, message", [
    ("vc707:3", f"cluster 'vc707:3': unknown device 'vc707' (known: {KNOWN})"),
    ("vc709:0", "cluster 'vc709:0': count of 'vc709' must be a positive integer, got 0"),
    ("vc709:-2", "cluster 'vc709:-2': count of 'vc709' must be a positive integer, got -2"),
    ("vc709:1.5", "cluster 'vc709:1.5': count of 'vc709' must be a positive integer, got '1.5'"),
    ("vc709:x", "cluster 'vc709:x': count of 'vc709' must be a positive integer, got 'x'"),
    ("vc709:", "cluster 'vc709:': count of 'vc709' must be a positive integer, got ''"),
    ("vc709@0", "cluster 'vc709@0': link bandwidth after '@' must be a positive number of "
                "Gb/s, got '0'"),
    ("vc709:2@-1", "cluster 'vc709:2@-1': link bandwidth after '@' must be a positive number "
                   "of Gb/s, got '-1'"),
    ("vc709:2@fast", "cluster 'vc709:2@fast': link bandwidth after '@' must be a positive "
                     "number of Gb/s, got 'fast'"),
    ("vc709:2@inf", "cluster 'vc709:2@inf': link bandwidth after '@' must be a positive "
                    "number of Gb/s, got 'inf'"),
    ("vc709@", "cluster 'vc709@': '@' must be followed by a link bandwidth in Gb/s"),
    ("vc709++ecp5-85", "cluster 'vc709++ecp5-85': empty device name between '+' signs"),
    ("vc709 ecp5-85", "cluster 'vc709 ecp5-85': cannot read 'vc709 ecp5-85'; expected DEVICE "
                      "or DEVICE:COUNT joined by '+', optionally ending in @GBPS"),
    ("", "cluster spec must be text such as 'vc709:15', got ''"),
    (15, "cluster spec must be text such as 'vc709:15', got 15"),
])
def test_spec_refusals(spec, message):
    with pytest.raises(SpecError) as error:
        parse_cluster(spec)
    assert str(error.value) == message


@pytest.mark.parametrize("name, text, message", [
    ("a.toml", "links = [1.0]\n[[devices]]\nname = 'vc709'\ncount = 3\n",
     "links gives 1 bandwidth but a chain of 3 devices has 2 neighbour pairs"),
    ("b.toml", "links = [1.0, 0]\n[[devices]]\nname = 'vc709'\ncount = 3\n",
     "links[1] must be a positive number of Gb/s, got 0"),
    ("c.toml", "link_gbps = 1\nlinks = [1, 2]\n[[devices]]\nname = 'vc709'\ncount = 3\n",
     "give either link_gbps or links, not both"),
    ("d.toml", "link_gbps = -5\n[[devices]]\nname = 'vc709'\ncount = 3\n",
     "link_gbps must be a positive number of Gb/s, got -5"),
    ("e.toml", "[[devices]]\nname = 'vc709'\ncount = 0\n",
     "devices[0].count must be a positive integer, got 0"),
    ("f.toml", "speed = 1\n[[devices]]\nname = 'vc709'\n",
     "unknown field(s) speed (known: devices, link_gbps, links)"),
    ("g.toml", "[[devices]]\nname = 'vc709'\nnumber = 2\n",
     "devices[0] has unknown field(s) number"),
    ("h.toml", "[[devices]]\nname = 'vc709'\n[[devices]]\ncount = 2\n",
     "devices[1] needs a 'name'"),
    ("i.toml", "devices = []\n",
     "'devices' must be a non-empty list of {name, count} entries"),
    ("j.toml", "[[devices]\nname = 'vc709'\n",
     "Expected ']]' at the end of an array declaration (at line 1, column 10)"),
    ("k.json", '{"devices": [{"name": "vc709"}, {"name": "vc708"}]}',
     f"devices[1].name: unknown device 'vc708' (known: {KNOWN})"),
    ("l.json", '{"devices": [{"name": "vc709", "count": 2.5}]}',
     "devices[0].count must be a positive integer, got 2.5"),
    ("m.json", '{"devices": [{"name": "vc709", "count": true}]}',
     "devices[0].count must be a positive integer, got True"),
    ("n.json", '{"devices": [{"name": "vc709", "count": 2}], "links": 5}',
     "links must be a list of Gb/s, got 5"),
    ("o.json", "[1, 2]", "expected a table with 'devices'"),
    ("p.json", '{"devices": [{"name": "vc709"}',
     "Expecting ',' delimiter: line 1 column 31 (char 30)"),
])
def test_file_refusals(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        parse_cluster(str(path))
    assert str(error.value) == f"cluster file {path}: {message}"


def test_unreadable_file(tmp_path):
    path = tmp_path / "missing.toml"
    with pytest.raises(SpecError) as error:
        parse_cluster(str(path))
    assert str(error.value) == f"cluster file {path}: No such file or directory"


def test_cli_prints_one_line_without_traceback():
    code = ("from mapping.errors import run_cli\n"
            "from mapping.cluster import parse_cluster\n"
            "run_cli(lambda: parse_cluster('vc709:0'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=EXAMPLES.parents[1])
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == ("error: cluster 'vc709:0': count of 'vc709' must be a positive "
                             "integer, got 0\n")
