"""The default chain trains bit-exactly with every pair of neighbours joined by link cores over
the simulation PHY (issue 16), with bit errors, a loss of lock in the middle of a mini-batch and
nodes on different clocks."""

import pytest

from hw.link.chain import LinkedNode
from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.golden import random_data
from mapping.mapper import GENERATOR_OPTIONS, map_network
from sim.chain import CHAIN, assert_bit_exact, report, train_chain
from sim.chain_links import LinkedChain

BATCH, LR = 3, 0.05
SAMPLES = BATCH  # one mini-batch, the faults in it (a second repeats its dataflow)


def _train_over_links(links, seed):
    network = zoo.tiny()
    mapping = map_network(network, parse_cluster(CHAIN), batch=BATCH, lr=LR, **GENERATOR_OPTIONS)
    inputs, labels, params = random_data(network, SAMPLES, seed)
    run = train_chain(network, mapping, inputs, labels, params, links=links)
    print(f"\n{CHAIN} over links {links}: {run.cycles} cycles for {SAMPLES} samples\n{report(mapping, run)}")
    for i, ends in enumerate(run.link_counters):
        print(f"link {i}: " + "; ".join(" ".join(f"{k} {v}" for k, v in end.items()) for end in ends))
    assert_bit_exact(run.params, run.golden, params)
    return run


@pytest.mark.slow
def test_chain_over_lossy_links_with_nodes_on_different_clocks_trains_bit_exact():
    # Nodes at 100, 77, 100 and 77 MHz; every link end on a 125 MHz link clock, the downstream
    # ends 0.05 % slower than the upstream ones; bit errors on every lane, and both lanes of the
    # middle link lose lock for 200 cycles in the middle of the mini-batch. (One run for
    # all: each alone repeats the others' chain and dataflow. An error-free link's counters stay
    # zero in sim/test_link.py and through the host tool's links, sim/test_host_interface.py.)
    run = _train_over_links(LinkedChain(ber=1e-4, lock_loss=(1, 1000, 200), node_mhz=(100, 77, 100, 77), seed=2),
                            seed=2)
    ends = [end for pair in run.link_counters for end in pair]
    assert sum(end["replays"] for end in ends) > 0 and sum(end["crc_errors"] for end in ends) > 0
    assert run.link_counters[1][0]["retrains"] >= 1 and run.link_counters[1][1]["retrains"] >= 1


@pytest.mark.usefixtures("unelaborated")
def test_link_channels_of_the_default_chain():
    """Every stream between two neighbours is a channel of their link, both directions in one
    config, the same at both ends (channels in name order); a LinkedNode has a PHY port per neighbour (node 0's up port stays the host's)."""
    mapping = map_network(zoo.tiny(), parse_cluster(CHAIN), batch=BATCH, lr=LR, **GENERATOR_OPTIONS)
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
