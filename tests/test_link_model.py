"""The mapping's link model (mapping/link_model.py): the link core's frame arithmetic by hand, the
same figures as hw.link.protocol's, and the default chain's link traffic priced in line flits."""

import pytest

from hw.link.protocol import LinkConfig, receive_depth, replay_frames, round_trip_cycles
from mapping import link_model, zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network


def test_frame_arithmetic_by_hand():
    assert link_model.frame_flits(96, 16) == 3 + 6
    assert link_model.frame_flits(48, 32) == 3 + 2
    # ACK plus five 7-bit credit limits (receive buffers of 35 words): 35 bits in three flits
    assert link_model.control_frame_flits(5, 35, 16) == 3 + 3
    assert link_model.frame_efficiency(96, 16) == pytest.approx(96 / (9 * 16))
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


def test_default_chain_link_traffic_in_line_flits():
    mapping = map_network(zoo.tiny(), parse_cluster("ecp5-85:2+ecp5-45:2"), batch=3, lr=0.05, **GENERATOR_OPTIONS)
    s = mapping.summary
    # link 0 forward, per sample: 16 pixels of 3 bypassed input channels (48 bits, 6 flits),
    # 64 groups of two 48-bit partial sums (96 bits, 9 flits), one label (16 bits, 4 flits);
    # a control frame of 3 + ceil(3 x 7 / 16) = 5 flits per 64 cycles and an IDLE per 1024 flits.
    data = 16 * 6 + 64 * 9 + 4
    assert s["link_line_bits_forward"][0] == pytest.approx(16 * data / (1 - 5 / 64 - 1 / 1024))
    assert s["link_bytes_forward"][0] == (16 * 48 + 64 * 96 + 16) / 8
    # link 1 joins an ECP5-85 to an ECP5-45 Versa, whose lane carries 4 Gb/s of flit bits (8b/10b
    # at 5 Gb/s): the chain is bound by that link's line rate
    assert s["limited_by"] == "link bandwidth"
    assert s["samples_per_s"] == pytest.approx(4e9 / s["link_line_bits_forward"][1])
    assert s["link_utilisation"] == pytest.approx(1.0)
