"""Benchmark: cycles per sample of every node, measured vs predicted: the default chain, and three
chains whose fully connected rows partly live on upstream nodes (weight balancing).

Run with ``python -m pytest sim/bench_chain.py -m bench -s -p no:xdist``. One mini-batch of
40 samples, so no update boundary stalls the pipeline; cycles per sample are the median
interval between samples entering each node over the second half of the run
(``sim.chain.cycles_per_sample``): enough samples for the buffers in front of the slowest
node to fill, so every node shows the rate the chain really runs at.

The default chain is also run for 128 samples at mini-batches of 1, 4, 16 and 128 (one
update, at the end), against the model's rate with the weight update's walk, with the
intervals between samples entering node 0 over one mini-batch.
"""

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.mapper import map_network
from mapping.golden import random_data
from sim.chain import BALANCED_BRAM, CHAIN, STOPPING_UPDATE_OPTIONS, assert_bit_exact, mean_cycles_per_sample, report, train_chain


SAMPLES, LR = 40, 0.05


@pytest.mark.bench
@pytest.mark.parametrize("cluster, bram_fraction", [
    (CHAIN, 0.9),
    (CHAIN, BALANCED_BRAM),  # node 3 keeps fc rows 2..9 on nodes 0, 1 and 2
    (CHAIN, 0.04),           # node 3 keeps fc rows 1..8 on node 1 (node 2 relays), 9 on node 2
    ("ecp5-85:3", 0.06),     # node 2 keeps fc rows 2..9 on node 1
])
def test_chain_cycles_per_sample(cluster, bram_fraction):
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(cluster), batch=SAMPLES, lr=LR, bram_fraction=bram_fraction,
                          **STOPPING_UPDATE_OPTIONS)
    inputs, labels, params = random_data(network, SAMPLES, 4)
    run = train_chain(network, mapping, inputs, labels, params, deadline=2_000_000)
    assert_bit_exact(run.params, run.golden, params)
    hosted = [(b.owner, b.host, b.layer, b.out_range) for node in mapping.nodes for b in node.hosted]
    print(f"\n{cluster} at {bram_fraction:.1%} of the block RAM (rows hosted: {hosted or 'none'}), "
          f"{SAMPLES} samples in one mini-batch: {run.cycles} cycles\n{report(mapping, run)}")


UPDATE_SAMPLES = 128


@pytest.mark.bench
@pytest.mark.parametrize("overlapped", [False, True], ids=["stalled", "overlapped"])
@pytest.mark.parametrize("batch", [1, 4, 16, UPDATE_SAMPLES])
def test_chain_cycles_per_sample_with_weight_updates(batch, overlapped):
    """The default chain over 128 samples at mini-batch ``batch`` (128: a single update at the
    end, the rate with no update in the way), on Verilator: the mean rate over the second half,
    updates included, against the model's rate with the update walks
    (``NodeConfig.cycles_per_sample_with_updates`` of the slowest node); with the update that
    stops the engines or the one that does not (``overlapped_update``)."""
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(CHAIN), batch=batch, lr=LR, bram_fraction=0.9,
                          **{**STOPPING_UPDATE_OPTIONS, "update": "overlapped" if overlapped else "stop"})
    inputs, labels, params = random_data(network, UPDATE_SAMPLES, 4)
    run = train_chain(network, mapping, inputs, labels, params, deadline=2_000_000, backend="verilator",
                      profile="quick")
    assert_bit_exact(run.params, run.golden, params)
    model = max(cfg.cycles_per_sample_with_updates for cfg in mapping.nodes)
    measured = mean_cycles_per_sample(run, 0, batch)
    middle = UPDATE_SAMPLES // 2 // batch * batch  # where a mini-batch starts
    starts = run.sample_starts[0][middle:middle + min(batch, 16) + 1]
    print(f"\nintervals between samples entering node 0 from sample {middle}: "
          f"{[b - a for a, b in zip(starts, starts[1:])]}")
    print(f"batch {batch}: {run.cycles} cycles for {UPDATE_SAMPLES} samples; second half "
          f"{measured:.1f} cycles/sample measured, {model:.1f} predicted with the update walks "
          f"({measured / model - 1:+.1%}); engines alone {max(cfg.cycles_per_sample for cfg in mapping.nodes)}"
          f"\n{report(mapping, run)}")
    assert measured == pytest.approx(model, rel=0.05)  # within 5% at 1, 4, 16 and 128 (docs/node_dataflow.md)
