"""The generator's mappings (mapper.GENERATOR_OPTIONS) are planned with the memories hw/
builds (mapping/memories.py), so every node fits its block RAM as built. Planned with the
coarser model of mapping/balance.py they did not always: lenet on four ECP5-85s at a fifth
of their block RAM built 57 blocks on node 3, which had 41."""

from dataclasses import replace

import pytest

from mapping import memories, zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import GENERATOR_OPTIONS, map_network
from mapping.network import Layer, infer
from mapping.zoo import conv

BRAM_FRACTIONS = (0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.9)
# lenet over budget, planned with the coarse model: ecp5-85:2+ecp5-45:2 at 0.2, ecp5-85:3
# at 0.1, ecp5-85:4 at 0.1 and 0.2, ecp5-45:4 at 0.3, ecp5-45:2+ecp5-25:3 at 0.2
CLUSTERS = ("ecp5-85:2+ecp5-45:2", "ecp5-85:3", "ecp5-85:4", "ecp5-45:4", "ecp5-25:6", "ecp5-85:1",
            "ecp5-45:2+ecp5-25:3")


def generator_mapping(network, cluster, bram_fraction, update="stop"):
    return map_network(zoo.NETWORKS[network](), parse_cluster(cluster), bram_fraction=bram_fraction,
                       network_name=network, **{**GENERATOR_OPTIONS, "update": update})


# Of the BRAM_FRACTIONS, how many map (stopping the engines, not stopping them): an ECP5-25
# has too few multipliers for conv2's three engines (27 > 25), lenet's last node on one too
# few LUTs; the weight copies of the update that does not stop the engines need more block
# RAM, so fewer fractions map. Tiny maps at the smallest fraction once its fc may stream from
# the Versa's DRAM (GENERATOR_OPTIONS: fc_weights "auto", mini-batch 1): on ecp5-45:4 it does;
# on ecp5-45:2+ecp5-25:3 the partition then found keeps fc on the ECP5-25s, on chip.
# Taking the pixels of the 2x2 map it flattens, tiny's fc keeps them in a narrow, deep
# Act-RAM (block RAM where the whole flattened input was one shallow, wide word in distributed
# RAM): with the overlapped update one fraction fewer maps on ecp5-85:1 and on
# ecp5-45:2+ecp5-25:3.
MAPPED = {
    ("tiny", "ecp5-85:2+ecp5-45:2"): (9, 8), ("tiny", "ecp5-85:3"): (9, 8), ("tiny", "ecp5-85:4"): (9, 8),
    ("tiny", "ecp5-45:4"): (9, 6), ("tiny", "ecp5-25:6"): (0, 0), ("tiny", "ecp5-85:1"): (9, 7),
    ("tiny", "ecp5-45:2+ecp5-25:3"): (9, 5),
    ("lenet-digits", "ecp5-85:2+ecp5-45:2"): (7, 5), ("lenet-digits", "ecp5-85:3"): (7, 5),
    ("lenet-digits", "ecp5-85:4"): (8, 5), ("lenet-digits", "ecp5-45:4"): (2, 0),
    ("lenet-digits", "ecp5-25:6"): (0, 0), ("lenet-digits", "ecp5-85:1"): (3, 2),
    ("lenet-digits", "ecp5-45:2+ecp5-25:3"): (0, 0),
}


# With the update that does not stop the engines (three copies of the weights) too.
@pytest.mark.parametrize("update", ["stop", "overlapped"], ids=["stalled", "overlapped"])
@pytest.mark.parametrize("network", ["tiny", "lenet-digits"])
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_node_of_a_generator_mapping_fits_its_block_ram_as_built(network, cluster, update):
    mapped = 0
    for bram_fraction in BRAM_FRACTIONS:
        try:
            mapping = generator_mapping(network, cluster, bram_fraction, update)
        except SpecError:
            continue
        mapped += 1
        usable = mapping.summary["usable_blocks"]
        for node in mapping.nodes:
            built = memories.node_bram_blocks(node)
            assert built == node.estimate.bram_blocks <= usable[node.index], (bram_fraction, node.index)
    assert mapped == MAPPED[network, cluster][update == "overlapped"]


def test_lenet_on_four_ecp5_85s_at_a_fifth_of_their_block_ram():
    # Planned with the coarse model, node 3 (conv2's last input channel, fc1 and fc2) kept
    # fc2's rows 4..9 on node 2 and built 57 blocks of its 41. Planned as built, it keeps
    # fc1's rows 4..31 on the three nodes before it, the nearest first as each fills up
    # (nodes 1 and 2 relay node 0's streams), and builds 19.
    mapping = generator_mapping("lenet-digits", "ecp5-85:4", 0.2)
    assert [[(s.layer, s.in_range, s.fp.ces, s.fp.tiles) for s in n.slices] for n in mapping.nodes] == [
        [("conv1", (0, 1), 3, 1), ("conv2", (0, 1), 2, 1)], [("conv2", (1, 3), 2, 2)],
        [("conv2", (3, 5), 2, 2)], [("conv2", (5, 6), 2, 1), ("fc1", (0, 64), 1, 16), ("fc2", (0, 32), 2, 2)]]
    assert sorted((b.owner, b.host, b.layer, b.out_range) for n in mapping.nodes for b in n.hosted) == [
        (3, 0, "fc1", (4, 24)), (3, 1, "fc1", (24, 28)), (3, 2, "fc1", (28, 32))]
    assert [[b.host for b in n.relays] for n in mapping.nodes] == [[], [0], [1, 0], []]
    assert [n.estimate.bram_blocks for n in mapping.nodes] == [41, 4, 4, 19]
    assert mapping.summary["usable_blocks"] == [41, 41, 41, 41]


def test_generator_mappings_keep_fully_connected_weights_in_dram_at_mini_batch_1_only():
    with pytest.raises(SpecError) as error:
        map_network(zoo.tiny(), parse_cluster("vc709:2"), batch=2, fc_weights="dram", buildable_balance=True)
    assert str(error.value) == (
        "network 'tiny' on cluster 'vc709:2': the hardware generator keeps fully connected weights in DRAM at "
        "mini-batch 1 without the overlapped update, not at mini-batch 2: keep them on chip (fc_weights 'chip')")
    mapping = map_network(zoo.tiny(), parse_cluster("vc709:2"), fc_weights="dram", buildable_balance=True)
    fc = [s for node in mapping.nodes for s in node.slices if s.kind == "fc"]
    assert fc and all(s.weights_offchip and s.lgb_words == 0 for s in fc)
    assert [memories.node_bram_blocks(node) for node in mapping.nodes] == [n.estimate.bram_blocks for n in mapping.nodes]


@pytest.mark.parametrize("channels, grad_bits, refused", [(4096, 48, True), (4095, 48, False), (4095, 16, False)])
def test_a_pixel_wider_than_an_amaranth_value_is_refused_before_partitioning(channels, grad_bits, refused):
    """A layer's pixel travels as one stream word: 4,096 16-bit channels are 65,536 bits, one
    more than an Amaranth value holds (elaboration failed on an assertion), whatever the cut."""
    from mapping.numerics import Formats
    net = infer("wide", (channels, 1, 1), [Layer("flatten", "flatten"), Layer("linear", "fc", out_channels=10)])
    run = lambda: map_network(net, parse_cluster("vc709:1"), formats=Formats(grad_bits=grad_bits),  # noqa: E731
                              **GENERATOR_OPTIONS)
    if not refused:
        bits, _ = memories.widest_value(run().nodes[0].slices[0], grad_bits)
        assert bits <= memories.WIDEST_VALUE_BITS
        return
    with pytest.raises(SpecError, match=r"^network 'wide' on cluster 'vc709:1': layer 'fc': its input of 4,096 "
                                        r"channels would travel as one stream word of 65,536 bits, beyond the "
                                        r"65,535 bits of an Amaranth value \(the generator streams only fully "
                                        r"connected outputs and EB windows in chunks\)$"):
        run()


def test_a_slice_whose_memory_row_is_wider_than_an_amaranth_value_is_refused_before_elaboration():
    """512 input channels pass as a stream word (8,192 bits), but a slice that takes them all
    with a 3x3 kernel keeps windows of 4,608 words and LGB rows of 1,539 48-bit sums (171 input
    channels x 3 x 3 a pass), 73,872 bits: refused by name, its first such memory."""
    net = infer("wide-window", (512, 4, 4), [conv("conv", 8, 3, pad=1), Layer("relu", "relu"),
                                             Layer("flatten", "flatten"), Layer("linear", "fc", out_channels=10)])
    with pytest.raises(SpecError, match=r"^network 'wide-window' on cluster 'vc709:1': node 0: layer 'conv' \(icp "
                                        r"slice, input channels 0\.\.511\): its lgb would be 73,872 bits wide, beyond "
                                        r"the 65,535 bits of an Amaranth value \(the generator streams only fully "
                                        r"connected outputs and EB windows in chunks\)$"):
        map_network(net, parse_cluster("vc709:1"), **GENERATOR_OPTIONS)


def _pooled(pool):
    return infer("pooled", (1, 9, 9), [conv("conv1", 4, 3, pad=1), Layer("relu", "relu1"),
                                       Layer("maxpool", "pool1", **pool), Layer("flatten", "flatten"),
                                       Layer("linear", "fc", out_channels=4)])


def test_generator_mappings_plan_the_rows_of_an_overlapping_max_pool():
    """A 3x3 stride-2 pool over conv1's 9 x 9 output builds two pooled rows of 4 at once: two
    band and two replay rows (hw/node/sfu.OverlappingPoolSFU), one row of errors in front."""
    mapping = map_network(_pooled(dict(kernel=3, stride=2)), parse_cluster("ecp5-85:2"), **GENERATOR_OPTIONS)
    for conv1 in (s for n in mapping.nodes for s in n.slices if s.layer == "conv1"):
        oc = conv1.out_channels
        sfu = {m.name: (m.width, m.depth) for m in memories.slice_memories(conv1)
               if "sfu" in m.name and "rounder" not in m.name}
        assert sfu == {"sfu.masks": (oc * 5, memories.sfu_samples_in_flight(conv1) * 4 * 4),
                       "sfu.band0": (oc * 20, 4), "sfu.band1": (oc * 20, 4),
                       "sfu.replay0": (oc * 21, 4), "sfu.replay1": (oc * 21, 4), "sfu_errors": (oc * 16, 4)}


@pytest.mark.parametrize("pool, message", [
    (dict(kernel=3, stride=2, padding=1), r"max-pool padding 1 is not supported by the generator's SFU "
                                          r"\(only padding 0\)"),
    (dict(kernel=2, stride=3), r"max-pool stride 3 is not supported with kernel 2 by the generator's SFU "
                               r"\(only stride <= kernel\)"),
])
def test_generator_mappings_refuse_the_max_pools_the_sfu_does_not_build(pool, message):
    with pytest.raises(SpecError, match=rf"^network 'pooled' on cluster 'ecp5-85:2': layer 'conv1': {message}$"):
        map_network(_pooled(pool), parse_cluster("ecp5-85:2"), **GENERATOR_OPTIONS)


def test_generator_mappings_keep_on_chip_only_the_staging_fifos_of_queues_in_dram():
    """With the activations in DRAM hw/ builds each Act-RAM and SFU mask FIFO as two FIFOs of
    DRAM_STAGING_BEATS beats of its width (memories._queue); the mapping is planned with them
    (balance.ExactMemory), so every node's block RAM is what hw/ builds."""
    mapping = map_network(zoo.tiny(), parse_cluster("ecp5-45:4"), act_storage="dram", **GENERATOR_OPTIONS)
    queues = 0
    for node in mapping.nodes:
        assert memories.node_bram_blocks(node) == node.estimate.bram_blocks
        for s in node.slices:
            assert s.act_storage == "dram"
            built = {m.name: (m.width, m.depth) for m in memories.slice_memories(s)}
            on_chip = {m.name: (m.width, m.depth) for m in memories.slice_memories(replace(s, act_storage="chip"))}
            for name, width, depth, _ in memories.dram_queues(s):
                assert on_chip[name] == (width, depth) and name not in built
                assert built[f"{name}.to_dram"] == built[f"{name}.from_dram"] == (width, memories.DRAM_STAGING_BEATS)
                queues += 1
    assert queues == 7  # an Act-RAM on each of the 5 slices, masks on conv1's and conv2's last
