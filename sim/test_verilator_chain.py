"""Chains on the Verilator backend (issue 15): it agrees with Amaranth's simulator cycle for
cycle on stride-2 convolutions, and lenet-digits, which no Amaranth-simulated chain trains
in CI time, trains bit-exactly on real digits over 3 nodes (1 and 5 with -m bench). A chain
over lossy lanes in logic: sim/test_distributed.py (the reference of its distributed runs).

Each chain is compiled once ("quick" build profile) and cached (``sim/verilated.py``).
"""

import numpy as np
import pytest

from mapping import data, golden, numerics, zoo
from mapping.cluster import parse_cluster
from mapping.golden import random_data
from mapping.mapper import map_network
from mapping.network import Layer, infer
from sim.chain import STOPPING_UPDATE_OPTIONS, assert_bit_exact, cycles_per_sample, report, train_chain

pytestmark = pytest.mark.slow  # each compiles a chain (half a minute or more)


def _chain(network, cluster, inputs, labels, params, *, batch, stall=0.0, lr=0.05):
    mapping = map_network(network, parse_cluster(cluster), batch=batch, lr=lr, **STOPPING_UPDATE_OPTIONS)
    run = train_chain(network, mapping, inputs, labels, params, stall=stall, backend="verilator", profile="quick")
    print(f"\n{network.name} on {cluster}{' with stalls' if stall else ''}: {run.cycles} cycles for "
          f"{len(inputs)} samples\n{report(mapping, run)}")
    assert_bit_exact(run.params, run.golden, params)
    return mapping, run


def _digits(samples):
    network = zoo.lenet_digits()
    dataset = data.load(data.DIGITS, network.input_shape, network.num_classes)
    params = golden.init_params(network, np.random.default_rng(3), numerics.Formats())
    return network, dataset.train_x[:samples], dataset.train_y[:samples], params


@pytest.mark.parametrize("cluster, layout", [
    # CI: 3 nodes, a first, a middle and a last node (every layer's dataflow); 5 nodes have no
    # other kind of node and take 22 s more to build and run. 1 node holds what
    # sim/test_chain.py trains on one node (Amaranth's simulator, tiny). Both run with -m bench.
    pytest.param("ecp5-85:1", [["conv1", "conv2", "fc1", "fc2"]], marks=pytest.mark.bench),
    ("ecp5-85:3", [["conv1", "conv2"], ["conv2"], ["conv2", "fc1", "fc2"]]),
    pytest.param("ecp5-85:5", [["conv1", "conv2"], ["conv2"], ["conv2"], ["conv2"], ["conv2", "fc1", "fc2"]],
                 marks=pytest.mark.bench),
])
def test_lenet_digits_trains_bit_exact_on_real_digits(cluster, layout):
    network, inputs, labels, params = _digits(16)
    mapping, run = _chain(network, cluster, inputs, labels, params, batch=8)
    assert [[s.layer for s in node.slices] for node in mapping.nodes] == layout
    # the last node's steady rate over 16 samples is the mapping's prediction (every node's
    # prediction is the same: the partitioner balanced them)
    assert cycles_per_sample(run, len(mapping.nodes) - 1) == mapping.nodes[-1].cycles_per_sample


def test_stride_two_convolutions_train_bit_exact_and_both_backends_agree_cycle_for_cycle():
    # conv1 and conv2 both stride 2 (8x8 -> 4x4 -> 2x2), conv2 split by ICP over both nodes.
    # Amaranth's simulator (the reference) and Verilator count the same cycles, see each
    # sample enter each node in the same cycle and train the same words.
    network = infer("stride2", (1, 8, 8), [
        zoo.conv("conv1", 4, 3, stride=2, pad=1), Layer("relu", "relu1"),
        zoo.conv("conv2", 8, 3, stride=2, pad=1), Layer("relu", "relu2"),
        Layer("flatten", "flatten"), Layer("linear", "fc", out_channels=10)])
    inputs, labels, params = random_data(network, 4, 22)
    mapping, fast = _chain(network, "ecp5-85:2", inputs, labels, params, batch=2)
    assert [[(s.layer, s.mode, s.in_range, s.stride) for s in node.slices] for node in mapping.nodes] == [
        [("conv1", "ocp", (0, 1), 2), ("conv2", "icp", (0, 2), 2)], [("conv2", "icp", (2, 4), 2), ("fc", "icp", (0, 32), 1)]]
    reference = train_chain(network, mapping, inputs, labels, params)
    assert fast.cycles == reference.cycles == 773  # 806 with fc's input as one word, 1336 with the update one word a cycle
    assert fast.sample_starts == reference.sample_starts
    for layer, (weights, bias) in reference.params.items():
        np.testing.assert_array_equal(fast.params[layer][0], weights)
        np.testing.assert_array_equal(fast.params[layer][1], bias)
