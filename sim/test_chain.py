"""Chained nodes train the tiny CNN bit-exactly (issue 5): one node, then a 4-node chain."""

import numpy as np
import pytest

from mapping import golden, numerics, zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network
from sim.chain import report, train_chain

BATCH, LR, SAMPLES = 3, 0.05, 6
CHAIN = "ecp5-85:2+ecp5-45:2"  # the default chain of python -m hw.build


def _data(network, samples, seed):
    rng = np.random.default_rng(seed)
    inputs = rng.random((samples, *network.input_shape))
    labels = rng.integers(0, network.num_classes, samples)
    params = golden.init_params(network, rng, numerics.Formats())
    return inputs, labels, params


def _assert_bit_exact(run, initial):
    changed = sum(int((run.golden[layer][0] != w).sum()) for layer, (w, _) in initial.items())
    assert changed > 0.5 * sum(w.size for w, _ in initial.values()), "training barely moved the weights"
    for layer, (weights, bias) in run.golden.items():
        np.testing.assert_array_equal(run.params[layer][0], weights, err_msg=f"{layer} weights")
        if bias is not None:
            np.testing.assert_array_equal(run.params[layer][1], bias, err_msg=f"{layer} bias")


def _train(cluster, seed, stall=0.0):
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(cluster), batch=BATCH, lr=LR, **GENERATOR_OPTIONS)
    inputs, labels, params = _data(network, SAMPLES, seed)
    run = train_chain(network, mapping, inputs, labels, params, stall=stall,
                      rng=np.random.default_rng(seed))
    print(f"\n{cluster}{' with stalls' if stall else ''}: {run.cycles} cycles for {SAMPLES} samples "
          f"({SAMPLES // BATCH} mini-batches)\n{report(mapping, run)}")
    _assert_bit_exact(run, params)
    return mapping


def test_one_node_holding_the_whole_network_trains_bit_exact():
    mapping = _train("vc709:1", seed=2)  # unfolded, the net needs 480 multipliers
    assert [s.layer for s in mapping.nodes[0].slices] == ["conv1", "conv2", "fc"]


def test_four_node_chain_trains_tiny_bit_exact():
    mapping = _train(CHAIN, seed=1)
    layout = [[(s.layer, s.mode) for s in node.slices] for node in mapping.nodes]
    # conv1 by OCP; node 0 holds conv1 and the start of conv2, split by ICP over two
    # nodes; fc split by ICP over the two ECP5-45s, so flattened activations are
    # bypassed across a link.
    assert layout == [[("conv1", "ocp"), ("conv2", "icp")], [("conv2", "icp")],
                      [("fc", "icp")], [("fc", "icp")]]


@pytest.mark.slow
def test_four_node_chain_with_random_stalls_on_every_link_stays_bit_exact():
    _train(CHAIN, seed=3, stall=0.3)
