"""A chain trains bit-exactly with its neighbours joined by link cores over the simulation PHY
(issue 16), with bit errors, a loss of lock in the middle of a mini-batch and nodes on
different clocks; the default chain's link channels."""

import pytest

from hw.link.chain import LinkedNode
from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.golden import random_data
from mapping.mapper import map_network
from sim.chain import CHAIN, CI_BITSTREAM, STOPPING_UPDATE_OPTIONS, assert_bit_exact, report, train_chain
from sim.chain_links import LinkedChain

BATCH, LR = 3, 0.05
SAMPLES = BATCH  # one mini-batch, the faults in it (a second repeats its dataflow)


def _train_over_links(links, seed):
    """micro on the CI bitstream's two nodes over ``links``: the smallest chain with a link."""
    network = zoo.micro()
    mapping = map_network(network, parse_cluster(CI_BITSTREAM["cluster"]), batch=BATCH, lr=LR,
                          max_multipliers=CI_BITSTREAM["max_multipliers"], **STOPPING_UPDATE_OPTIONS)
    inputs, labels, params = random_data(network, SAMPLES, seed)
    run = train_chain(network, mapping, inputs, labels, params, links=links)
    print(f"\nmicro over links {links}: {run.cycles} cycles for {SAMPLES} samples\n{report(mapping, run)}")
    for i, ends in enumerate(run.link_counters):
        print(f"link {i}: " + "; ".join(" ".join(f"{k} {v}" for k, v in end.items()) for end in ends))
    assert_bit_exact(run.params, run.golden, params)
    return run


@pytest.mark.slow
def test_chain_over_lossy_links_with_nodes_on_different_clocks_trains_bit_exact():
    # Nodes at 100 and 77 MHz; both link ends on a 125 MHz link clock, the downstream end 0.05 %
    # slower than the upstream one; bit errors on both lanes, which lose lock for 200 cycles in
    # the middle of the mini-batch. (One run for all: each alone repeats the others' chain and
    # dataflow. An error-free link's counters stay zero in sim/test_link.py and through the
    # host tool's links, sim/test_host_interface.py; the same faults on one clock, on the
    # Verilator backend: sim/test_verilator_chain.py.)
    run = _train_over_links(LinkedChain(ber=1e-3, lock_loss=(0, 1500, 200), node_mhz=(100, 77), seed=2), seed=2)
    (up, down), = run.link_counters
    assert up["replays"] + down["replays"] > 0 and up["crc_errors"] + down["crc_errors"] > 0
    assert up["retrains"] >= 1 and down["retrains"] >= 1


@pytest.mark.usefixtures("unelaborated")
def test_link_channels_of_the_default_chain():
    """Every stream between two neighbours is a channel of their link, both directions in one
    config, the same at both ends (channels in name order); a LinkedNode has a PHY port per neighbour (node 0's up port stays the host's)."""
    mapping = map_network(zoo.tiny(), parse_cluster(CHAIN), batch=BATCH, lr=LR, **STOPPING_UPDATE_OPTIONS)
    linked = [LinkedNode(cfg) for cfg in mapping.nodes]
    configs = [node.links["down"] for node in linked[:-1]]
    assert [config.channels for config in configs] == [
        (("act", 48), ("err", 48), ("label", 16), ("psum", 96), ("zerr", 128)),
        (("act", 16), ("err", 16), ("label", 16), ("psum", 96), ("zerr", 128)),
        (("act", 128), ("err", 128), ("label", 16))]
    assert [node.links["up"] for node in linked[1:]] == configs
    # 16-bit lanes, 16 cycles of PHY latency, bursts of 16 words: round trips of 270-384 cycles
    # (a label channel alone at full rate, 16 words per 19 flits, needs 256 credits)
    assert [(config.burst_words, config.receive_depth, config.replay_frames) for config in configs] == [
        (16, 256, 64), (16, 256, 64), (16, 256, 128)]
    assert [sorted(node.links) for node in linked] == [["down"], ["down", "up"], ["down", "up"], ["up"]]
    assert "up" in linked[0].signature.members and "up_phy" in linked[1].signature.members
