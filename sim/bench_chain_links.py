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

from functools import partial

import pytest
from amaranth.hdl import ClockDomain, ClockSignal, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.link.chain import LinkedNode, chain_link_config
from hw.link.ecp5_serdes import SERDES_MODULE, ECP5SerdesPhy, write_serdes_verilog
from hw.link.endpoint import LinkEndpoint
from hw.memory.update_gate import COUNT_BITS
from hw.node.top import Node
from hw.synth import synthesize
from mapping import link_model, zoo
from mapping.cluster import parse_cluster
from mapping.golden import random_data
from mapping.mapper import map_network
from sim.chain import CHAIN, STOPPING_UPDATE_OPTIONS, assert_bit_exact, cycles_per_sample, train_chain
from sim.chain_links import LinkedChain
from sim.serdes_synth import place_on_ecp5_85, synthesize_with_serdes

pytestmark = pytest.mark.bench

SAMPLES, LR = 12, 0.05


def _mapping():
    return map_network(zoo.tiny(), parse_cluster(CHAIN), batch=SAMPLES, lr=LR, **STOPPING_UPDATE_OPTIONS)


def _rates(mapping, links):
    network = zoo.tiny()
    inputs, labels, params = random_data(network, SAMPLES, 4)
    run = train_chain(network, mapping, inputs, labels, params, links=links, deadline=2_000_000)
    assert_bit_exact(run.params, run.golden, params)
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
    assert all(abs(f / d - 1) <= 0.02 for f, d in zip(fast, direct))   # the goal: within 2%


@pytest.mark.usefixtures("unelaborated")
def test_link_core_resources_per_node():
    """Yosys synth_ecp5 of the LinkEndpoints each node of the default chain carries (16-bit lanes,
    buffers sized for the mapping's PHY latency), each on its own with both directions of every
    channel; inside a node the half a side never uses is removed (see the SERDES node below)."""
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


PADS = ("tx_p", "tx_n", "rx_p", "rx_n", "refclk_p", "refclk_n")


class SerdesNode(wiring.Component):
    """A :class:`LinkedNode` whose two links each run on an ECP5 SERDES PHY, one DCU per
    neighbour (its own reference clock), the node and the SERDES sequencers on ``sys_clk``."""

    def __init__(self, config):
        self.linked = LinkedNode(config, family="ecp5")
        self.sides = list(self.linked.links)
        self.cores = [(f"{SERDES_MODULE}_{side}", partial(write_serdes_verilog, dual=dual, channel=0))
                      for dual, side in enumerate(self.sides)]
        super().__init__({"sys_clk": In(1), "total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS),
                          **{f"{side}_{pad}": (Out(1) if pad.startswith("tx") else In(1))
                             for side in self.sides for pad in PADS},
                          **{f"{side}_link_up": Out(1) for side in self.sides}})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        m.d.comb += [ClockSignal("sync").eq(self.sys_clk), ResetSignal("sync").eq(0)]
        m.submodules.linked = linked = self.linked
        m.d.comb += [linked.total_samples.eq(self.total_samples), self.updates.eq(linked.updates)]
        for side, (module, _) in zip(self.sides, self.cores):
            m.domains += [ClockDomain(f"{side}_link"), ClockDomain(f"{side}_link_rx")]
            phy = m.submodules[f"{side}_serdes"] = ECP5SerdesPhy(f"{side}_link", f"{side}_link_rx", module=module)
            wiring.connect(m, getattr(linked, f"{side}_phy"), phy.link)
            m.d.comb += [ClockSignal(f"{side}_link").eq(phy.tx_clk), ClockSignal(f"{side}_link_rx").eq(phy.rx_clk),
                         ResetSignal(f"{side}_link").eq(~phy.ready), ResetSignal(f"{side}_link_rx").eq(~phy.ready),
                         getattr(self, f"{side}_link_up").eq(getattr(linked, f"{side}_link_up"))]
            for pad in PADS:
                if pad.startswith("tx"):
                    m.d.comb += getattr(self, f"{side}_{pad}").eq(getattr(phy, pad))
                else:
                    m.d.comb += getattr(phy, pad).eq(getattr(self, f"{side}_{pad}"))
        return m


def test_node_with_two_serdes_links_places_on_an_ecp5_85(tmp_path):
    """Node 1 of the default chain with its two link endpoints on two ECP5 SERDES channels:
    Yosys synth_ecp5 and nextpnr-ecp5 on an LFE5UM5G-85F; the links' share against the bare node."""
    config = _mapping().nodes[1]
    top = SerdesNode(config)
    total = synthesize_with_serdes(top, tmp_path, cores=top.cores, netlist="top.json")
    bare = synthesize(Node(config, family="ecp5"), "ecp5")
    print(f"\nnode 1 with two SERDES links: {total.lut} LUT4, {total.ff} FF, {total.bram} DP16KD, "
          f"{total.dsp} MULT18X18D, {total.cells.get('DCUA', 0)} DCUA")
    print(f"node 1 alone:                 {bare.lut} LUT4, {bare.ff} FF, {bare.bram} DP16KD, {bare.dsp} MULT18X18D")
    print(f"links and PHYs:               {total.lut - bare.lut} LUT4 ({(total.lut - bare.lut) / total.lut:.0%}), "
          f"{total.ff - bare.ff} FF ({(total.ff - bare.ff) / total.ff:.0%}), {total.bram - bare.bram} DP16KD")
    report = place_on_ecp5_85(tmp_path, freq_mhz=100)
    used = {k: v["used"] for k, v in report["utilization"].items() if v["used"]}
    print(f"placed and routed on LFE5UM5G-85F: {used}")
    print("fmax: " + ", ".join(f"{clock} {figures['achieved']:.1f} MHz" for clock, figures in report["fmax"].items()))
    assert used["DCUA"] == 2
