"""Partitioner, weight balancing and the NodeConfigs they produce."""

from dataclasses import replace
import math

import pytest

from mapping import balance, memories, partition as partition_module, zoo
from mapping.cluster import Cluster, parse_cluster
from mapping.devices import get_device
from mapping.errors import MemoryRefusal, SpecError
from mapping.network import Layer, infer
from mapping.zoo import conv
from mapping.mapper import GENERATOR_OPTIONS, LOGIC_FRACTION, map_network
from mapping.nodeconfig import Mapping
from mapping.partition import (Partitioner, Shape, _nearest_first, budgets, coarse, dram_bytes, partition,
                               plan_layers)
from mapping.resources import LINK_CORE_LUT, UPDATE_LANE_LUT, update_multipliers


@pytest.fixture(scope="module")
def tiny4():
    return map_network(zoo.tiny(), parse_cluster("ecp5-85:4"))


def test_tiny_on_four_ecp5_uses_icp_ocp_and_shared_nodes(tiny4):
    nodes = tiny4.nodes
    assert len(nodes) == 4 and all(n.slices for n in nodes)
    conv1 = [s for n in nodes for s in n.slices if s.layer == "conv1"]
    assert [s.mode for s in conv1] == ["ocp"] and conv1[0].out_range == (0, 4)
    conv2 = [(n.index, s) for n in nodes for s in n.slices if s.layer == "conv2"]
    assert len(conv2) == 3 and all(s.mode == "icp" for _, s in conv2)
    # contiguous input-channel ranges on consecutive nodes, first/last marked
    assert [s.in_range for _, s in conv2] == [(0, 1), (1, 3), (3, 4)]
    assert [i for i, _ in conv2] == [1, 2, 3]
    assert [(s.first, s.last) for _, s in conv2] == [(True, False), (False, False), (False, True)]
    assert [s.layer for s in nodes[3].slices] == ["conv2", "fc"]
    fc = nodes[3].slices[1]
    assert fc.kind == "fc" and not fc.weights_offchip  # the ECP5 evaluation board has no DRAM
    assert fc.flatten_from == (8, 2, 2) and conv1[0].flatten_from is None


def test_tiny_engines_cycles_and_idle_are_exact(tiny4):
    for node in tiny4.nodes:
        for s in node.slices:
            assert s.fp.kernel == s.kernel
            # conv1's line buffer walks its 8x8 raster plus one padding column per row and one
            # padding row (80 cycles, mapping.line_walk); conv2 needs 64 (below), fc 10 x 8 passes
            assert s.cycles_per_sample == (64 if s.layer == "conv2" else 80)
            assert s.fp_stale >= 1
        # engines plus the weight update's lanes and the bias update, as hw/memory/grad_buffer.py has them
        assert node.estimate.dsp == sum(s.multipliers + update_multipliers(s.owns_biases, s.update_lanes)
                                        for s in node.slices)
    conv2 = tiny4.nodes[2].slices[0]  # 2 input channels, all 8 outputs
    assert (conv2.fp.ces, conv2.fp.tiles) == (2, 2) and (conv2.eb.ces, conv2.eb.tiles) == (2, 2)
    # 16 pixels x ceil(8/2) groups = 64 cycles; 3 engines x 4 tiles x 9 = 108 multipliers
    assert conv2.multipliers == 108
    first = tiny4.nodes[0].slices[0]
    assert not first.needs_eb and first.eb.multipliers == 0
    # conv1 and conv2 (72 + 216 multipliers) busy 64 of the 80-cycle period, fc (12) all of it
    assert tiny4.summary["idle"] == pytest.approx((72 + 216) * 16 / (300 * 80))
    assert tiny4.summary["macs_per_sample"] == zoo.tiny().macs


def test_fp_stale_falls_along_the_chain_by_at_most_the_mini_batch(tiny4):
    stale = {s.layer: s.fp_stale for n in tiny4.nodes for s in n.slices}
    batch = tiny4.nodes[0].training.batch
    assert stale["fc"] + batch >= stale["conv2"] >= stale["fc"] >= 1
    assert stale["conv2"] + 1 >= stale["conv1"] >= stale["conv2"]
    # each Act-RAM holds its own fp_stale samples, or the previous layer's if more
    held = {"conv1": stale["conv1"], "conv2": max(stale["conv1"], stale["conv2"]),
            "fc": max(stale["conv2"], stale["fc"])}
    for node in tiny4.nodes:
        for s in node.slices:
            assert s.samples_held == held[s.layer]
            assert s.act_ram_words == held[s.layer] * s.in_channels * s.in_shape[1] * s.in_shape[2]


@pytest.mark.parametrize("batch, expected", [(1, (4, 3, 2)), (4, (7, 6, 2)), (16, (8, 7, 2))])
def test_fp_stale_before_a_convolution_is_at_most_one_more_than_its(batch, expected):
    # The timing model's round trips give conv1 12, conv2 7 and fc 2 on the default chain.
    # Before fc (whose Act-RAM takes whole samples) conv2 may be up to B more; conv1, whose
    # FP feeds conv2's line buffer, only 1 more: uncapped (14 when the ECP5-85 ran at 100 MHz)
    # at B = 16 its update waited for conv2's every mini-batch, 19% of the chain's rate
    # (docs/weight_versions.md).
    mapping = map_network(zoo.tiny(), parse_cluster("ecp5-85:2+ecp5-45:2"), batch=batch, **GENERATOR_OPTIONS)
    stale = {s.layer: s.fp_stale for n in mapping.nodes for s in n.slices}
    assert (stale["conv1"], stale["conv2"], stale["fc"]) == expected


def test_fp_stale_of_consecutive_layers_with_weights_in_dram_falls_strictly():
    """A pass that streams a layer's weights from DRAM feeds FP of sample s and EB of s - k
    together (hw/memory/dram_weights.py): EB's errors of s - k come from the next layer's EB of
    s - k, which, with its weights in DRAM too, runs in the pass of its FP of s - k + k_next, fed
    by this FP of that sample. So k > k_next; on three Versas the timing model alone gives fc1
    and fc2 one each, and the chain deadlocked."""
    mapping = map_network(zoo.lenet_digits(), parse_cluster("ecp5-45:3"), **{**GENERATOR_OPTIONS, "fc_weights": "dram"})
    stale = [(s.layer, s.weights_offchip, s.fp_stale) for n in mapping.nodes for s in n.slices]
    assert stale == [("conv1", False, 4), ("conv2", False, 3), ("conv2", False, 3), ("fc1", True, 2), ("fc1", True, 2),
                     ("fc2", True, 1)]


def test_json_round_trip(tiny4):
    again = Mapping.from_json(tiny4.to_json())
    assert again == tiny4
    assert again.nodes[3].slices[1].pool is None and again.nodes[0].slices[0].pool.kernel == 2


def test_link_bytes_of_an_icp_split(tiny4):
    # link 1 -> 2 inside conv2 (input 4x4x4, output 8x4x4): bypassed input channels 1..3
    # (16-bit) + 48-bit partial sums of all 8 outputs + the label
    assert tiny4.nodes[1].link_bytes_forward == 3 * 16 * 2 + 8 * 16 * 6 + 2
    # backward 2 -> 1: conv-output errors of all 8 channels + input errors of channels 1..3
    assert tiny4.nodes[2].link_bytes_backward == 8 * 16 * 2 + 3 * 16 * 2


def test_icp_ocp_rule():
    modes = {p.name: p.mode for p in plan_layers(zoo.vgg16())}
    assert modes["conv1_1"] == "ocp" and all(m == "icp" for n, m in modes.items() if n != "conv1_1")
    modes = {p.name: p.mode for p in plan_layers(zoo.alexnet_ungrouped())}
    assert modes["conv1"] == "ocp" and modes["conv2"] == "icp"
    modes = {p.name: p.mode for p in plan_layers(zoo.lenet_digits())}
    assert modes == {"conv1": "ocp", "conv2": "icp", "fc1": "icp", "fc2": "icp"}


def test_coarse_phase_follows_capacity_on_a_heterogeneous_chain():
    plans = plan_layers(zoo.lenet_digits())
    nb = budgets(parse_cluster("zcu102+ecp5-85"), dsp_fraction=0.9, bram_fraction=0.9)
    groups = coarse(plans, nb)
    work = {p.name: p.macs for p in plans}
    shares = [sum(work[name] * (hi - lo) for name, lo, hi in g) for g in groups]
    capacity = [b.capacity for b in nb]
    assert shares[0] / sum(shares) == pytest.approx(capacity[0] / sum(capacity))
    assert groups[0][0][:2] == ("conv1", 0.0) and groups[-1][-1][0] == "fc2"


def test_heterogeneous_chain_covers_every_channel_once():
    m = map_network(zoo.lenet_digits(), parse_cluster("zcu102+ecp5-85:2"))
    covered = {}
    for node in m.nodes:
        assert node.cycles_per_sample <= m.summary["period_s"] * node.clock_mhz * 1e6 * (1 + 1e-9)
        for s in node.slices:
            lo, hi = s.in_range if s.mode == "icp" else s.out_range
            covered.setdefault(s.layer, []).append((lo, hi))
    for layer, ranges in covered.items():
        ends = [b for a, b in ranges][:-1]
        assert [a for a, b in ranges][1:] == ends and ranges[0][0] == 0


@pytest.mark.parametrize("spec, slices", [("ecp5-85:2+vc709:1", [1, 1, 3]),
                                          ("ecp5-45:8", [1] * 8), ("ecp5-45:16", [1] * 16)])
def test_every_node_gets_a_slice(spec, slices):
    # The proportional cuts used to leave node 0 of the first chain and node 3 of the
    # second empty; 16 nodes give each of tiny's 16 channel units a node (conv1's 4 output
    # channels, conv2's 4 input channels, the 8 channels of the 2x2 map fc flattens).
    m = map_network(zoo.tiny(), parse_cluster(spec), **GENERATOR_OPTIONS)
    assert [len(n.slices) for n in m.nodes] == slices


def test_more_nodes_than_channel_units_is_refused():
    with pytest.raises(SpecError) as error:
        map_network(zoo.tiny(), parse_cluster("ecp5-45:17"))
    assert str(error.value) == (
        "network 'tiny' on cluster 'ecp5-45:17': node 16 (lfe5um5g-45f) would get no layer slice: "
        "the network has only 16 channel units to spread (input channels of ICP layers, output "
        "channels of OCP layers), fewer than the 17 nodes; use a shorter chain")


def test_max_multipliers_caps_every_node():
    m = map_network(zoo.tiny(), parse_cluster("ecp5-85:4"), max_multipliers=60)
    assert all(n.estimate.dsp <= 60 for n in m.nodes)


def test_weight_balancing_moves_rows_and_accounts_traffic():
    m = map_network(zoo.lenet_digits(), parse_cluster("ecp5-85:4"), bram_fraction=0.08)
    hosted = [b for n in m.nodes for b in n.hosted]
    assert hosted
    for block in hosted:
        owner = m.nodes[block.owner]
        sl = next(s for s in owner.slices if s.layer == block.layer)
        assert block in sl.remote_weights
        assert block.words == (block.out_range[1] - block.out_range[0]) * (
            sl.in_range[1] - sl.in_range[0]) * sl.kernel ** 2
        assert sl.out_range[0] <= block.out_range[0] < block.out_range[1] <= sl.out_range[1]
        # the host learns the rows' engines, geometry and weight versions from its own config;
        # its BGB walks them in one lane, whatever lanes the owner's LGB got
        cut = block.owner_slice
        assert cut == replace(sl, out_range=block.out_range, remote_weights=(), update_lanes=1)
        assert cut.weight_words == block.words
    assert Mapping.from_json(m.to_json()) == m
    for n in m.nodes:
        assert n.estimate.bram_blocks <= m.summary["usable_blocks"][n.index]
    # weights to a downstream owner travel forward (16 bit), their gradients back (48 bit)
    plain = map_network(zoo.lenet_digits(), parse_cluster("ecp5-85:4"))
    assert sum(n.link_bytes_forward for n in m.nodes) > sum(n.link_bytes_forward for n in plain.nodes)


def test_period_search_passes_infeasible_periods():
    # 16 blocks per ECP5-85: a longer period deepens shallow memories out of distributed
    # RAM into block RAM, so 256 cycles fit, 255 and 512 do not
    plans = plan_layers(zoo.lenet_digits())
    part = Partitioner(plans, budgets(parse_cluster("ecp5-85:4"), dsp_fraction=0.9, bram_fraction=0.08),
                       samples_held={p.name: 2 for p in plans}, link_latency_cycles=128, batch=1,
                       describe=lambda: "lenet")
    assert [part.feasible(c) is not None for c in (255, 256, 512)] == [False, True, False]
    assert part.lower_bound() < 255 and part.min_period() == 256


def fine_phase(network, spec, bram_fraction, *, stale=None, at_least=0, **options):
    """The partition at the shortest feasible period from ``at_least`` (samples in flight 2
    unless ``stale`` says otherwise), and a Partitioner with the same inputs to judge it."""
    plans = plan_layers(network)
    node_budgets = budgets(parse_cluster(spec), dsp_fraction=0.9, bram_fraction=bram_fraction)
    inputs = dict(samples_held={p.name: (stale or {}).get(p.name, 2) for p in plans},
                  link_latency_cycles=balance.LINK_LATENCY_CYCLES, describe=lambda: spec, batch=1, **options)
    return partition(plans, node_budgets, at_least=at_least, **inputs), Partitioner(plans, node_budgets, **inputs)


def cut_positions(part, judge):
    """The unit each node starts at, then the network's total units."""
    starts = {}
    for s in part.slices:
        starts.setdefault(s.node, judge.starts[s.plan.index] + s.lo)
    return [starts[node] for node in range(len(judge.nodes))] + [judge.total]


def overfull(part, judge):
    """(node, multipliers, blocks) of every node whose slices, first or last of their layer
    as the partition marks them, cost more than the node offers at the partition's period."""
    over = []
    for node in range(len(judge.nodes)):
        costs = [judge._cost(s.plan, part.choices[s.plan.index], s.lo, s.units, node, part.period, s.first,
                             s.last)
                 for s in part.slices if s.node == node]
        used = [sum(c[i] for c in costs) for i in range(3)] if None not in costs else None
        if used is None or any(u > limit for u, limit in zip(used, judge.limits(node, part.period))):
            over.append((node, *(used or (None, None))[:2]))
    return over


@pytest.mark.parametrize("spec, bram_fraction, stale, period, options, cuts", [
    # The default chain at 6% of the block RAM (mapping/balance.py's model, which the paper-
    # scale mappings plan with) and at 1.25 x 128 cycles, a period the mapper retries when
    # balancing fails. Node 3 holds fc whole (a layer's first slice has no partial-sum
    # input), so the backward fill lets it start at fc's first unit (8); node 2 must take one
    # unit (a channel of the 2x2 map fc flattens), and fc's channels 1..7 then cost node 3 more
    # blocks than its 6. The cuts were [0, 5, 8, 9, 16].
    ("ecp5-85:2+ecp5-45:2", 0.06, {}, 160, {"offchip_fc": False}, [0, 5, 8, 12, 16]),
    # Node 2 holds conv2 whole from unit 4; from unit 5 (node 1's target) conv2's last three
    # input channels cost it 9 blocks of its 8. The cuts were [0, 4, 5, 8, 16].
    ("ecp5-45:4", 0.08, {"conv1": 8, "conv2": 6}, 256, {"offchip_fc": False}, [0, 4, 6, 8, 16]),
])
def test_cuts_fit_every_node_where_slice_costs_are_not_monotone(spec, bram_fraction, stale, period, options,
                                                                  cuts):
    part, judge = fine_phase(zoo.tiny(), spec, bram_fraction, stale=stale, at_least=period, **options)
    assert part.period == period
    assert cut_positions(part, judge) == cuts and overfull(part, judge) == []


def test_cuts_that_overfill_a_node_are_never_handed_on():
    part, judge = fine_phase(zoo.tiny(), "ecp5-85:2+ecp5-45:2", 0.06, at_least=160, offchip_fc=False)
    with pytest.raises(RuntimeError, match=r"cuts \[0, 5, 8, 9, 16\] at period 160 overfill nodes \[3\]"):
        judge._check_holds(160, part.choices, [0, 5, 8, 9, 16])


def test_without_a_search_the_cuts_are_the_greedy_fills(monkeypatch):
    searched, judge = fine_phase(zoo.lenet_digits(), "ecp5-45:4", 0.2)
    monkeypatch.setattr(partition_module, "SEARCH_ENDS", 0)
    greedy, _ = fine_phase(zoo.lenet_digits(), "ecp5-45:4", 0.2)
    assert greedy.period == searched.period
    assert cut_positions(greedy, judge) == judge._greedy_cuts(greedy.period, greedy.choices) != \
        cut_positions(searched, judge)
    assert overfull(greedy, judge) == []


FIT_SPECS = {"tiny": ["ecp5-85:2+ecp5-45:2", "ecp5-85:3", "ecp5-45:4", "ecp5-25:6", "ecp5-45:8"],
             "lenet-digits": ["ecp5-85:4", "ecp5-45:4", "zcu102+ecp5-85:2"]}


def test_every_node_fits_its_slices():
    # at the shortest period and the longer ones the mapper retries where balancing fails
    checked, over = 0, []
    for name, specs in FIT_SPECS.items():
        for spec in specs:
            for fraction in (0.05, 0.06, 0.08, 0.1, 0.16, 0.3, 0.9):
                for options in ({"offchip_fc": False}, {"offchip_fc": False, "buildable_balance": True}):
                    at_least = 0
                    for _ in range(3):
                        try:
                            part, judge = fine_phase(zoo.NETWORKS[name](), spec, fraction, at_least=at_least,
                                                     **options)
                        except SpecError:
                            break
                        checked += 1
                        over += [(name, spec, fraction, part.period, *o) for o in overfull(part, judge)]
                        at_least = part.period + part.period // 4
    assert checked > 200 and over == []


def test_targets_are_tried_nearest_first():
    assert list(_nearest_first(5, 3, 9)) == [5, 4, 6, 3, 7, 8, 9]
    assert list(_nearest_first(1, 3, 5)) == [3, 4, 5] and list(_nearest_first(8, 3, 5)) == [5, 4, 3]
    assert list(_nearest_first(5, 6, 5)) == []


def test_sized_period_is_whole_cycles(tiny4):
    assert tiny4.summary["sized_period_s"] * 125e6 == 80  # conv1's padded 8x8 walk at 125 MHz


def test_fc_weights_in_dram_cost_a_read_per_sample_and_a_write_per_mini_batch():
    fc6 = next(p for p in plan_layers(zoo.alexnet_ungrouped()) if p.name == "fc6")
    # units: the 256 channels of the 6x6 map fc6 flattens, 36 inputs each
    assert dram_bytes(fc6, 256, batch=1) == 9216 * 4096 * 4
    assert dram_bytes(fc6, 100, batch=8) == 100 * 36 * 4096 * (2 + 2 / 8)


def test_fc_slices_in_dram_keep_the_mini_batch_vectors():
    fc7 = next(p for p in plan_layers(zoo.alexnet_ungrouped()) if p.name == "fc7")
    shape = Shape(P=64, b=16, u=64, v=8)  # 128 of the 4096 inputs, all 4096 outputs

    def bits(batch):
        return balance.fixed_buffers(fc7, 128, shape, 2, "xc7", first=False, last=False,
                                     latency_cycles=128, gradient_batch=batch).cost.bits

    assert bits(4) - bits(0) == 4 * (128 + 4096) * 16  # inputs and output errors of 4 samples


def test_the_coarse_model_prices_activations_in_dram_as_their_staging_fifos():
    """conv1_2 of VGG-16, 8 of its 64 input channels, the layer's last slice, 6 samples held:
    in DRAM its Act-RAM (128 bits x 6 x 224 x 224, 2,205 blocks) and its SFU masks (882
    blocks) leave only two 32-word staging FIFOs each on chip, in distributed RAM."""
    conv1_2 = next(p for p in plan_layers(zoo.vgg16()) if p.name == "conv1_2")
    shape = Shape(P=64, b=8, u=1, v=1)

    def buffers(storage):
        return balance.fixed_buffers(conv1_2, 8, shape, 6, "xc7", first=False, last=True, latency_cycles=128,
                                     act_storage=storage)

    chip, dram = buffers("chip"), buffers("dram")
    assert chip.act_ram == dram.act_ram == 6 * 8 * 224 * 224  # the queue's depth, wherever it lives
    assert (chip.cost.bram_blocks, dram.cost.bram_blocks) == (3247, 160)
    assert chip.cost.bram_blocks - dram.cost.bram_blocks == 2205 + 882
    staging = 2 * 32 * (128 + 16)
    assert chip.cost.bits - dram.cost.bits == 6 * 224 * 224 * 128 + 6 * 64 * 112 * 112 * 3 - staging
    assert dram.cost.lut - chip.cost.lut == 256 + 32  # the staging FIFOs' distributed RAM


def _custom(cluster, **device):
    """``cluster``'s devices (one kind) with ``device``'s fields changed."""
    devices = parse_cluster(cluster).devices
    changed = replace(devices[0], **device)
    return Cluster((changed,) * len(devices), (changed.link_gbps,) * (len(devices) - 1), f"{cluster}-changed")


def test_activations_in_dram_set_a_floor_on_a_nodes_cycles():
    """On ECP5-45s with a DRAM of 50 Mb/s, tiny's node 0 writes 184 bytes of activations and
    masks per sample and reads them back: 368 bytes, 58.88 us at 100 MHz, 5888 cycles instead of
    256, as fully connected weights in DRAM set it."""
    cluster = _custom("ecp5-45:2", dram_gbps=0.05)
    chip = map_network(zoo.tiny(), cluster, act_storage="chip", fc_weights="chip")
    dram = map_network(zoo.tiny(), cluster, act_storage="dram", fc_weights="chip")
    assert [n.cycles_per_sample for n in chip.nodes] == [256, 384]
    traffic = [sum(2 * memories.dram_bits_per_sample(s) / 8 for s in n.slices) for n in dram.nodes]
    assert traffic == [368, 344]
    assert [n.cycles_per_sample for n in dram.nodes] == [5888, 5504] == [math.ceil(t * 8 / 0.05e9 * 100e6)
                                                                         for t in traffic]
    assert dram.summary["samples_per_s"] == pytest.approx(100e6 / 5888)
    assert dram.summary["per_node"][0]["dram_gbps"] == pytest.approx(0.05)


def test_a_dram_too_small_for_the_activations_is_refused_by_name():
    with pytest.raises(SpecError, match=r"^network 'tiny' on cluster 'ecp5-45:2-changed': node 0 \(lfe5um5g-45f\) "
                                        r"needs 696 bytes of DRAM \(696 for the activations and masks of the samples "
                                        r"in flight, 0 for fully connected weights\) but has 500$"):
        map_network(zoo.tiny(), _custom("ecp5-45:2", dram_gb=5e-7), act_storage="dram")


def _wide():
    """Small weights, large maps: 4 x 64 x 64 inputs."""
    return infer("wide", (4, 64, 64), [
        conv("conv1", 8, 3, pad=1), Layer("relu", "relu1"), Layer("maxpool", "pool1", kernel=2, stride=2),
        conv("conv2", 8, 3, pad=1), Layer("relu", "relu2"), Layer("maxpool", "pool2", kernel=2, stride=2),
        Layer("flatten", "flatten"), Layer("linear", "fc", out_channels=10)])


def test_auto_act_storage_moves_activations_to_dram_only_where_the_chip_refuses_them():
    storages = lambda m: [s.act_storage for n in m.nodes for s in n.slices]  # noqa: E731
    assert set(storages(map_network(zoo.tiny(), parse_cluster("ecp5-45:2")))) == {"chip"}
    cluster = parse_cluster("ecp5-45:2")
    with pytest.raises(MemoryRefusal, match=r"^network 'wide' on cluster 'ecp5-45:2': cluster too small: its 2 nodes "
                                            r"hold the network only up to input channel 0 of 8 of layer 'conv2' at any "
                                            r"pipeline period \(lfe5um5g-45f: 32 usable blocks of 18 Kb, 64 "
                                            r"multipliers\)$"):
        map_network(_wide(), cluster, bram_fraction=0.3, act_storage="chip")
    auto = map_network(_wide(), cluster, bram_fraction=0.3)
    assert set(storages(auto)) == {"dram"}
    assert auto.summary["samples_per_s"] == map_network(_wide(), cluster, bram_fraction=0.3,
                                                        act_storage="dram").summary["samples_per_s"]
    with pytest.raises(MemoryRefusal, match=r"^network 'wide' on cluster 'ecp5-45:2': .* \(with activations in "
                                            r"DRAM, tried as on-chip ones were refused too\)$"):
        map_network(_wide(), cluster, bram_fraction=0.2)
    # a device without DRAM keeps them on chip, whatever is asked
    assert set(storages(map_network(zoo.tiny(), parse_cluster("ecp5-85:2"), act_storage="dram"))) == {"chip"}


@pytest.mark.parametrize("value, error, message", [
    ("disk", SpecError, "act_storage must be one of chip, dram, auto, not 'disk'"),
    (None, TypeError, "act_storage must be one of chip, dram, auto, not None"),
])
def test_act_storage_is_one_of_three(value, error, message):
    with pytest.raises(error) as refused:
        map_network(zoo.tiny(), parse_cluster("ecp5-45:2"), act_storage=value)
    assert str(refused.value) == message


def test_too_few_multipliers_for_a_tile_is_refused():
    with pytest.raises(SpecError, match=r"layer 'conv2' needs 27 multipliers .* 3x3 .* offers 20"):
        map_network(zoo.tiny(), parse_cluster("ecp5-85:4"), max_multipliers=20)


def test_vgg16_on_one_vc709_is_refused_naming_the_numbers():
    with pytest.raises(SpecError) as error:
        map_network(zoo.vgg16(), parse_cluster("vc709:1"))
    text = str(error.value)
    assert "conv weights alone (235.4 Mbit)" in text and "xc7vx690t" in text and "conv4_2" in text


def test_accumulator_width_limits_the_batch():
    with pytest.raises(SpecError, match=r"layer 'conv1_1'.*weight-gradient.*largest batch it admits is 2"):
        map_network(zoo.vgg16(), parse_cluster("vc709:40"), batch=8)


@pytest.fixture(scope="module")
def grouped4():
    return map_network(zoo.tiny_grouped(), parse_cluster("ecp5-85:4"))


def test_grouped_layer_slices_lie_in_one_group_each(grouped4):
    """tiny-grouped's conv2 (2 groups of 2 inputs and 4 outputs) over nodes 1-3: node 2's
    inputs 1..2 cross the group boundary, so it holds a slice of each group; every slice is
    the ordinary convolution of its inputs with its group's outputs."""
    conv2 = [(n.index, s) for n in grouped4.nodes for s in n.slices if s.layer == "conv2"]
    assert [(i, s.in_range, s.out_range) for i, s in conv2] == [
        (1, (0, 1), (0, 4)), (2, (1, 2), (0, 4)), (2, (2, 3), (4, 8)), (3, (3, 4), (4, 8))]
    assert [(s.first, s.last) for _, s in conv2] == [(True, False), (False, False), (False, False), (False, True)]
    assert all(s.groups == 2 and s.weight_words == 4 * 9 and s.fp.ces * s.fp.tiles <= 4 for _, s in conv2)
    # the SFU of the last slice finishes all 8 output channels: their biases are its
    assert conv2[-1][1].sfu_channels == 8 and conv2[-1][1].lgb_words == 4 * 9 + 8
    assert Mapping.from_json(grouped4.to_json()) == grouped4


def test_grouped_mapping_counts_the_layer_s_work_and_weights_once(grouped4):
    network = zoo.tiny_grouped()
    plans = plan_layers(network)
    assert plans[1].groups == 2 and plans[1].weights == network["conv2"].weights == 8 * 2 * 9
    slices = [s for n in grouped4.nodes for s in n.slices]
    for info in network.weighted_layers:
        assert sum(s.weight_words for s in slices if s.layer == info.name) == info.weights
    assert grouped4.summary["macs_per_sample"] == network.macs


def test_grouped_partial_sums_cross_a_link_once_their_group_is_reached(grouped4):
    """Between conv2's group-0 slices (nodes 1 -> 2) only group 0's 4 partial sums of each of
    the 4 x 4 pixels travel (and their errors back); the whole layer's 8 from node 2 on."""
    plans = plan_layers(zoo.tiny_grouped())
    network = zoo.tiny_grouped()
    grouped_fwd, grouped_bwd = (grouped4.summary["link_bytes_forward"], grouped4.summary["link_bytes_backward"])
    plain = map_network(zoo.tiny(), parse_cluster("ecp5-85:4"))
    assert [s.in_range for n in plain.nodes for s in n.slices if s.layer == "conv2"] == [(0, 1), (1, 3), (3, 4)]
    assert network["conv2"].out_shape == (8, 4, 4) and plans[1].group_full == 4
    conv2 = [s for n in grouped4.nodes for s in n.slices if s.layer == "conv2"]
    lanes = conv2[0].fp.ces
    psum = lambda channels: -(-channels // lanes) * lanes * 16 * 48 / 8  # noqa: E731
    errors = lambda channels: channels * 16 * 16 / 8  # noqa: E731
    # link 1 (node 1 -> 2) carries group 0's sums; link 2 both groups'; the bypassed inputs
    # and everything else as for tiny, whose conv2 slices cut the same links
    assert grouped_fwd[1] - plain.summary["link_bytes_forward"][1] == psum(4) - psum(8)
    assert grouped_bwd[1] - plain.summary["link_bytes_backward"][1] == errors(4) - errors(8)
    assert grouped_fwd[2] == plain.summary["link_bytes_forward"][2]


def test_an_ocp_grouped_layer_reads_its_group_s_inputs_only():
    """A grouped first layer (2 inputs < OCP_BELOW_IN_CHANNELS, 6 outputs: OCP): each slice
    owns output channels of one group and keeps only that group's input channel."""
    network = infer("ocp-grouped", (2, 8, 8), [
        conv("conv1", 6, 3, pad=1, groups=2), Layer("relu", "r1"), Layer("maxpool", "p1", kernel=2, stride=2),
        conv("conv2", 4, 3, pad=1), Layer("relu", "r2"), Layer("flatten", "f"), Layer("linear", "fc", out_channels=10)])
    mapped = map_network(network, parse_cluster("ecp5-85:4"))
    conv1 = [(n.index, s) for n in mapped.nodes for s in n.slices if s.layer == "conv1"]
    assert [(i, s.mode, s.in_range, s.out_range) for i, s in conv1] == [
        (0, "ocp", (0, 1), (0, 3)), (0, "ocp", (1, 2), (3, 5)), (1, "ocp", (1, 2), (5, 6))]
    assert all(s.act_ram_words == s.samples_held * 8 * 8 and s.weight_words == s.out_channels * 9 for _, s in conv1)
    assert mapped.summary["macs_per_sample"] == network.macs


def test_a_grouped_ocp_layer_is_refused_for_the_generator_before_partitioning():
    network = infer("ocp-grouped", (2, 8, 8), [
        conv("conv1", 6, 3, pad=1, groups=2), Layer("relu", "r1"), Layer("flatten", "f"),
        Layer("linear", "fc", out_channels=10)])
    with pytest.raises(SpecError, match=r"^network 'ocp-grouped' on cluster 'ecp5-85:4': layer 'conv1': grouped "
                                        r"convolution \(groups=2\) under OCP is not built by the hardware "
                                        r"generator \(python -m mapping maps it without --for-hardware\)$"):
        map_network(network, parse_cluster("ecp5-85:4"), **GENERATOR_OPTIONS)


def test_the_generator_s_grouped_slices_have_partial_sum_beats_inside_one_group():
    """With GENERATOR_OPTIONS a grouped ICP layer's P divides OC / G on every slice; the model's
    own choice here (P = 3 for groups of 7 channels) is refused by name for the generator."""
    network = infer("odd-grouped", (1, 8, 8), [
        conv("conv1", 4, 3, pad=1), Layer("relu", "r1"),
        conv("conv2", 14, 3, pad=1, groups=2), Layer("relu", "r2"), Layer("flatten", "f"),
        Layer("linear", "fc", out_channels=10)])
    cluster = parse_cluster("ecp5-85:5")
    model = [s for n in map_network(network, cluster).nodes for s in n.slices if s.layer == "conv2"]
    assert {s.fp.ces for s in model} == {3}
    assert memories.generator_problem(model[0]) == (
        "layer 'conv2': its engines' 3 partial-sum lanes do not divide a group's 7 output channels")
    built = [s for n in map_network(network, cluster, **GENERATOR_OPTIONS).nodes for s in n.slices
             if s.layer == "conv2"]
    assert all(7 % s.fp.ces == 0 for s in built) and memories.generator_problem(built[0]) is None


def test_training_constants(tiny4):
    t = tiny4.nodes[0].training
    assert (t.batch, t.lr, t.lr_constant) == (1, 0.01, 655)


def test_mask_bits_are_the_sfus():
    """Per pooled output a 2-bit window index and the winner's ReLU bit (hw/node/sfu.py); without
    a pool one ReLU bit per conv output."""
    plans = {p.name: p for p in plan_layers(zoo.vgg16())}
    assert balance.mask_bits(plans["conv1_2"], 64) == 64 * 112 * 112 * 3
    assert balance.mask_bits(plans["conv1_1"], 64) == 64 * 224 * 224


def test_a_node_must_fit_with_its_link_cores():
    # lenet-digits on two 45F: node 1 alone needs about 46,130 LUT4, its link core 4,300 more
    message = ("network 'lenet-digits' on cluster 'ecp5-45:2': node 1 (lfe5um5g-45f) needs about 50,430 LUTs "
               "(3 layer slices, 57 multipliers, distributed RAM and 1 link core), more than its 43,848")
    with pytest.raises(SpecError) as refused:
        map_network(zoo.lenet_digits(), parse_cluster("ecp5-45:2"), **GENERATOR_OPTIONS)
    assert str(refused.value) == message


def test_update_lanes_widen_only_into_the_luts_the_link_cores_leave():
    mapping = map_network(zoo.lenet_digits(), parse_cluster("ecp5-85:2"), **GENERATOR_OPTIONS)
    node = mapping.nodes[1]  # one neighbour; its walks still cost it 85 cycles a sample
    assert [s.update_lanes for s in node.slices] == [2, 8, 1]
    room = LOGIC_FRACTION * get_device(node.device).lut - node.estimate.lut - LINK_CORE_LUT["ecp5"]
    assert 0 <= room < UPDATE_LANE_LUT["ecp5"]  # another lane would take the link core's LUTs


def test_vectors_and_eb_windows_past_their_widths_are_planned_in_chunks():
    """VGG-16's fc6 and fc7 hand their 4,096 outputs on as 1,024 x 1 x 4 maps (ICP, the next
    layer flattening them), fc8's stay one word (the loss takes them); conv4_x and conv5_x's
    EB windows (512 x 3 x 3 taps) go in chunks of 455 channels, the first layer has no EB."""
    plans = {p.name: p for p in plan_layers(zoo.vgg16())}
    assert [(p.name, p.mode, p.flatten_from, p.out_map) for p in plans.values() if p.kind == "fc"] == [
        ("fc6", "icp", (512, 7, 7), (1024, 1, 4)), ("fc7", "icp", (1024, 1, 4), (1024, 1, 4)),
        ("fc8", "icp", (1024, 1, 4), None)]
    assert {name for name, p in plans.items() if p.eb_chunk == 455} == {
        f"conv{stage}_{n}" for stage in (4, 5) for n in (1, 2, 3)}
    assert all(p.eb_chunk == 0 for name, p in plans.items() if not name.startswith(("conv4", "conv5")))
    # A width of 2 words: 24 outputs as the fewest pixels of at most 2 channels.
    assert [p.out_map for p in plan_layers(zoo.lenet_digits(), vector_words=2)] == [None, None, (2, 1, 16), None]


@pytest.mark.parametrize("option, value", [("vector_words", 0), ("window_words", 2.5)])
def test_chunk_widths_are_refused_unless_positive_integers(option, value):
    with pytest.raises(SpecError, match=rf"^{option} must be a positive integer, got {value!r}$"):
        map_network(zoo.tiny(), parse_cluster("vc709:1"), **{option: value})
