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
    assert GENERATOR_OPTIONS == {"offchip_fc": False, "buildable_balance": True}
    m = tiny("ecp5-85:3", 0.1, **GENERATOR_OPTIONS)
    assert blocks_of(m) == [(2, 1, "fc", (0, 32), (8, 10), 64)]
    assert_buildable(m)
    assert Mapping.from_json(m.to_json()) == m


def test_fc_split_over_two_nodes_keeps_its_rows_next_door():
    m = tiny("ecp5-85:2+ecp5-45:2", 0.06, **GENERATOR_OPTIONS)
    assert blocks_of(m) == [(3, 2, "fc", (1, 32), (1, 10), 279)]
    assert_buildable(m)
    # Block RAM the generator builds (exact inventory): node 3 would need 7 of its 6 usable
    # blocks with every row local; balanced it needs 2, and its host 5 of 6.
    assert [n.estimate.bram_blocks for n in m.nodes] == [3, 5, 5, 2]
    assert m.summary["usable_blocks"] == [12, 12, 6, 6]
    local = replace(m.nodes[3], slices=tuple(replace(s, remote_weights=()) for s in m.nodes[3].slices))
    assert memories.node_bram_blocks(local) == 7


def test_rows_whose_nearest_room_is_two_hops_away_are_relayed():
    # as the unrestricted balancer: node 2's rows on node 0, node 1 relays their streams
    m = tiny("ecp5-85:3", 0.05, **GENERATOR_OPTIONS)
    assert blocks_of(m) == blocks_of(tiny("ecp5-85:3", 0.05, offchip_fc=False)) == [
        (2, 0, "fc", (0, 32), (8, 10), 64)]
    assert [[(b.owner, b.host, b.out_range) for b in n.relays] for n in m.nodes] == [[], [(2, 0, (8, 10))], []]
    assert_buildable(m)
    assert Mapping.from_json(m.to_json()) == m


def test_conv_rows_never_move():
    # unrestricted, node 2 keeps its conv2 rows on node 1
    plain = tiny("ecp5-45:4", 0.08, offchip_fc=False)
    assert blocks_of(plain) == [(2, 1, "conv2", (1, 4), (0, 8), 216), (3, 1, "fc", (0, 32), (4, 10), 192)]
    with pytest.raises(SpecError) as error:
        tiny("ecp5-45:4", 0.08, **GENERATOR_OPTIONS)
    assert str(error.value) == (
        f"network 'tiny' on cluster 'ecp5-45:4': node 2 (lfe5um5g-45f) needs 9 blocks of 18 Kb but has "
        f"8 usable, {HEAD}: the rows that would free memory are of conv layer 'conv2', which would have to "
        f"be used weight-stationary from another node, an engine mode the generator does not build")


def test_lenet_fc_rows_move_on_to_the_next_host_when_one_is_full():
    m = map_network(zoo.lenet_digits(), parse_cluster("ecp5-85:4"), bram_fraction=0.08, **GENERATOR_OPTIONS)
    # node 3's fc1 rows on nodes 2, 1 and 0 (the nearest with room first), its fc2 rows on
    # node 0; node 2's fc1 rows on nodes 1 and 0
    assert sorted((b.owner, b.layer, b.host, b.out_range) for n in m.nodes for b in n.hosted) == [
        (2, "fc1", 0, (8, 11)), (2, "fc1", 1, (11, 32)),
        (3, "fc1", 0, (8, 30)), (3, "fc1", 1, (30, 31)), (3, "fc1", 2, (31, 32)), (3, "fc2", 0, (0, 10))]
    assert_buildable(m)
    with pytest.raises(SpecError) as error:  # less room: no node holds a row of fc1 more
        map_network(zoo.lenet_digits(), parse_cluster("ecp5-85:4"), bram_fraction=0.06, **GENERATOR_OPTIONS)
    assert str(error.value) == (
        f"network 'lenet-digits' on cluster 'ecp5-85:4': node 2 (lfe5um5g-85f) needs 26 blocks of 18 Kb "
        f"but has 12 usable, {HEAD}: no other node has room for one more row of layer 'fc1' (56 16-bit "
        f"weights and their 48-bit gradient sums) next to the rows it already hosts")


def test_a_node_only_conv_rows_would_relieve_is_refused():
    # The partition of tiny on ecp5-45:4 at bram_fraction 0.08 the unrestricted mapping settles
    # on: node 2 holds only conv2, whose rows the unrestricted balancer moves to node 1.
    plans = plan_layers(zoo.tiny())
    node_budgets = budgets(parse_cluster("ecp5-45:4"), dsp_fraction=0.9, bram_fraction=0.08)
    stale = {"conv1": 8, "conv2": 6, "fc": 2}

    def family_of(node):
        return node_budgets[node].device.family

    def run(buildable):
        part = partition(plans, node_budgets, fp_stale=stale, at_least=256, describe=lambda: "tiny",
                         batch=1, link_latency_cycles=balance.LINK_LATENCY_CYCLES, offchip_fc=False)
        fixed = {id(sl): mapper._buffers(sl, stale[sl.plan.name], family_of, 1).cost for sl in part.slices}
        return balance.balance(part.slices, node_budgets, fixed, family_of, lambda: "tiny",
                               buildable=buildable)

    blocks, _ = run(False)
    assert [(b.owner, b.host, b.layer, b.out_range) for b in blocks] == [(2, 1, "conv2", (0, 8)),
                                                                          (3, 1, "fc", (4, 10))]
    with pytest.raises(SpecError) as error:
        run(True)
    assert str(error.value) == (
        f"tiny: node 2 (lfe5um5g-45f) needs 9 blocks of 18 Kb but has 8 usable, {HEAD}: the rows that "
        f"would free memory are of conv layer 'conv2', which would have to be used weight-stationary from "
        f"another node, an engine mode the generator does not build")


def test_moves_leave_whole_engine_groups():
    sl = SimpleNamespace(out_channels=10, remote_rows=0)
    assert list(balance._moves(sl, 4)) == [2, 6, 10]  # 8 or 4 or 0 rows stay local
    sl.remote_rows = 2
    assert list(balance._moves(sl, 4)) == [4, 8]
    assert list(balance._moves(sl, 1)) == list(range(1, 9))  # unrestricted: any count


def test_fc_rows_stream_twice_and_send_48_bit_gradients_back():
    m = tiny("ecp5-85:3", 0.1, **GENERATOR_OPTIONS)
    (block,) = m.nodes[1].hosted
    # link 1 -> 2: conv2's bypassed inputs of channels 2:4 (4x4) and partial sums of its
    # 8x4x4 outputs, the label, and the FC rows once for FP and once for EB
    assert m.nodes[1].link_bytes_forward == 2 * 16 * 2 + 8 * 16 * 6 + 2 + block.words * 2 * 2 == 1090
    # link 2 -> 1: conv2's output errors and input errors of channels 2:4, the rows' gradients
    assert m.nodes[2].link_bytes_backward == 8 * 16 * 2 + 2 * 16 * 2 + block.words * 6 == 704
    # no extra period for FC rows streamed in: fc's FP and PG are 2 samples apart, as without
    fc = next(s for s in m.nodes[2].slices if s.layer == "fc")
    assert fc.fp_stale == 2


def test_unrestricted_fc_rows_cross_every_link_to_the_owner():
    m = tiny("ecp5-85:3", 0.05, offchip_fc=False)  # fc rows of node 2 on node 0
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


def test_partition_counts_conv_weights_in_full_for_the_generator():
    # Planned with only the width of conv2's weight memory, node 0 held more conv2 rows than
    # fit and balancing could not move them: "node 0 needs 25 blocks of 18 Kb but has 24
    # usable ... the rows that would free memory are of conv layer 'conv2'". Counted in full,
    # no partition holds lenet with the fc layers' weight width.
    with pytest.raises(SpecError) as error:
        lenet("ecp5-85:2", 0.12, **GENERATOR_OPTIONS)
    assert str(error.value) == (
        f"network 'lenet-digits' on cluster 'ecp5-85:2': cluster too small: {CONV_LOCAL}, its 2 nodes hold "
        f"the network only up to input channel 0 of 32 of layer 'fc2' at any pipeline period "
        f"(lfe5um5g-85f: 24 usable blocks of 18 Kb, 140 multipliers)")
    # unrestricted, conv2's rows may move: the partitioner still plans with their width only
    with pytest.raises(SpecError, match="node 0 .* needs 25 blocks of 18 Kb but has 24 usable, and no "
                                        "other node has room for one more weight row of its layer 'conv2'"):
        lenet("ecp5-85:2", 0.12, offchip_fc=False)


def test_cluster_too_small_names_the_conv_layer_that_stays_local():
    # before: "... only up to input channel 0 of 64 of layer 'fc1'", as unrestricted
    message = (f"network 'lenet-digits' on cluster 'ecp5-85:2': cluster too small: {CONV_LOCAL}, its 2 "
               f"nodes hold the network only up to input channel 5 of 6 of layer 'conv2' at any pipeline "
               f"period (lfe5um5g-85f: 20 usable blocks of 18 Kb, 140 multipliers)")
    with pytest.raises(SpecError) as error:
        lenet("ecp5-85:2", 0.1, **GENERATOR_OPTIONS)
    assert str(error.value) == message
    with pytest.raises(SpecError, match="cluster too small: its 2 nodes hold the network only up to input "
                                        "channel 0 of 64 of layer 'fc1'"):
        lenet("ecp5-85:2", 0.1, offchip_fc=False)


def test_buildable_partition_fits_conv_weights_whole_and_fc_weights_by_width():
    plans = plan_layers(zoo.lenet_digits())
    node_budgets = budgets(parse_cluster("ecp5-45:3"), dsp_fraction=0.9, bram_fraction=0.2)
    stale = {p.name: 2 for p in plans}

    def family_of(node):
        return node_budgets[node].device.family

    def planned(buildable):
        """Blocks per node: buffers, conv weights in full, fc weights by width; the slices."""
        part = partition(plans, node_budgets, fp_stale=stale, describe=lambda: "lenet", batch=3,
                         link_latency_cycles=balance.LINK_LATENCY_CYCLES, offchip_fc=False,
                         buildable_balance=buildable)
        used = [0] * len(node_budgets)
        for sl in part.slices:
            family = family_of(sl.node)
            weights = (balance.weight_memory(sl, family) if sl.plan.kind == "conv" else
                       balance.weight_floor(sl.plan, sl.units, sl.shape, family, False))
            used[sl.node] += (mapper._buffers(sl, 2, family_of, 3).cost + weights).bram_blocks
        return used, [(sl.plan.name, sl.node, sl.lo, sl.hi) for sl in part.slices]

    assert [b.blocks for b in node_budgets] == [21, 21, 21]
    assert planned(True) == ([17, 20, 20], [("conv1", 0, 0, 6), ("conv2", 0, 0, 2), ("conv2", 1, 2, 5),
                                            ("conv2", 2, 5, 6), ("fc1", 2, 0, 64), ("fc2", 2, 0, 32)])
    # unrestricted (the default), node 0 keeps three conv2 input channels, relying on moving
    # their rows: one block over with their weights in full
    assert planned(False) == ([22, 21, 14], [("conv1", 0, 0, 6), ("conv2", 0, 0, 3), ("conv2", 1, 3, 6),
                                            ("fc1", 2, 0, 64), ("fc2", 2, 0, 32)])
