"""Chained nodes train the tiny CNN bit-exactly (issue 5): one node, chains of 3 and 4 nodes,
folded engines, fully connected rows kept on another node (weight balancing)."""

import gc
from dataclasses import replace

import numpy as np
import pytest
from amaranth.hdl import Module

from hw.node import Node, connect_chain
from mapping import golden, mapper, numerics, zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network
from mapping.nodeconfig import WeightBlock
from sim.chain import cycles_per_sample, report, train_chain

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


def _train(cluster, seed, stall=0.0, derive=None, **options):
    """Map tiny onto ``cluster`` (then ``derive(mapping)``, if given), train, compare bit for bit."""
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(cluster), batch=BATCH, lr=LR, **GENERATOR_OPTIONS, **options)
    if derive is not None:
        mapping = derive(mapping)
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
    layout = [[(s.layer, s.mode, s.in_range) for s in node.slices] for node in mapping.nodes]
    # conv1 by OCP; node 0 holds conv1 and the start of conv2, split by ICP over three
    # nodes (so conv2's input is bypassed across two links); fc on node 3 folds its 32
    # input channels over four tiles of one CE.
    assert layout == [[("conv1", "ocp", (0, 1)), ("conv2", "icp", (0, 1))], [("conv2", "icp", (1, 3))],
                      [("conv2", "icp", (3, 4))], [("fc", "icp", (0, 32))]]
    fc = mapping.nodes[3].slices[0]
    assert (fc.fp.ces, fc.fp.tiles) == (1, 4)  # 10 groups x 8 passes: 80 cycles per sample


def test_folded_conv_and_fc_engines_train_bit_exact():
    # 40 multipliers per node: conv2's 4 input channels fold over one 3x3 tile (4 passes),
    # fc's 32 over one tile (32 passes)
    mapping = _train("ecp5-85:3", seed=4, max_multipliers=40)
    engines = [[(s.layer, s.in_channels, s.fp.ces, s.fp.tiles) for s in node.slices] for node in mapping.nodes]
    assert engines == [[("conv1", 1, 1, 1)], [("conv2", 4, 1, 1)], [("fc", 32, 1, 1)]]


def _hosted(mapping):
    return [(b.owner, b.host, b.layer, b.out_range) for node in mapping.nodes for b in node.hosted]


def test_fc_rows_hosted_on_the_upstream_node_train_bit_exact():
    # With a tenth of the block RAM, node 2 (end of conv2 and fc) keeps fc's rows 8..9 in
    # node 1's BPRAM: node 1 streams them to node 2's FP and EB engines every sample and
    # sums their gradients in its BGB.
    mapping = _train("ecp5-85:3", seed=5, bram_fraction=0.1)
    assert _hosted(mapping) == [(2, 1, "fc", (8, 10))]
    assert [s.layer for s in mapping.nodes[2].slices] == ["conv2", "fc"]


def test_fc_rows_hosted_two_links_away_train_bit_exact_with_stalls():
    # With a twentieth of the block RAM, only node 0 has room for node 2's fc rows 8..9:
    # node 1 relays the rows forward and their gradients back, every link stalling 30%.
    mapping = _train("ecp5-85:3", seed=10, stall=0.3, bram_fraction=0.05)
    assert _hosted(mapping) == [(2, 0, "fc", (8, 10))]
    assert [[(b.owner, b.host) for b in node.relays] for node in mapping.nodes] == [[], [(2, 0)], []]


def test_host_that_computes_the_same_layer_trains_bit_exact():
    # fc is split by ICP over nodes 2 and 3; node 3 keeps its rows 1..9 on node 2, which
    # computes fc's first input channel itself.
    mapping = _train(CHAIN, seed=6, bram_fraction=0.06)
    assert _hosted(mapping) == [(3, 2, "fc", (1, 10))]
    assert [[(s.layer, s.in_range) for s in mapping.nodes[n].slices] for n in (2, 3)] == [
        [("fc", (0, 1))], [("fc", (1, 32))]]


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")  # refused before elaboration
def test_a_chain_without_the_host_of_a_nodes_rows_is_refused():
    mapping = map_network(zoo.tiny(), parse_cluster(CHAIN), batch=BATCH, lr=LR, bram_fraction=0.06,
                          **GENERATOR_OPTIONS)
    with pytest.raises(ValueError) as error:
        connect_chain(Module(), [Node(mapping.nodes[3])])
    assert str(error.value) == ("weight-balancing ports with no partner on the next node towards their "
                                "destination: "
                                "[(3, 'bp7n3_h2_eb_in'), (3, 'bp7n3_h2_fp_in'), (3, 'bp7n3_h2_grad_out')]")
    del error
    gc.collect()  # the unelaborated node and module warn here, under this test's filter


def _rebalanced(*blocks):
    """A derive: the mapping with its WeightBlocks replaced by ``blocks`` (owner, host, rows)
    of fully connected rows, placed as the mapper places its own (``_with_blocks``). No tiny
    mapping hosts rows downstream of their owner (the balancer takes the downstream node
    only where the upstream one has no room) or on two hosts, so these derive them."""
    def derive(mapping):
        bare = [replace(node, hosted=(), relays=(), slices=tuple(replace(s, remote_weights=()) for s in node.slices))
                for node in mapping.nodes]
        placed = []
        for owner, host, rows in blocks:
            fc = next(s for s in bare[owner].slices if s.kind == "fc")
            placed.append(WeightBlock(owner=owner, host=host, layer=fc.layer, in_range=fc.in_range, out_range=rows,
                                      words=(rows[1] - rows[0]) * fc.in_channels))
        return replace(mapping, nodes=tuple(mapper._with_blocks(bare, placed)))
    return derive


@pytest.mark.parametrize("rows", [(5, 10), (0, 10)])
def test_rows_hosted_downstream_and_upstream_at_once_train_bit_exact(rows):
    # Nodes 2 and 3 each keep fc rows on the other: 3's rows 1..9 on node 2 (the mapper's
    # choice) and 2's rows 5..9, or all of them (no LPRAM or LGB left on node 2), on node 3.
    mapping = _train(CHAIN, seed=8, bram_fraction=0.06, derive=_rebalanced((3, 2, (1, 10)), (2, 3, rows)))
    assert _hosted(mapping) == [(3, 2, "fc", (1, 10)), (2, 3, "fc", rows)]


def test_rows_of_one_slice_on_two_hosts_train_bit_exact():
    # Node 3 keeps fc rows 1..4 on node 1 (two links away: node 2 relays them) and rows 5..9
    # on node 2, which computes fc's input channel 0 itself.
    mapping = _train(CHAIN, seed=11, bram_fraction=0.06, derive=_rebalanced((3, 2, (5, 10)), (3, 1, (1, 5))))
    assert _hosted(mapping) == [(3, 1, "fc", (1, 5)), (3, 2, "fc", (5, 10))]
    assert [b.out_range for b in mapping.nodes[2].relays] == [(1, 5)]


@pytest.mark.slow
def test_four_node_chain_with_random_stalls_on_every_link_stays_bit_exact():
    _train(CHAIN, seed=3, stall=0.3)


@pytest.mark.slow
def test_balanced_chain_runs_at_its_bottleneck_rate_in_steady_state():
    # Node 3's fc engines (10 groups x 16 passes) set the rate: 160 cycles per sample. The
    # first ~20 samples enter at the 128 of nodes 0-1 until the buffers in front of node 3
    # fill, so the rate is read over the second half of 40 samples in one mini-batch.
    # Without the EB rounding point taking beats with their first chunk (hw/map_rounder.py)
    # and the FIFO in front of the pooling SFU's errors, the chain settled at 200 and 176.
    network, samples = zoo.tiny(), 40
    mapping = map_network(network, parse_cluster(CHAIN), batch=samples, lr=LR, bram_fraction=0.06,
                          **GENERATOR_OPTIONS)
    inputs, labels, params = _data(network, samples, 9)
    run = train_chain(network, mapping, inputs, labels, params, deadline=2_000_000)
    _assert_bit_exact(run, params)
    assert [cycles_per_sample(run, n) for n in range(4)] == [160] * 4
    assert mapping.nodes[3].cycles_per_sample == 160


@pytest.mark.slow
def test_hosted_rows_with_random_stalls_on_every_link_stay_bit_exact():
    _train("ecp5-85:3", seed=7, stall=0.3, bram_fraction=0.1)
