"""Elaboration at paper scale (a benchmark: it prints figures and asserts only that each node builds).

Run with ``python -m pytest tests/bench_elaboration.py -m bench -s -p no:xdist``. It maps VGG-16
on 15 VC709s at 150 Gb/s as ``python -m mapping --for-hardware`` does (16-bit gradient sums,
fully connected weights and the samples in flight in DRAM) and runs ``python -m hw.build
--mapping ... --node N --no-synth`` for every node, one at a time, printing its wall and CPU
time and the peak of the memory it and the processes it starts (slices elaborated side by side,
Yosys writing the Verilog) hold together, sampled from /proc (Linux) every half second (issue 41's
target: every node under 5 minutes and 8 GB on two cores; docs/design.md has the figures).
"""

import os
from pathlib import Path
import subprocess
import sys
import threading
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
            with TreeMemory(build.pid) as memory:
                _, status, usage = os.wait4(build.pid, 0)
        wall = time.monotonic() - started
        assert os.waitstatus_to_exitcode(status) == 0, log.read_text()
        print(f"\nnode {config.index} ({layers}): {wall:.0f} s wall, {usage.ru_utime + usage.ru_stime:.0f} s CPU, "
              f"peak {memory.peak / 1e9:.2f} GB")


class TreeMemory:
    """The peak of the resident memory of process ``pid`` and its descendants together, sampled
    every ``period`` seconds while in the ``with`` block."""

    def __init__(self, pid, period=0.5):
        self.pid, self.period, self.peak = pid, period, 0
        self._done = threading.Event()

    def _sample(self):
        parents, resident = {}, {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # the process ended
                continue
            pid = int(stat.parent.name)
            parents[pid], resident[pid] = int(fields[1]), int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        tree, grown = {self.pid}, True
        while grown:
            children = {pid for pid, parent in parents.items() if parent in tree} - tree
            tree |= children
            grown = bool(children)
        return sum(resident.get(pid, 0) for pid in tree)

    def _run(self):
        while not self._done.wait(self.period):
            self.peak = max(self.peak, self._sample())

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
