"""Fmax of every node of the default mapping (a benchmark, not a unit test).

Run with ``python -m pytest sim/bench_node_fmax.py -m bench -s`` (tens of minutes:
one nextpnr run per node, as many at once as there are CPUs, up to the node count).
Each node of ``python -m hw.build``'s default mapping is synthesized with a register
on every port and placed and routed out of context on its own device, aiming at the
clock the mapping converts cycles to seconds at. Prints the resources after
synthesis (port registers included), nextpnr's Fmax against that clock, and the
worst path: its source and sink cells and the project lines its nets come from.
"""

import os
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from hw.build import load_mapping, parse_args
from hw.node.top import Node
from hw.synth import place_and_route
from mapping.devices import get_device

pytestmark = pytest.mark.bench


def default_mapping():
    return load_mapping(parse_args(["--node", "0"]))


def place_and_route_node(index):
    """(NodeConfig, PlaceRouteResult, seconds) of node ``index``; runs in a worker process."""
    started = time.monotonic()
    config = default_mapping().node(index)
    node = Node(config, family=get_device(config.device).family)
    result = place_and_route(node, config.device, config.clock_mhz)
    return config, result, time.monotonic() - started


def test_node_fmax():
    count = len(default_mapping().nodes)
    print("\nnodes of the default mapping, placed and routed out of context (nextpnr-ecp5, seed 1); "
          "Fmax and clock in MHz")
    with ProcessPoolExecutor(min(count, os.cpu_count())) as pool:
        runs = list(pool.map(place_and_route_node, range(count)))
    print(f"{'node':>4} {'device':<14}{'LUT':>7}{'FF':>7}{'mult':>6}{'BRAM':>6}"
          f"{'Fmax':>9}{'clock':>7}{'ratio':>7}  meets  {'time':>6}")
    for config, result, seconds in runs:
        synth = result.synth
        print(f"{config.index:>4} {config.device:<14}{synth.lut:>7}{synth.ff:>7}{synth.dsp:>6}{synth.bram:>6}"
              f"{result.fmax:>9.1f}{config.clock_mhz:>7.0f}{result.fmax / config.clock_mhz:>7.2f}  "
              f"{'yes' if result.fmax >= config.clock_mhz else 'NO':<5}  {seconds:>5.0f}s")
    for config, result, _ in runs:
        print(f"node {config.index} critical path, {1000 / result.fmax:.2f} ns "
              f"(the clock allows {1000 / config.clock_mhz:.2f}):")
        print("\n".join(f"  {line}" for line in result.critical_path.lines()))
        assert result.fmax > 0
