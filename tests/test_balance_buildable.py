"""Weight balancing in the form the hardware generator builds (mapper.GENERATOR_OPTIONS):
rows of fully connected slices, on the nearest node with room, each host's rows one range, the
local rows whole engine groups; and the traffic and timing of FC rows kept on another node."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from mapping import balance, mapper, memories, perf, zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import GENERATOR_OPTIONS, map_network
from mapping.network import Layer, infer
from mapping.nodeconfig import Mapping
from mapping.partition import budgets, partition, plan_layers

HEAD = "and the hardware generator balances weights only as rows of fully connected layers"


def blocks_of(m):
    return [(b.owner, b.host, b.layer, b.in_range, b.out_range, b.words) for n in m.nodes for b in n.hosted]


def assert_buildable(m):
    """Rules 1-4 of the generator's weight balancing, on every slice with remote rows."""
    for node in m.nodes:
        for s in node.slices:
            if not s.remote_weights:
                continue
            assert s.kind == "fc"
            for host in {b.host for b in s.remote_weights}:
                mine = [b for b in s.remote_weights if b.host == host]
                between = range(min(host, node.index) + 1, max(host, node.index))
                assert [n.index for n in m.nodes if set(mine) <= set(n.relays)] == list(between)
                rows = sum(b.out_range[1] - b.out_range[0] for b in mine)
                lo, hi = min(b.out_range[0] for b in mine), max(b.out_range[1] for b in mine)
                assert hi - lo == rows  # one range per host
                assert (lo - s.out_range[0]) % s.fp.ces == 0  # starting at an engine group
            remote = sum(b.out_range[1] - b.out_range[0] for b in s.remote_weights)
            assert min(b.out_range[0] for b in s.remote_weights) == s.out_range[1] - remote  # contiguous top rows
            assert memories.remote_rows_problem(s.remote_weights, s) is None  # the rule hw/ enforces


def tiny(spec, bram_fraction, **options):
    return map_network(zoo.tiny(), parse_cluster(spec), batch=3, lr=0.05, bram_fraction=bram_fraction,
                       **options)


def test_generator_options_balance_fc_rows_onto_the_adjacent_node():
    assert GENERATOR_OPTIONS == {"fc_weights": "auto", "buildable_balance": True, "update": "auto"}
    m = tiny("ecp5-85:3", 0.06, **{**GENERATOR_OPTIONS, "update": "stop"})
    assert blocks_of(m) == [(2, 1, "fc", (0, 32), (2, 10), 256)]
    assert_buildable(m)
    assert Mapping.from_json(m.to_json()) == m


def test_fc_rows_move_on_to_the_next_host_when_one_is_full():
    m = tiny("ecp5-85:2+ecp5-45:2", 0.04, **GENERATOR_OPTIONS)
    # node 3 computes fc whole; it keeps fc rows 1..8 on node 1 (node 2 relays them) and, node
    # 1 full, row 9 on node 2
    assert [[(s.layer, s.in_range) for s in n.slices] for n in m.nodes] == [
        [("conv1", (0, 1)), ("conv2", (0, 1))], [("conv2", (1, 3))], [("conv2", (3, 4))], [("fc", (0, 32))]]
    assert blocks_of(m) == [(3, 1, "fc", (0, 32), (1, 9), 256), (3, 2, "fc", (0, 32), (9, 10), 32)]
    assert [[(b.owner, b.host) for b in n.relays] for n in m.nodes] == [[], [], [(3, 1)], []]
    assert_buildable(m)
    # Block RAM the generator builds (exact inventory): node 3 would need 9 of its 4 usable
    # blocks with every row local; balanced it needs 4 (its Act-RAM: 20 pixels of the 8
    # channels fc flattens, deeper than distributed RAM), its hosts 8 of 8 and 4 of 4.
    assert [n.estimate.bram_blocks for n in m.nodes] == [3, 8, 4, 4]
    assert m.summary["usable_blocks"] == [8, 8, 4, 4]
    local = replace(m.nodes[3], slices=tuple(replace(s, remote_weights=()) for s in m.nodes[3].slices))
    assert memories.node_bram_blocks(local) == 9
    assert Mapping.from_json(m.to_json()) == m


def test_rows_no_node_has_room_for_are_refused():
    with pytest.raises(SpecError) as error:
        lenet("ecp5-85+ecp5-25+ecp5-25", 0.14, **GENERATOR_OPTIONS)
    assert str(error.value) == (
        f"network 'lenet-digits' on cluster 'ecp5-85+ecp5-25+ecp5-25': node 0 (lfe5um5g-85f) needs 30 "
        f"blocks of 18 Kb but has 29 usable, {HEAD}: no other node has room for one more row of layer "
        f"'fc1' (48 16-bit weights and their 48-bit gradient sums)")


def test_conv_rows_never_move():
    # unrestricted, node 1 keeps its conv2 rows on node 0
    plain = lenet("ecp5-45:4", 0.16)
    assert blocks_of(plain) == [(1, 0, "conv2", (0, 4), (4, 16), 432)]
    # the generator's mapping keeps every conv weight local: then no partition holds lenet
    with pytest.raises(SpecError) as error:
        lenet("ecp5-45:4", 0.16, **GENERATOR_OPTIONS)
    assert str(error.value) == lenet_too_small_on_four_ecp5_45(blocks=17)
    # tiny on the same chain at half the share: fc rows only, onto the node next door (with the
    # stopping update: auto takes the overlapped one here, whose mapping moves no rows)
    m = tiny("ecp5-45:4", 0.08, **{**GENERATOR_OPTIONS, "update": "stop"})
    assert blocks_of(m) == [(3, 2, "fc", (0, 32), (1, 10), 288)]
    assert_buildable(m)


def test_a_node_only_conv_rows_would_relieve_is_refused():
    # The partition of lenet-digits on ecp5-45:4 at bram_fraction 0.16 the unrestricted mapping
    # (fc weights on chip) settles on: node 1 holds only conv2, whose rows the unrestricted
    # balancer moves to node 0. Both balance with the unrestricted mapping's memory model:
    # only which rows may move differs.
    plans = plan_layers(zoo.lenet_digits())
    node_budgets = budgets(parse_cluster("ecp5-45:4"), dsp_fraction=0.9, bram_fraction=0.16)
    stale = {"conv1": 7, "conv2": 5, "fc1": 2, "fc2": 2}

    def family_of(node):
        return node_budgets[node].device.family

    def run(buildable):
        part = partition(plans, node_budgets, samples_held=stale, at_least=1200, describe=lambda: "lenet",
                         batch=3, link_latency_cycles=balance.LINK_LATENCY_CYCLES, offchip_fc=False)
        assert [(sl.node, sl.plan.name) for sl in part.slices if sl.node == 1] == [(1, "conv2")]
        memory = mapper._memory(part.slices, stale, family_of, 3, exact=False)
        return balance.balance(part.slices, node_budgets, memory, lambda: "lenet", buildable=buildable)

    blocks, _ = run(False)
    assert [(b.owner, b.host, b.layer, b.out_range) for b in blocks] == [
        (1, 0, "conv2", (4, 16)), (3, 1, "fc2", (0, 10)), (3, 1, "fc1", (21, 32)), (3, 0, "fc1", (4, 21))]
    with pytest.raises(SpecError) as error:
        run(True)
    assert str(error.value) == (
        f"lenet: node 1 (lfe5um5g-45f) needs 18 blocks of 18 Kb but has 17 usable, {HEAD}: the rows that "
        f"would free memory are of conv layer 'conv2', which would have to be used weight-stationary from "
        f"another node, an engine mode the generator does not build")


def test_moves_leave_whole_engine_groups():
    sl = SimpleNamespace(out_channels=10, remote_rows=0)
    assert list(balance._moves(sl, 4)) == [2, 6, 10]  # 8 or 4 or 0 rows stay local
    sl.remote_rows = 2
    assert list(balance._moves(sl, 4)) == [4, 8]
    assert list(balance._moves(sl, 1)) == list(range(1, 9))  # unrestricted: any count


def test_fc_rows_stream_twice_and_send_48_bit_gradients_back():
    m = tiny("ecp5-85:3", 0.06, **{**GENERATOR_OPTIONS, "update": "stop"})
    (block,) = m.nodes[1].hosted
    # link 1 -> 2: conv2's bypassed inputs of channels 2:4 (4x4) and partial sums of its
    # 8x4x4 outputs, the label, and the FC rows once for FP and once for EB
    assert m.nodes[1].link_bytes_forward == 2 * 16 * 2 + 8 * 16 * 6 + 2 + block.words * 2 * 2 == 1858
    # link 2 -> 1: conv2's output errors and input errors of channels 2:4, the rows' gradients
    assert m.nodes[2].link_bytes_backward == 8 * 16 * 2 + 2 * 16 * 2 + block.words * 6 == 1856
    # no extra period for FC rows streamed in: fc's FP and PG are 2 samples apart, as without
    fc = next(s for s in m.nodes[2].slices if s.layer == "fc")
    assert fc.fp_stale == 2


def test_unrestricted_fc_rows_cross_every_link_to_the_owner():
    m = tiny("ecp5-85:3", 0.05, fc_weights="chip")  # fc rows of node 2 on node 0
    (block,) = m.nodes[0].hosted
    assert block.words == 64
    # forward: conv1's pooled 4x4x4 output (link 0) or conv2's 8x2x2 (link 1), the label,
    # the rows twice; backward: the same activations' errors and the rows' gradients
    assert [n.link_bytes_forward for n in m.nodes] == [128 + 2 + 64 * 4, 64 + 2 + 64 * 4, 0]
    assert [n.link_bytes_backward for n in m.nodes] == [0, 128 + 64 * 6, 64 + 64 * 6]


def test_fc_rows_of_a_layer_without_eb_stream_once():
    net = infer("fc-first", (2, 2, 2), [Layer("flatten", "flatten"), Layer("linear", "fc1", out_channels=4),
                                        Layer("relu", "relu1"), Layer("linear", "fc2", out_channels=3)])
    first, second = plan_layers(net)
    conv = plan_layers(zoo.tiny())[1]
    assert (first.needs_eb, second.needs_eb) == (False, True)
    assert [perf.remote_streams(p) for p in (first, second, conv)] == [1, 2, 1]


def lenet(spec, bram_fraction, **options):
    return map_network(zoo.lenet_digits(), parse_cluster(spec), batch=3, lr=0.05, bram_fraction=bram_fraction,
                       **options)


CONV_LOCAL = ("with every conv weight on the node that uses it (the hardware generator moves only rows of "
              "fully connected layers to other nodes)")


def lenet_too_small_on_four_ecp5_45(blocks):
    """The generator mapping's refusal of lenet on four ECP5-45s with ``blocks`` usable each:
    with conv2's weights all local, no partition gets past its fifth input channel."""
    return (f"network 'lenet-digits' on cluster 'ecp5-45:4': cluster too small: {CONV_LOCAL}, its 4 nodes "
            f"hold the network only up to input channel 4 of 6 of layer 'conv2' at any pipeline period "
            f"(lfe5um5g-45f: {blocks} usable blocks of 18 Kb, 64 multipliers)")


def test_partition_counts_conv_weights_in_full_for_the_generator():
    # Unrestricted, the partitioner plans the weights with only the width of their memories
    # where rows could move: node 1 holds more fc2 rows than fit, and no node has room for them.
    with pytest.raises(SpecError, match="node 1 .* needs 79 blocks of 18 Kb but has 24 usable, and no "
                                        "other node has room for one more weight row of its layer 'fc2'"):
        lenet("ecp5-85:2", 0.12, fc_weights="chip")
    # The generator's partition counts every conv weight where it is used, as hw/ builds it:
    # only fc1's rows move.
    m = lenet("ecp5-85:2", 0.12, **GENERATOR_OPTIONS)
    assert [[(s.layer, s.in_range) for s in n.slices] for n in m.nodes] == [
        [("conv1", (0, 1)), ("conv2", (0, 3))], [("conv2", (3, 6)), ("fc1", (0, 64)), ("fc2", (0, 32))]]
    assert blocks_of(m) == [(1, 0, "fc1", (0, 64), (2, 32), 1920)]
    # node 1's fc1 Act-RAM keeps the pixels of the 2x2 map fc1 flattens, 16 channels wide and
    # deeper than distributed RAM: 8 of its 22 blocks
    assert [n.estimate.bram_blocks for n in m.nodes] == [23, 22]
    assert m.summary["usable_blocks"] == [24, 24]


def test_cluster_too_small_names_the_conv_layer_that_stays_local():
    with pytest.raises(SpecError) as error:
        lenet("ecp5-45:4", 0.08, **GENERATOR_OPTIONS)
    assert str(error.value) == lenet_too_small_on_four_ecp5_45(blocks=8)
    with pytest.raises(SpecError, match="cluster too small: its 4 nodes hold the network only up to input "
                                        "channel 3 of 6 of layer 'conv2'"):
        lenet("ecp5-45:4", 0.08, fc_weights="chip")


def partitioned(bram_fraction, buildable):
    """lenet's partition on three ECP5-45s at 2 samples in flight, and its budgets."""
    node_budgets = budgets(parse_cluster("ecp5-45:3"), dsp_fraction=0.9, bram_fraction=bram_fraction)
    plans = plan_layers(zoo.lenet_digits())
    part = partition(plans, node_budgets, samples_held={p.name: 2 for p in plans}, describe=lambda: "lenet",
                     batch=3, link_latency_cycles=balance.LINK_LATENCY_CYCLES, offchip_fc=False,
                     buildable_balance=buildable)
    return part.slices, node_budgets


def layout(slices):
    """(layer, node, first, last + 1) of each slice: channel units (whole channels of the map a
    fully connected layer flattens)."""
    return [(sl.plan.name, sl.node, sl.lo, sl.hi) for sl in slices]


def test_buildable_partition_fits_conv_weights_whole_and_one_engine_group_of_fc_rows():
    slices, node_budgets = partitioned(0.25, True)
    assert [b.blocks for b in node_budgets] == [27, 27, 27]
    assert layout(slices) == [("conv1", 0, 0, 6), ("conv2", 0, 0, 2), ("conv2", 1, 2, 5), ("conv2", 2, 5, 6),
                              ("fc1", 2, 0, 16), ("fc2", 2, 0, 32)]
    memory = mapper._memory(slices, {sl.plan.name: 2 for sl in slices},
                            lambda node: node_budgets[node].device.family, 3, exact=True)
    # what the partitioner held to the budget: the memories hw/ builds, with every conv row
    # and one engine group of each fc slice's rows local (the rest could move)
    for sl in slices:
        if sl.plan.kind == "fc":
            sl.remote_rows = sl.out_channels - sl.shape.P
    assert [memory.node(slices, node, ()).bram_blocks for node in range(3)] == [24, 25, 16]


def test_unrestricted_partition_plans_on_rows_moving_where_the_generator_cannot():
    # At 21 blocks a node the unrestricted partition keeps three of conv2's input channels on
    # node 0, its memory full, counting on balancing to move rows if needed; the generator's,
    # which moves no conv row, gets no further than conv2's third input channel on three nodes.
    slices, node_budgets = partitioned(0.2, False)

    def family_of(node):
        return node_budgets[node].device.family

    used = [0] * len(node_budgets)
    for sl in slices:
        family = family_of(sl.node)
        weights = (balance.weight_memory(sl, family) if sl.plan.kind == "conv" else
                   balance.weight_floor(sl.plan, sl.units, sl.shape, family, False))
        used[sl.node] += (mapper._buffers(sl, 2, family_of, 3).cost + weights).bram_blocks
    assert [b.blocks for b in node_budgets] == [21, 21, 21]
    assert used == [21, 20, 14]
    assert layout(slices) == [("conv1", 0, 0, 6), ("conv2", 0, 0, 3), ("conv2", 1, 3, 6), ("fc1", 2, 0, 16),
                              ("fc2", 2, 0, 32)]
    with pytest.raises(SpecError, match=r"^lenet: cluster too small: with every conv weight on the node that uses "
                                        r"it .* only up to input channel 3 of 6 of layer 'conv2' "):
        partitioned(0.2, True)
