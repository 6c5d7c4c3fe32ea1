"""Elaboration and synthesis at paper scale (benchmarks: they print figures).

Run with ``python -m pytest tests/bench_elaboration.py -m bench -s -p no:xdist``; the synthesis of
the largest node (hours) alone with ``-k synthesizes``. It maps VGG-16
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
from hw.build import build, parse_args
from mapping.mapper import GENERATOR_OPTIONS, mapper_for_widths

pytestmark = pytest.mark.bench


def vgg16_mapping(folder):
    """The --for-hardware VGG-16 mapping on 15 VC709s at 150 Gb/s, written to ``folder``."""
    mapping = mapper_for_widths(None, None)(zoo.vgg16(), parse_cluster("vc709:15@150"), network_name="vgg16",
                                            **GENERATOR_OPTIONS)
    path = folder / "mapping.json"
    path.write_text(mapping.to_json())
    return mapping, path


def test_every_vgg16_node_elaborates(tmp_path):
    mapping, path = vgg16_mapping(tmp_path)
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


def test_the_largest_vgg16_node_synthesizes_within_the_xc7vx690t(tmp_path):
    """Node 2 (the end of conv2_2, conv3_1, most of conv3_2: 3,594 of the part's 3,600 DSP48E1 and
    2,631 of its 2,940 RAMB18 by the mapping's plan) through ``python -m hw.build``'s Yosys
    ``synth_xilinx``, module by module on every core (hours; the parts are cached)."""
    mapping, path = vgg16_mapping(tmp_path)
    config, device, result = build(parse_args(["--mapping", str(path), "--node", "2", "--out", str(tmp_path / "build")]))
    print(f"\nnode 2: {result.dsp} DSP48E1 of {device.dsp}, {result.bram} RAMB18 of {device.bram_blocks}, "
          f"{result.lut} slice LUTs of {device.lut}, {result.ff} FFs of {device.ff}")
    assert (result.dsp, result.bram) == (config.estimate.dsp, config.estimate.bram_blocks)
    assert result.dsp <= device.dsp and result.bram <= device.bram_blocks
    assert result.lut <= device.lut and result.ff <= device.ff
