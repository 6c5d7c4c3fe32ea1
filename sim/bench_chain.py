"""Benchmark: cycles per sample of every node of the default chain, measured vs predicted.

Run with ``python -m pytest sim/bench_chain.py -m bench -s``. One mini-batch of 12
samples, so no update boundary stalls the pipeline; cycles per sample are the median
interval between samples entering each node, after the pipeline has filled.
"""

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network
from sim.chain import report, train_chain
from sim.test_chain import CHAIN, LR, _assert_bit_exact, _data

SAMPLES = 12


@pytest.mark.bench
def test_chain_cycles_per_sample():
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(CHAIN), batch=SAMPLES, lr=LR, **GENERATOR_OPTIONS)
    inputs, labels, params = _data(network, SAMPLES, 4)
    run = train_chain(network, mapping, inputs, labels, params)
    _assert_bit_exact(run, params)
    print(f"\n{CHAIN}, {SAMPLES} samples in one mini-batch: {run.cycles} cycles\n{report(mapping, run)}")
