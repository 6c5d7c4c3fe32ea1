"""Elaboration at paper scale (a benchmark: it prints figures and asserts only that each node builds).

Run with ``python -m pytest tests/bench_elaboration.py -m bench -s -p no:xdist``. It maps VGG-16
on 15 VC709s at 150 Gb/s as ``python -m mapping --for-hardware`` does (16-bit gradient sums,
fully connected weights and the samples in flight in DRAM) and runs ``python -m hw.build
--mapping ... --node N --no-synth`` for every node, one process each, printing its wall and
CPU time and its peak resident memory (issue 41's target: every node under 5 minutes and
8 GB on two cores; docs/design.md has the figures).
"""

import os
import subprocess
import sys
import time

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_with_default_gradient_sums

pytestmark = pytest.mark.bench


def test_every_vgg16_node_elaborates(tmp_path):
    mapping = map_with_default_gradient_sums(zoo.vgg16(), parse_cluster("vc709:15@150"), network_name="vgg16",
                                             **GENERATOR_OPTIONS)
    path = tmp_path / "mapping.json"
    path.write_text(mapping.to_json())
    for config in mapping.nodes:
        layers = ", ".join(s.layer for s in config.slices)
        log = tmp_path / f"node{config.index}.log"
        started = time.monotonic()
        with log.open("w") as output:
            build = subprocess.Popen([sys.executable, "-m", "hw.build", "--mapping", str(path), "--node",
                                      str(config.index), "--no-synth", "--out", str(tmp_path / "build")],
                                     stdout=output, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(build.pid, 0)
        wall = time.monotonic() - started
        assert os.waitstatus_to_exitcode(status) == 0, log.read_text()
        print(f"\nnode {config.index} ({layers}): {wall:.0f} s wall, {usage.ru_utime + usage.ru_stime:.0f} s CPU, "
              f"peak {usage.ru_maxrss / 1e6:.2f} GB")
