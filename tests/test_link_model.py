"""The mapping's link model (mapping/link_model.py): the link core's frame arithmetic by hand, the
same figures as hw.link.protocol's, and the default chain's link traffic priced in line flits."""

import pytest

from hw.link.protocol import LinkConfig, receive_depth, replay_frames, round_trip_cycles, sized_config
from mapping import link_model
from mapping.cluster import parse_cluster
from mapping.link_model import LinkCore
from mapping.resources import link_core_blocks
from mapping.mapper import GENERATOR_OPTIONS, map_network, mapper_for_widths
from mapping.train import DEFAULT_BATCH, DEFAULT_LR
from mapping import zoo
from sim.chain_links import LinkedChain


def test_frame_arithmetic_by_hand():
    assert link_model.frame_flits(96, 16) == 3 + 6
    assert link_model.frame_flits(48, 32) == 3 + 2
    assert link_model.frame_flits(48, 16, words=16) == 3 + 16 * 3
    # ACK plus five 7-bit credit limits (receive buffers of 35 words): 35 bits in three flits
    assert link_model.control_frame_flits(5, 35, 16) == 3 + 3
    assert link_model.frame_efficiency(96, 16) == pytest.approx(96 / (9 * 16))
    assert link_model.frame_efficiency(96, 16, words=16) == pytest.approx(16 * 96 / (99 * 16))
    # act 48 and psum 96 bits, one each per round, control frame of 5 flits per 64 cycles, IDLE per 1024
    assert link_model.efficiency([(1, 48), (1, 96)], 16, 5) == pytest.approx(
        144 / ((6 + 9) / (1 - 5 / 64 - 1 / 1024) * 16))


def test_the_link_cores_sizing_is_the_models():
    config = LinkConfig((("act", 48), ("psum", 96), ("label", 16)), lane_width=16, receive_depth=35,
                        replay_frames=64)
    frames = [6, 9, 4]
    assert [config.frame_flits(c) for c in range(3)] == frames
    # frame + 1 + 2 (latency + 1 transmit register + 7 receive pipeline) + longest + ack_interval
    # + control frame + 2
    assert round_trip_cycles(config, 16, 1) == 9 + 1 + 2 * (16 + 1 + 7) + 9 + 64 + 5 + 2
    assert receive_depth(config, 16, 2) == -(-round_trip_cycles(config, 16, 2) // 4) + 1
    assert replay_frames(config, 16) == 64
    assert LinkConfig.receive_depth == link_model.BASE_RECEIVE_DEPTH


@pytest.mark.parametrize("widths, lane_width, latency, sized", [
    # the default chain's link 0 (docs/link_protocol.md): 256 words, 64 frames (the sequence window)
    ((48, 48, 16, 96, 128), 16, 16, (256, 64)),
    ((48, 48, 16, 96, 128), 32, 4, (176, 64)),
    ((16, 64, 48, 256, 64), 16, 16, (352, 64)),   # lenet-digits on ecp5-85:3, link 0
    ((16, 128, 128), 32, 16, (192, 128)),
])
def test_sized_buffers_are_sized_configs(widths, lane_width, latency, sized):
    config = sized_config([(f"c{i}", w) for i, w in enumerate(widths)], lane_width, latency)
    assert link_model.sized_buffers(widths, lane_width, latency) == sized == (config.receive_depth,
                                                                               config.replay_frames)


def test_bursts_fill_as_the_busiest_channel_paces_them():
    # lenet-digits' link 0 forward: the partial sums (256 words) fill 16 bursts; the 16 pixels,
    # arriving over the sample, go at each of those turns, one word a frame; the label alone
    traffic = [(1, 16), (16, 64), (256, 48)]
    assert link_model.burst_frames(traffic, 16) == [1, 16, 16]
    assert link_model.data_flits(traffic, 16, 16) == [(1, 3 + 1), (16, 16 * 3 + 16 * 4), (16, 16 * 3 + 256 * 3)]
    # with four turns a channel of 16 words takes four frames; 40 words alone fill three bursts
    assert link_model.burst_frames([(64, 96), (16, 48)], 16) == [4, 4]
    assert link_model.burst_frames([(40, 16)], 16) == [3]
    assert link_model.burst_frames([(40, 16)], 1) == [40]


def test_a_saturated_lane_by_hand():
    core = LinkCore(lane_width=16, phy_latency=16)
    forward, backward = [(64, 96)], [(64, 32)]
    # forward: 4 bursts of 16 words (99 flits each); the backward channel's ACKs and credits in
    # control frames of 3 + ceil(2 x 9 / 16) = 5 flits (receive buffers of 144 words), one per
    # ack_interval + the residual of a burst on the line (99 / 2) + 2 cycles: 3.6 a sample, fewer
    # than the 4 backward bursts allow; an IDLE per 1024 - 99 + 49.5 flits
    assert link_model.sized_buffers((96, 32), 16, 16) == (144, 128)
    assert link_model.control_frame_flits(2, 144, 16) == 5
    idle = 1 / (1024 - 99 + 99 / 2)
    timed = 4 * 99 / (1 - 5 / (64 + 99 / 2 + 2) - idle)
    assert link_model.sample_flits(forward, backward, core) == pytest.approx(timed)
    # one backward burst a sample makes two updates at most: two control frames
    assert link_model.sample_flits(forward, [(16, 32)], core) == pytest.approx((4 * 99 + 2 * 5) / (1 - idle))
    # 256 words of 128 bits back: a control frame per half receive buffer (40 words of 80), more
    # than one per interval; the longest frame is a burst of 128-bit words (131 flits)
    assert link_model.sized_buffers((96, 128), 16, 16) == (80, 64)
    assert link_model.sample_flits(forward, [(256, 128)], core) == pytest.approx(
        (4 * 99 + 256 / 40 * 4) / (1 - 1 / (1024 - 131 + 99 / 2)))
    # nothing the other way: a refresh per refresh_interval
    alone = 4 * 99 / (1 - 4 / (512 + 99 / 2 + 2) - 1 / (1024 - 99 + 99 / 2))
    assert link_model.sample_flits(forward, [], core) == pytest.approx(alone)
    # the busier direction at one flit per node cycle, and at two
    assert link_model.link_cycles_per_sample([(forward, backward)], core) == pytest.approx(timed)
    fast = LinkCore(lane_width=16, phy_latency=16, flits_per_cycle=2.0)
    assert link_model.link_cycles_per_sample([(forward, backward)], fast) == pytest.approx(timed / 2)
    assert LinkCore.for_gbps(4.0, 125e6) == LinkCore(flits_per_cycle=2.0)


def test_errors_cost_a_round_trip_each():
    clean, lossy = LinkCore(), LinkCore(ber=1e-5)
    traffic = [(64, 96)]
    # one channel: a longest frame of 99 flits, a control frame of 3 + 1 flits
    trip = link_model.round_trip_cycles(99, 99, 4, 16, 64)
    events = 1 - (1 - 1e-5) ** 17
    assert link_model.sample_flits(traffic, [], lossy) == pytest.approx(
        link_model.sample_flits(traffic, [], clean) * (1 + events * trip))


def test_default_chain_link_traffic_in_line_flits():
    mapping = map_network(zoo.tiny(), parse_cluster("ecp5-85:2+ecp5-45:2"), batch=3, lr=0.05, **GENERATOR_OPTIONS)
    s = mapping.summary
    # link 0 forward, per sample: 16 pixels of 3 bypassed input channels (48 bits), 64 groups of
    # two 48-bit partial sums (96 bits), one label (16 bits); backward 16 errors of 8 channels and
    # 16 of 3
    assert s["link_traffic_forward"][0] == [[1, 16], [16, 48], [64, 96]]
    assert s["link_traffic_backward"][0] == [[16, 128], [16, 48]]
    assert s["link_line_bits_forward"][0] == pytest.approx(
        16 * link_model.sample_flits(s["link_traffic_forward"][0], s["link_traffic_backward"][0]))
    assert s["link_bytes_forward"][0] == (16 * 48 + 64 * 96 + 16) / 8
    # link 1 joins an ECP5-85 to an ECP5-45 Versa, whose lane carries 4 Gb/s of flit bits (8b/10b
    # at 5 Gb/s): the chain is bound by that link's line rate
    assert s["limited_by"] == "link bandwidth"
    assert s["samples_per_s"] == pytest.approx(4e9 / s["link_line_bits_forward"][1])
    assert s["link_utilisation"] == pytest.approx(1.0)


def test_link_core_block_ram_is_its_receive_buffers_and_replay_ring():
    # The default chain's link 0 at 16 bits, 16 cycles of latency: receive buffers of 256 words
    # (255 in RAM: 48, 48, 16, 96, 128 bits in 2 + 2 + 1 + 3 + 4 DP16KD of 512 x 36 or 1024 x 18)
    # and a replay ring of 512 flits (one). Yosys synth_ecp5 of that LinkLayer, every channel's
    # buffer kept: 13 DP16KD (the ring of frame starts and the receiver's ring in distributed RAM).
    channels = [48, 48, 16, 96, 128]
    assert link_core_blocks(channels, channels, "ecp5") == 13
    # in a node an endpoint keeps the buffers of what it receives: the default chain's nodes
    # hold 7, 7 + 6, 6 + 5 and 6 blocks of link cores (with single-word frames, 35-word
    # buffers in distributed RAM, one each)
    mapping = map_network(zoo.tiny(), parse_cluster("ecp5-85:2+ecp5-45:2"), batch=3, lr=0.05, **GENERATOR_OPTIONS)
    assert [node["link_blocks"] for node in mapping.summary["per_node"]] == [7, 13, 11, 6]


def test_the_model_is_the_verilator_chains_rate_over_links():
    """The model against one measured figure (docs/link_protocol.md, "Model against the
    hardware"): lenet-digits on ecp5-85:3 over 16-bit links with 16 cycles of PHY latency,
    `python -m sim.train --network lenet-digits --cluster ecp5-85:3 --data digits --samples 40
    --links` on Verilator: 960 cycles per sample (536 over wires; 1,747 before bursts), link 0
    forward the busiest direction. Tolerance 2%."""
    mapping = mapper_for_widths(None, None)(zoo.lenet_digits(), parse_cluster("ecp5-85:3"), batch=DEFAULT_BATCH,
                                            lr=DEFAULT_LR, **GENERATOR_OPTIONS)
    assert LinkedChain(lane_width=16, latency=16).predicted_cycles(mapping) == pytest.approx(960, rel=0.02)
