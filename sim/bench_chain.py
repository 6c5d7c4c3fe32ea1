"""Benchmark: cycles per sample of every node, measured vs predicted: the default chain, and three
chains whose fully connected rows partly live on an upstream node (weight balancing).

Run with ``python -m pytest sim/bench_chain.py -m bench -s -p no:xdist``. One mini-batch of
40 samples, so no update boundary stalls the pipeline; cycles per sample are the median
interval between samples entering each node over the second half of the run
(``sim.chain.cycles_per_sample``): enough samples for the buffers in front of the slowest
node to fill, so every node shows the rate the chain really runs at.
"""

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network
from sim.chain import report, train_chain
from sim.test_chain import CHAIN, LR, _assert_bit_exact, _data

SAMPLES = 40


@pytest.mark.bench
@pytest.mark.parametrize("cluster, bram_fraction", [
    (CHAIN, 0.9),
    (CHAIN, 0.06),        # node 3 keeps fc rows 1..9 on node 2
    ("ecp5-85:3", 0.1),   # node 2 keeps fc rows 8..9 on node 1
    ("ecp5-85:3", 0.05),  # node 2 keeps fc rows 8..9 on node 0, node 1 relays them
])
def test_chain_cycles_per_sample(cluster, bram_fraction):
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(cluster), batch=SAMPLES, lr=LR, bram_fraction=bram_fraction,
                          **GENERATOR_OPTIONS)
    inputs, labels, params = _data(network, SAMPLES, 4)
    run = train_chain(network, mapping, inputs, labels, params, deadline=2_000_000)
    _assert_bit_exact(run, params)
    hosted = [(b.owner, b.host, b.layer, b.out_range) for node in mapping.nodes for b in node.hosted]
    print(f"\n{cluster} at {bram_fraction:.0%} of the block RAM (rows hosted: {hosted or 'none'}), "
          f"{SAMPLES} samples in one mini-batch: {run.cycles} cycles\n{report(mapping, run)}")
