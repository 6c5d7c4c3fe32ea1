"""A simulated chain's neighbours joined by link cores over the simulation PHY (hw/link/chain.py).

:class:`LinkedChain` says how: lane width, PHY latency, bit-error rate, a loss of lock, and the
clocks (every node and link on one clock, or each node on its own clock and each link end on a
link clock of its own). ``sim.chain.train_chain(..., links=LinkedChain(...))`` uses it.
"""

from dataclasses import dataclass

from hw.link.chain import attach_endpoint, chain_link_config, link_chain
from hw.link.layer import COUNTER_NAMES, LinkLayer, counters_layout
from hw.link.model_phy import SenderErrors, lane_errors, model_phy
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

    def errors(self):
        """The lanes' error parameters (:func:`hw.link.model_phy.lane_errors`)."""
        return {"ber": self.ber, "burst": self.burst, "lock_loss": self.lock_loss, "seed": self.seed}

    def join(self, m, nodes, gateware=False, first=0, cut=(False, False)):
        """Link cores between every pair of neighbours of ``nodes`` (already in ``m``): the
        :class:`SimulatedLinks` that drives their lanes. ``gateware``: lanes in logic
        (hw/link/model_phy.py, for the Verilator backend, one clock) instead of simulator
        processes. ``first``: the index of ``nodes[0]`` in the chain; ``cut``: whether the chain
        goes on before and after ``nodes`` (a part of a chain, sim/distributed.py): each such
        side gets its endpoint and the :class:`SenderErrors` of the lane it sends on
        (``SimulatedLinks.cuts``), the lanes themselves left to the caller."""
        lanes = SimulatedLinks(self)
        phy = lanes.phy
        if gateware:
            if self.node_mhz is not None:
                raise ValueError("nodes on clocks of their own run on the pysim backend only (the Verilator "
                                 "harness drives one clock)")
            phy = model_phy(self.lane_width, latency=self.latency, **self.errors())
        elif any(cut):
            raise ValueError("a chain cut at its lanes has its lanes in logic (gateware=True)")
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
                                 node_domains=domains, link_domains=domains and link_domains, first_link=first,
                                 ends=(not cut[0], not cut[1]))
        # before the first node: the downstream end (end 1) of the link before it; after the last: the upstream one
        for is_cut, node, link, end in ((cut[0], nodes[0], first - 1, 1),
                                        (cut[1], nodes[-1], first + len(nodes) - 1, 0)):
            if not is_cut:
                continue
            side = ("up", "down")[end]
            port = getattr(node, ("down", "up")[end])
            endpoint = LinkLayer(chain_link_config(port, self.lane_width, self.latency))
            m.submodules[f"link{link}_{side}"] = endpoint
            attach_endpoint(m, port, endpoint, upstream=not end)
            lane = SenderErrors(self.lane_width, **lane_errors(link, end, **self.errors()))
            m.submodules[f"link{link}_lane{end}"] = lane
            m.d.comb += lane.tx.eq(endpoint.phy.tx)
            lanes.cuts.append(Cut(link, side, endpoint, lane))
        return lanes


@dataclass(frozen=True)
class Cut:
    """A link of a chain cut at its lanes, seen from one part: the link's index, the side of
    the endpoint the part holds ("up": it sends on lane 0), the endpoint and the errors of the
    lane it sends on (the lane from the other part arrives from outside)."""
    link: int
    side: str
    endpoint: object
    errors: SenderErrors


class SimulatedLinks:
    """The PHY of a linked chain: two :class:`SimulatedLane` per link, driven by simulator
    processes on each sender's link clock. ``clocks``: {domain: period} besides ``sync``."""

    def __init__(self, spec):
        self.spec = spec
        self.clocks = {}
        self.links = []
        self.cuts = []
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

    def endpoints(self):
        """(link, end, side, endpoint) of every endpoint, the cut ones included."""
        ends = [(link.index, end, side, endpoint) for link in self.links
                for end, (side, endpoint) in enumerate((("up", link.upstream), ("down", link.downstream)))]
        return sorted(ends + [(cut.link, int(cut.side == "down"), cut.side, cut.endpoint) for cut in self.cuts],
                      key=lambda e: e[:2])

    def counter_ports(self):
        """(link, end, port name, layout) of the endpoints' counters as ChainTop shows them."""
        return [(link, end, f"link{link}_{side}_counters", counters_layout(endpoint.config))
                for link, end, side, endpoint in self.endpoints()]


def decode_counters(value, layout):
    """{name: count} of a counters struct read as one integer (the Verilator backend's ports)."""
    return {name: (value >> layout[name].offset) & ((1 << layout[name].width) - 1) for name in COUNTER_NAMES}
