"""A simulated chain's neighbours joined by link cores over the simulation PHY (hw/link/chain.py).

:class:`LinkedChain` says how: lane width, PHY latency, bit-error rate, a loss of lock, and the
clocks (every node and link on one clock, or each node on its own clock and each link end on a
link clock of its own). ``sim.chain.train_chain(..., links=LinkedChain(...))`` uses it.
"""

from dataclasses import dataclass

from hw.link.chain import link_chain
from hw.link.layer import COUNTER_NAMES, counters_layout
from hw.link.model_phy import model_phy
from hw.link.sim_phy import LaneErrors, SimulatedLane
from mapping.link_model import LinkCore, link_cycles_per_sample

# The downstream end of every link sends on a clock this much slower than the upstream end's:
# two boards' link clocks are never exactly equal (the elastic buffer absorbs it).
LINK_CLOCK_OFFSET = 0.0005
SYNC_MHZ = 100  # sim.testbench.simulate's clock, node 0's


@dataclass(frozen=True)
class LinkedChain:
    """``lane_width`` bits per flit, ``latency`` link cycles each way, ``ber`` and ``burst`` on
    every lane. ``lock_loss``: (link, first lane cycle, cycles) during which both lanes of that
    link lose lock. ``node_mhz``: each node's clock (node 0 stays in ``sync``, at 100 MHz); None runs every
    node and link core in ``sync`` (no clock crossings). ``link_mhz``: the link clock."""
    lane_width: int = 32
    latency: int = 4
    ber: float = 0.0
    burst: int = 1
    lock_loss: tuple = None
    node_mhz: tuple = None
    link_mhz: float = 125.0
    seed: int = 0

    def predicted_cycles(self, mapping):
        """Cycles per sample the mapping's link model predicts for ``mapping``'s chain over these
        links on one clock (a flit per node cycle), as ``sim.chain.cycles_per_sample`` measures
        them: the busiest link direction's line time, or the slowest node (with its weight
        update at a mini-batch of one, where every interval holds one; the median leaves them
        out otherwise)."""
        if self.node_mhz is not None:
            raise ValueError("the prediction is for a chain on one clock (node_mhz None)")
        s = mapping.summary
        core = LinkCore(lane_width=self.lane_width, phy_latency=self.latency, ber=self.ber)
        links = link_cycles_per_sample(zip(s["link_traffic_forward"], s["link_traffic_backward"]), core)
        return max([links] + [node.cycles_per_sample_with_updates if node.training.batch == 1 else
                              node.cycles_per_sample for node in mapping.nodes])

    def node_domains(self, count):
        if self.node_mhz is None:
            return ["sync"] * count
        if len(self.node_mhz) != count:
            raise ValueError(f"node_mhz gives {len(self.node_mhz)} clocks for {count} nodes")
        return ["sync"] + [f"node{n}" for n in range(1, count)]

    def join(self, m, nodes, gateware=False):
        """Link cores between every pair of neighbours of ``nodes`` (already in ``m``): the
        :class:`SimulatedLinks` that drives their lanes. ``gateware``: lanes in logic
        (hw/link/model_phy.py, for the Verilator backend, one clock) instead of simulator
        processes."""
        lanes = SimulatedLinks(self)
        phy = lanes.phy
        if gateware:
            if self.node_mhz is not None:
                raise ValueError("nodes on clocks of their own run on the pysim backend only (the Verilator "
                                 "harness drives one clock)")
            phy = model_phy(self.lane_width, latency=self.latency, ber=self.ber, burst=self.burst,
                            lock_loss=self.lock_loss, seed=self.seed)
        domains = None
        if self.node_mhz is not None:
            domains = self.node_domains(len(nodes))
            if self.node_mhz[0] != SYNC_MHZ:
                raise ValueError(f"node 0 runs on the testbench's {SYNC_MHZ} MHz clock, not {self.node_mhz[0]}")
            for n, mhz in enumerate(self.node_mhz[1:], start=1):
                lanes.clocks[domains[n]] = 1e-6 / mhz
            link_domains = [(f"link{i}a", f"link{i}b") for i in range(len(nodes) - 1)]
            for a, b in link_domains:
                lanes.clocks[a] = 1e-6 / self.link_mhz
                lanes.clocks[b] = 1e-6 / self.link_mhz * (1 + LINK_CLOCK_OFFSET)
        lanes.links = link_chain(m, nodes, phy, lane_width=self.lane_width, phy_latency=self.latency,
                                 node_domains=domains, link_domains=domains and link_domains)
        return lanes


class SimulatedLinks:
    """The PHY of a linked chain: two :class:`SimulatedLane` per link, driven by simulator
    processes on each sender's link clock. ``clocks``: {domain: period} besides ``sync``."""

    def __init__(self, spec):
        self.spec = spec
        self.clocks = {}
        self.links = []
        self.lanes = []   # (lane, sending endpoint, receiving endpoint, sender's link domain)

    def phy(self, m, link):
        spec = self.spec
        losses = ()
        if spec.lock_loss is not None and spec.lock_loss[0] == link.index:
            losses = (tuple(spec.lock_loss[1:]),)
        ends = (link.upstream, link.downstream)
        for end in (0, 1):
            lane = SimulatedLane(spec.lane_width, spec.latency, LaneErrors(spec.ber, spec.burst, losses),
                                 seed=spec.seed * 100 + 2 * link.index + end + 1)
            self.lanes.append((lane, ends[end], ends[1 - end], link.tx_domains[end]))

    def processes(self):
        return [lane.process(sender.phy.tx, receiver.phy.rx, receiver.phy.rx_valid, receiver.phy.rx_locked,
                             domain)
                for lane, sender, receiver, domain in self.lanes]

    def counters(self, ctx):
        """Every endpoint's counters, link by link: [(upstream {name: value}, downstream {...})]."""
        return [tuple({name: int(ctx.get(getattr(end.counters, name))) for name in COUNTER_NAMES}
                      for end in (link.upstream, link.downstream)) for link in self.links]

    def counter_ports(self):
        """(link, end, port name, layout) of the endpoints' counters as ChainTop shows them."""
        return [(link.index, end, f"link{link.index}_{side}_counters", counters_layout(link.config))
                for link in self.links for end, side in enumerate(("up", "down"))]


def decode_counters(value, layout):
    """{name: count} of a counters struct read as one integer (the Verilator backend's ports)."""
    return {name: (value >> layout[name].offset) & ((1 << layout[name].width) - 1) for name in COUNTER_NAMES}
