"""MTrain's workflow (sub-operations, batch norm), latency model, Algorithms 1-2, HAP and figures."""

import dataclasses

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mtrain import paper
from mapping.mtrain.schedule import _data_locality_aware, accelerator_of, hap, hap_exchange, mtrain
from mapping.mtrain.workflow import (WORD_BYTES, Accelerator, balanced_ratio, convert, latency, stages_of,
                                     training_flop)


def test_stages_keep_batch_norm_and_residual_producers():
    stages = {s.name: s for s in stages_of(zoo.get("resnet18"))}
    assert stages["bn1"].batchwise and not stages["conv1"].batchwise
    # the block after layer1.0 reads both branches of its add: bn2 and the identity (bn1 of the stem)
    assert stages["layer1.1.conv1"].producers == ("layer1.0.bn2", "bn1")
    assert stages["layer2.0.down"].producers == ("layer1.1.bn2", "layer1.0.bn2", "bn1")


def test_sub_operations_per_branch_and_batch_norm_once():
    stages = stages_of(zoo.get("vgg16-bn"))
    flow = convert(stages, [3, 1])
    phases = [op.key for op in flow.ops if op.stage.name in ("conv1_2", "bn1_2")]
    assert sorted(phases, key=str) == sorted([
        ("conv1_2", "FP", 0), ("conv1_2", "FP", 1), ("conv1_2", "BP", 0), ("conv1_2", "BP", 1),
        ("conv1_2", "WU", 0), ("conv1_2", "WU", 1), ("bn1_2", "FP", None), ("bn1_2", "BP", None)], key=str)
    bn = flow.ops[flow.index[("bn1_2", "FP", None)]]
    # the batch norm gathers every branch: 3 and 1 samples of conv1_2's 64x224x224 output
    assert [size for _, size in bn.inputs] == [WORD_BYTES * 64 * 224 * 224 * 3, WORD_BYTES * 64 * 224 * 224]


def test_latency_hand_case():
    # tiny's conv1 alone, one sample on each of two branches
    stages = stages_of(zoo.get("tiny"))[:1]
    flow = convert(stages, [1, 1])
    fast = Accelerator("a", 1e9, 1e12, 1e9)
    mapping = {op.key: 0 for op in flow.ops}
    one_device = latency(flow, mapping, [fast, fast], 1e6)
    # conv1 of tiny: 4x1x3x3 on 8x8 = 2,304 MACs; FP and WU per branch (no BP for the first layer)
    assert one_device == pytest.approx(4 * 2 * 2304 / 1e9)
    mapping[("conv1", "WU", 1)] = 1
    # WU of branch 1 on device 1 receives from device 0 the FP's input (64 words, 256 B) and, this
    # being the last layer, the loss at its output (256 words, 1,024 B) and sends its gradients
    # (36 weights + 4 biases) to device 0, which runs the layer's FP: LatComm then LatComp,
    # starting when FP of branch 1 ends
    split = latency(flow, mapping, [fast, fast], 1e6)
    assert split == pytest.approx(2 * 2 * 2304 / 1e9 + (256 + 1024 + WORD_BYTES * 40) / 1e6 + 2 * 2304 / 1e9)


def test_images_come_from_the_data_set_accelerator():
    stages = stages_of(zoo.get("tiny"))[:1]
    flow = convert(stages, [1, 1])
    fast = Accelerator("a", 1e9, 1e12, 1e9)
    t = 2 * 2304 / 1e9   # one sub-operation of tiny's conv1
    mapping = {op.key: 0 for op in flow.ops}
    mapping[("conv1", "FP", 1)] = 1
    # FP of branch 1 on device 1 fetches its image (64 words) from device 0, the data set's
    # accelerator (the first of two equal ones), and ends at 256 us + t. Device 0 runs both WUs:
    # each sends its gradients (40 words) to device 1, which runs an FP of the layer; WU 1 also
    # receives branch 1's input and output (64 + 256 words) and starts when FP 1 ends
    assert latency(flow, mapping, [fast, fast], 1e6) == pytest.approx(
        t + 256e-6 + (256 + 1024 + WORD_BYTES * 40) / 1e6 + t)


def test_hap_exchange_hand_cases():
    conv1, conv2 = stages_of(zoo.get("tiny"))[:2]
    # conv2, batch 4, two shards, a quarter of the batch off the host: 64 words in and 128 out
    # per sample, 296 weights. DP: FP and BP each move the off-host quarter of input and output,
    # 2 x 0.25 x 4 x 4 x 192 = 1,536 B, plus gradients in and weights out, 2 x 1 x 4 x 296 =
    # 2,368 B. TP: the other shard receives the whole input and sends its quarter of the
    # output, 2 x (4 x 4 x 64 + 0.25 x 4 x 4 x 128) = 3,072 B
    assert hap_exchange(conv2, 4, 2, 0.25) == ("TP", 3072)
    # conv1 has no BP and 40 weights: DP 0.25 x 4 x 4 x (64 + 256) + 2 x 4 x 40 = 1,600 B,
    # TP 4 x 4 x 64 + 0.25 x 4 x 4 x 256 = 2,048 B
    assert hap_exchange(conv1, 4, 2, 0.25) == ("DP", 1600)


def test_batch_norm_and_add_arithmetic():
    net = zoo.get("resnet18")
    n = 64 * 112 * 112   # bn1's output elements
    assert net["bn1"].elementwise_ops == (7 * n, 7 * n, 2 * n)
    assert net["layer1.0.add"].elementwise_ops == (64 * 56 * 56, 0, 0)
    assert net["conv1"].elementwise_ops == (0, 0, 0)
    bn1 = next(s for s in stages_of(net) if s.name == "bn1")
    assert (bn1.flop("FP"), bn1.flop("BP")) == (7 * n, 9 * n)


def test_training_flop_counts_three_phases_but_no_first_backward():
    stages = stages_of(zoo.get("lenet-digits"))
    macs = [s.macs for s in stages]
    assert training_flop(stages, 2) == 2 * 2 * (2 * macs[0] + 3 * sum(macs[1:]))


def test_pe_based_initial_ratio():
    assert balanced_ratio([5952, 1728], 64) == [50, 14]
    assert balanced_ratio([2520, 900, 160], 16) == [11, 4, 1]


def test_board_without_dram_is_refused():
    with pytest.raises(SpecError) as error:
        accelerator_of(parse_cluster("ecp5-85").devices[0])
    assert str(error.value) == ("device lfe5um5g-85f has no off-chip DRAM, where MTrain's training IPs "
                                "keep activations and losses until the weight update")


def test_dram_budget_is_respected():
    devices = parse_cluster("zcu102+zc706+xc7z015").devices
    # VGG-16 at batch 16 needs 2.56 GB on one accelerator: with 2 GB the ZU9EG cannot hold it
    devices = [dataclasses.replace(devices[0], dram_gb=2.0)] + list(devices[1:])
    schedule = mtrain(stages_of(zoo.get("vgg16-bn")), devices, 16, 3e9)
    assert all(use <= d.dram_gb * 1e9 for use, d in zip(schedule.dram_bytes, devices))
    assert schedule.dram_bytes[1] > 0 and schedule.dram_bytes[2] > 0


def test_remapping_and_repartition_never_lose():
    stages = stages_of(zoo.get("resnet18"))
    schedule = mtrain(stages, parse_cluster("u50lv+u30").devices, 64, 0.5e9)
    assert schedule.steps == sorted(schedule.steps, reverse=True)
    assert schedule.steps[-1] < schedule.steps[0]


def test_hap_is_synchronous_and_slower_at_low_bandwidth():
    stages = stages_of(zoo.get("resnet18"))
    devices = parse_cluster("u50lv+u30").devices
    slow = hap(stages, devices, 64, 0.5e9)
    fast = hap(stages, devices, 64, 15e9)
    assert slow.seconds > fast.seconds and sum(slow.ratio) == 64 and all(slow.ratio)
    assert set(slow.plan.values()) <= {"DP", "TP"}
    # synchronous: every layer waits for its slowest shard, so the computing part of the
    # mini-batch is at least the busiest accelerator's total
    assert slow.seconds - slow.moved_bytes / 0.5e9 >= max(slow.busy) * (1 - 1e-9)
    # fc: gradients in and weights back (2 x 4 B x 513,000) cost more than sending the U30 the
    # whole 64 x 512 input forward and back; conv1's 9,408 weights cost less than the whole images
    assert slow.plan["fc"] == "TP" and slow.plan["conv1"] == "DP"


def test_paper_figures_pinned():
    figures = paper.figures(progress=lambda text: None)
    assert len(figures) == 17
    assert [f.label for f in figures if f.within] == [
        "Table III AlexNet cluster 1 GFLOPS", "Table III VGG-16 cluster 1 GFLOPS",
        "Fig. 8 AlexNet cluster 1 best GFLOPS", "Fig. 8 VGG-16 cluster 1 best GFLOPS",
        "Fig. 8 VGG-16 cluster 3 GFLOPS at 0.5 GB/s", "Fig. 8 AlexNet cluster 1 gain 0.125 -> 15 GB/s",
        "Figs. 9-11 lowest speedup over HAP at 15 GB/s", "Figs. 9-11 highest speedup over HAP at 15 GB/s"]
    # the table in docs/accpar_mtrain.md
    assert [f.ours for f in figures] == pytest.approx([
        743.82, 275.87, 707.47, 288.54, 674.16, 280.59, 730.6, 754.39, 748.6, 264.19, 255.98, 996.9, 948.3,
        1.23, 1.02, 1.05, 2.25], abs=0.01)


def test_low_bandwidth_centralises_and_beats_hap():
    # at 0.125 GB/s MTrain leaves the U30 almost idle (what it would receive costs more than it
    # computes), while HAP must give it a share of every layer and wait for it
    schedule, _, _ = paper.run("AlexNet", 1, 0.125)
    assert schedule.busy[1] < 0.15 * schedule.busy[0]
    assert paper.speedup_over_hap("AlexNet", 1, 0.125) == pytest.approx(1.73, abs=0.01)
    # AlexNet on cluster 2: the greedy splits the FC layers' FP before their WUs are mapped;
    # only moving a layer whole brings them back to one accelerator (it ended at 0.50x HAP)
    assert paper.speedup_over_hap("AlexNet", 2, 0.125) == pytest.approx(2.91, abs=0.01)


def test_data_locality_moves_a_split_layer_whole():
    # tiny's conv1 split over two equal accelerators, FP and WU of branch k on accelerator k, at
    # 1 kB/s. Every single move keeps a crossing: FP 1 alone on device 0 leaves WU 1 receiving its
    # input and loss (1,280 B) instead of FP 1 its image (256 B); WU 1 alone on device 0 receives
    # them too; a WU on the other device still sends gradients to the FP there. Moving the
    # layer whole to device 0 (holding the images) leaves no transfer: four sub-operations, 4t
    stages = stages_of(zoo.get("tiny"))[:1]
    flow = convert(stages, [1, 1])
    fast = Accelerator("a", 1e9, 1e12, 1e9)
    mapping = {op.key: op.key[2] for op in flow.ops}
    t = 2 * 2304 / 1e9
    for key in mapping:
        moved = {**mapping, key: 1 - mapping[key]}
        assert latency(flow, moved, [fast, fast], 1e3) > latency(flow, mapping, [fast, fast], 1e3)
    remapped, seconds = _data_locality_aware(flow, mapping, [fast, fast], 1e3)
    assert set(remapped.values()) == {0} and seconds == pytest.approx(4 * t)
