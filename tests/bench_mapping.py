"""Mapping speed (a benchmark, not a unit test: it prints times and asserts none).

Run with ``python -m pytest tests/bench_mapping.py -m bench -s``. Prints, for
AlexNet (single tower), VGG-16 and VGG-19 on VC709 chains at 150 Gb/s per link:
- the time ``map_network`` takes at 15 and at 85 devices (wall clock and CPU time of
  this process: the machine may be shared), with the outcome (samples/s or refused);
- the time of the scaling sweep over 5..85 devices in steps of 5, as
  ``python -m mapping --sizes 5:85:5`` runs it.
"""

import time

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import map_network
from mapping.report import sweep

pytestmark = pytest.mark.bench

NETWORKS = {"alexnet-ungrouped": zoo.alexnet_ungrouped, "vgg16": zoo.vgg16, "vgg19": zoo.vgg19}


def timed(work):
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("devices", [15, 85])
def test_mapping_time(name, devices):
    network, cluster = NETWORKS[name](), parse_cluster(f"vc709:{devices}@150")

    def work():
        try:
            return f"{map_network(network, cluster).summary['samples_per_s']:.1f} samples/s"
        except SpecError:
            return "refused"

    outcome, wall, cpu = timed(work)
    print(f"\n{name} on {devices} x VC709: {wall:.3f} s wall, {cpu:.3f} s CPU ({outcome})")


@pytest.mark.parametrize("name", NETWORKS)
def test_sweep_time(name):
    points, wall, cpu = timed(lambda: sweep(NETWORKS[name](), parse_cluster("vc709:1"),
                                            range(5, 86, 5), 150.0))
    mapped = sum("error" not in p for p in points)
    print(f"\n{name} sweep 5..85 step 5: {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"({mapped} of {len(points)} sizes mapped)")
