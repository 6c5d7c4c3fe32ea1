"""Benchmark: the default chain over link cores against the same chain over direct wires, and the
link cores' share of a node (issue 16).

    python -m pytest -m bench -s -p no:xdist sim/bench_chain_links.py

Cycles per sample of every node (``sim.chain.cycles_per_sample``, one mini-batch of SAMPLES):
over direct wires; over 16-bit links on the node clock (the mapping's link model predicts the
busiest link's line flits per sample); and over 32-bit links on a 700 MHz link clock (22.4 Gb/s
a direction, about the VC709's two SFP+ per neighbour), where the links have room and the
chain should run at its direct rate (goal: within 2%). Then the ECP5 resources of the link
endpoints each node carries.
"""

import pytest

from hw.link.chain import chain_link_config
from hw.link.endpoint import LinkEndpoint
from hw.node.top import Node
from hw.synth import synthesize
from mapping import link_model, zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network
from sim.chain import CHAIN, assert_bit_exact, cycles_per_sample, random_data, train_chain
from sim.chain_links import LinkedChain

pytestmark = pytest.mark.bench

SAMPLES, LR = 12, 0.05


def _mapping():
    return map_network(zoo.tiny(), parse_cluster(CHAIN), batch=SAMPLES, lr=LR, **GENERATOR_OPTIONS)


def _rates(mapping, links):
    network = zoo.tiny()
    inputs, labels, params = random_data(network, SAMPLES, 4)
    run = train_chain(network, mapping, inputs, labels, params, links=links, deadline=2_000_000)
    assert_bit_exact(run, params)
    return [cycles_per_sample(run, n) for n in range(len(mapping.nodes))], run


def test_chain_cycles_per_sample_over_links_against_direct_wires():
    mapping = _mapping()
    direct, _ = _rates(mapping, None)
    print(f"\n{CHAIN}, {SAMPLES} samples in one mini-batch, cycles per sample of nodes 0..3")
    print(f"direct wires:                      {direct}")
    slow, run = _rates(mapping, LinkedChain(lane_width=16, latency=4))
    s = mapping.summary
    model = [bits / link_model.LANE_WIDTH for bits in s["link_line_bits_forward"] + s["link_line_bits_backward"]]
    print(f"16-bit links on the node clock:    {slow} (model: busiest link {max(model):.0f} line flits "
          f"per sample; per link forward/backward {[round(f) for f in model]})")
    print("  frames per link (upstream end, downstream end): "
          + "; ".join(f"{a['frames_sent']}/{b['frames_sent']}" for a, b in run.link_counters))
    fast, run = _rates(mapping, LinkedChain(lane_width=32, latency=4, node_mhz=(100,) * 4, link_mhz=700))
    print(f"32-bit links at 700 MHz:           {fast} "
          f"({', '.join(f'{f / d - 1:+.1%}' for f, d in zip(fast, direct))} against direct)")


def test_link_core_resources_per_node():
    """Yosys synth_ecp5 of the LinkEndpoints each node of the default chain carries (16-bit lanes,
    buffers sized for the mapping's PHY latency)."""
    mapping = _mapping()
    nodes = [Node(cfg) for cfg in mapping.nodes]
    configs = [chain_link_config(a.down, link_model.LANE_WIDTH, link_model.PHY_LATENCY) for a in nodes[:-1]]
    cores = [synthesize(LinkEndpoint(config), "ecp5") for config in configs]
    for i, (config, core) in enumerate(zip(configs, cores)):
        print(f"\nlink {i} ({', '.join(f'{n} {w}' for n, w in config.channels)} bits; receive buffers "
              f"{config.receive_depth}, replay {config.replay_frames} frames): one endpoint {core.lut} LUT4, "
              f"{core.ff} FF, {core.bram} DP16KD, {core.cells.get('TRELLIS_DPR16X4', 0)} DPR16X4")
    for n in range(len(nodes)):
        ends = [cores[i] for i in (n - 1, n) if 0 <= i < len(cores)]
        print(f"node {n}: {len(ends)} link endpoints, {sum(c.lut for c in ends)} LUT4, "
              f"{sum(c.ff for c in ends)} FF, {sum(c.bram for c in ends)} DP16KD")
