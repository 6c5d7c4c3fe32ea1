"""mapping/memories.py lists exactly the memories the generator builds, with the ram_style
its block-RAM count assumes; synthesis then agrees with the mapping's estimate."""

from collections import Counter
from dataclasses import replace

import pytest
from amaranth.hdl import Fragment, Shape
from amaranth.hdl._mem import MemoryInstance

from hw.node.slice_unit import check_buildable
from hw.node.top import Node
from mapping import memories, zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import map_network
from sim.chain import STOPPING_UPDATE_OPTIONS
from mapping.nodeconfig import Engine, Pool, Training
from mapping.resources import ram_style
from sim.helpers import WIDE_VECTOR_WORDS, layer_slice, micro_overlap, wide_fc, wide_vector


def built_memories(fragment):
    """(width, depth, ram_style) of every writable memory under ``fragment``."""
    found = []
    for sub, *_ in fragment.subfragments:
        if isinstance(sub, MemoryInstance):
            if sub._write_ports:  # ROMs (line buffer step tables) are logic, not RAM
                found.append((Shape.cast(sub._data.shape).width, sub._data.depth,
                              sub._attrs.get("ram_style")))
        found += built_memories(sub)
    return found


# The fourth has a grouped layer (the bias errors' FIFO of its last slice, an SFU over every
# group's channels); the last three keep fully connected rows on other nodes (BPRAM / BGB
# there), the last two also two or three links away (relay FIFOs on the nodes in between).
MAPPINGS = [("tiny", "ecp5-85:2+ecp5-45:2", 0.9), ("tiny", "vc709:1", 0.9), ("lenet-digits", "ecp5-85:4", 0.9),
            ("tiny-grouped", "ecp5-85:4", 0.9),
            ("tiny", "ecp5-85:3", 0.06), ("tiny", "ecp5-85:2+ecp5-45:2", 0.065), ("tiny", "ecp5-85:3", 0.065)]


@pytest.mark.parametrize("network, cluster, bram_fraction", MAPPINGS)
def test_inventory_lists_every_memory_the_generator_builds(network, cluster, bram_fraction):
    mapping = map_network(zoo.NETWORKS[network](), parse_cluster(cluster), batch=2, bram_fraction=bram_fraction,
                          **STOPPING_UPDATE_OPTIONS)
    assert any(n.hosted for n in mapping.nodes) == (bram_fraction < 0.9)
    assert_inventory(mapping)


def test_inventory_of_a_node_with_fc_weights_in_dram():
    """No LPRAM and no LGB: the rows' two staging FIFOs (hw/memory/dram_weights.py)."""
    mapping = map_network(zoo.micro(), parse_cluster("lfe5um5g-45f:2"), batch=1, max_multipliers=24,
                          **{**STOPPING_UPDATE_OPTIONS, "fc_weights": "dram"})
    assert_inventory(mapping)
    fc = mapping.nodes[1].slices[0]
    assert [(m.name, m.width, m.depth) for m in memories.slice_memories(fc) if "dram" in m.name or "lpram" in m.name] == [
        ("dram_weights.to_dram", 96, memories.DRAM_STAGING_BEATS), ("dram_weights.from_dram", 96, memories.DRAM_STAGING_BEATS)]


def assert_inventory(mapping):
    for config in mapping.nodes:
        built = Counter(built_memories(Fragment.get(Node(config, family=config.family), None)))
        listed = Counter((m.width, m.depth, ram_style(m.depth, config.family))
                         for m in memories.node_memories(config))
        assert built == listed, f"node {config.index}: built {built - listed}, listed {listed - built}"


def test_inventory_of_a_wide_fc_node_with_its_deep_corner_turns():
    """One memory of two samples' passes for each of FP's, PG's and EB's corner turns."""
    mapping = map_network(wide_fc(), parse_cluster("ecp5-85:1"), batch=1, **STOPPING_UPDATE_OPTIONS)
    fc = mapping.nodes[0].slices[1]
    assert (fc.in_channels, fc.fp.tiles, memories.deep_fc_stores(fc)) == (1152, 6, True)
    assert [(m.name, m.width, m.depth) for m in memories.slice_memories(fc) if "_store" in m.name] == [
        ("fp_store.passes", 96, 384), ("pg_store.passes", 96, 384), ("eb_store.passes", 96, 384)]
    assert_inventory(mapping)


@pytest.mark.parametrize("cluster, options", [
    ("ecp5-85:3", {"max_multipliers": 80}),
    ("lfe5um5g-45f:3", {"max_multipliers": 50, "fc_weights": "dram", "act_storage": "dram"})])
def test_inventory_of_a_vector_travelling_as_a_map(cluster, options):
    """fc1's SFU turns its beats of P outputs into the 8 x 1 x 3 map's pixels and the error
    pixels back (a memory per pass of P words: G of them), and each of fc1's slices replays its
    errors for EB from two samples of G beats."""
    mapping = map_network(wide_vector(), parse_cluster(cluster), batch=1, vector_words=WIDE_VECTOR_WORDS,
                          **{**STOPPING_UPDATE_OPTIONS, **options})
    fc1 = [s for node in mapping.nodes for s in node.slices if s.layer == "fc1"]
    assert len(fc1) == 3 and {s.out_map for s in fc1} == {(8, 1, 3)}
    p, groups = fc1[-1].fp.ces, -(-24 // fc1[-1].fp.ces)
    assert [(m.name, m.width, m.depth) for m in memories.slice_memories(fc1[-1])
            if m.name.split(".")[0] in ("eb_replay", "out_store", "err_store")] == (
        [("eb_replay", 16 * p, 2 * groups)] + [(f"out_store.pass_{i}", 16 * p, 2) for i in range(groups)]
        + [(f"err_store.pass_{i}", 16 * p, 2) for i in range(groups)])
    assert_inventory(mapping)


@pytest.mark.parametrize("act_storage", ["chip", "dram"])
def test_inventory_of_a_node_with_an_overlapping_max_pool(act_storage):
    """Its SFU's two band and two replay rows and the pooled row of errors in front; with the
    samples in flight in DRAM, the two staging FIFOs of the Act-RAM and of the mask FIFO."""
    mapping = map_network(micro_overlap(), parse_cluster("lfe5um5g-45f:2"), batch=2, act_storage=act_storage,
                          **STOPPING_UPDATE_OPTIONS)
    assert [s.pool for s in mapping.nodes[0].slices] == [Pool(3, 2)]
    assert_inventory(mapping)
    staged = [m.name for m in memories.node_memories(mapping.nodes[0]) if m.depth == memories.DRAM_STAGING_BEATS]
    assert staged == ([] if act_storage == "chip" else
                      ["act_ram.to_dram", "act_ram.from_dram", "sfu.masks.to_dram", "sfu.masks.from_dram"])


def test_slice_unit_refuses_engines_of_different_shapes_in_one_line():
    s = replace(layer_slice(ces=2, tiles=2), pg=Engine(ces=1, tiles=2, kernel=3))
    with pytest.raises(SpecError) as refusal:
        check_buildable(s, Training(batch=1, lr=0.1, lr_constant=3000, bias_lr_constant=3000))
    assert str(refusal.value) == (
        "layer 'conv' (icp slice, input channels 0..2): engines FP 2 x 2, EB 2 x 2, PG 1 x 2 tiles; "
        "the generator builds FP = PG = P x b and EB = b x P with b at most 3")
