"""Neighbouring nodes joined by link cores: every stream of a ChainLink multiplexed over one
full-duplex lane.

A link between node i and node i+1 carries every stream :func:`hw.node.ports.link_streams`
lists for ``nodes[i].down``: the forward ones (act, psum, ocp, label, weight-balancing streams
whose host lies upstream) leave through the upstream endpoint's ``tx`` and arrive at the
downstream endpoint's ``rx``; the backward ones (err, zerr, epsum, the others) the other way.
Both endpoints are built from one :class:`~hw.link.protocol.LinkConfig` whose channels are all
of those streams, so each endpoint has a sender and a receive buffer for every channel and uses
one side of each (the unused side never sees a word; see docs/link_protocol.md).
"""

from dataclasses import dataclass

from amaranth.hdl import Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping import link_model
from mapping.errors import SpecError

from ..memory.update_gate import COUNT_BITS
from ..node.ports import link_streams
from ..node.top import Node, check_chain
from .endpoint import LinkEndpoint
from .layer import LinkLayer
from .protocol import LinkConfig, sized_config
from .signatures import PhySignature


def channel_name(path):
    """The link channel of the stream at ``path`` in a ChainLink (member names joined)."""
    return "_".join(path)


def chain_link_config(port, lane_width=32, phy_latency=8):
    """The LinkConfig of the link on ChainLink ``port`` (either end's: the channels in the order
    of their names, since the two ends list their members in different orders and a frame names
    its channel by index), its receive and replay buffers sized for ``phy_latency`` link cycles
    each way by the protocol's formulas."""
    channels = sorted((channel_name(path), Shape.cast(stream.payload.shape()).width)
                      for path, _, stream in link_streams(port))
    try:
        return sized_config(channels, lane_width, phy_latency)
    except ValueError as error:  # a user's lane width: one line, not a traceback
        raise SpecError(f"a link of {len(channels)} channels on a {lane_width}-bit lane: {error}") from None


def attach_endpoint(m, port, endpoint, upstream):
    """Join ChainLink ``port`` of a node to link ``endpoint``: the streams this end produces into
    ``endpoint.tx``, the ones it consumes from ``endpoint.rx``. ``upstream``: the port is the
    upstream node's ``down`` (else the downstream node's ``up``)."""
    for path, downstream, stream in link_streams(port):
        name = channel_name(path)
        if downstream == upstream:
            channel = getattr(endpoint.tx, name)
            m.d.comb += [channel.payload.eq(stream.payload), channel.valid.eq(stream.valid),
                         stream.ready.eq(channel.ready)]
        else:
            channel = getattr(endpoint.rx, name)
            m.d.comb += [stream.payload.eq(channel.payload), stream.valid.eq(channel.valid),
                         channel.ready.eq(stream.ready)]


@dataclass(frozen=True)
class NeighbourLink:
    """The link between node ``index`` and node ``index + 1``: its config and both endpoints
    (``upstream`` on node ``index``), each sending on its link clock ``tx_domains[end]``."""
    index: int
    config: LinkConfig
    upstream: wiring.Component
    downstream: wiring.Component
    tx_domains: tuple


def link_chain(m, nodes, phy, *, lane_width=32, phy_latency=8, node_domains=None, link_domains=None,
               fifo_depth=4, first_link=0, ends=(True, True)):
    """Join every node's ``down`` port to its successor's ``up`` port through two link endpoints
    and a PHY; returns the :class:`NeighbourLink` of every neighbour pair.

    ``phy(m, link)`` joins ``link.upstream.phy`` and ``link.downstream.phy`` (a lane each way).
    ``node_domains``: each node's clock domain; None runs nodes and links in ``sync`` with
    :class:`LinkLayer` endpoints (no clock crossings). Otherwise every endpoint is a
    :class:`LinkEndpoint` between its node's clock and its link clock, ``link_domains[i]`` =
    (upstream, downstream) link clocks of link i; each end receives on its partner's link clock
    (forwarded, as a receiver recovers it).

    ``first_link``: the index of the first link (``nodes`` a part of a longer chain, whose
    ``ends`` say whether they end the chain, as :func:`~hw.node.top.check_chain`).
    """
    check_chain(nodes, ends)
    links = []
    for i, (a, b) in enumerate(zip(nodes, nodes[1:]), start=first_link):
        config = chain_link_config(a.down, lane_width, phy_latency)
        if node_domains is None:
            endpoints, tx_domains = (LinkLayer(config), LinkLayer(config)), ("sync", "sync")
        else:
            k = i - first_link
            tx_domains = tuple(link_domains[k])
            endpoints = tuple(LinkEndpoint(config, node_domains[k + end], tx_domains[end], tx_domains[1 - end],
                                           fifo_depth=fifo_depth) for end in (0, 1))
        m.submodules[f"link{i}_up"], m.submodules[f"link{i}_down"] = endpoints
        attach_endpoint(m, a.down, endpoints[0], upstream=True)
        attach_endpoint(m, b.up, endpoints[1], upstream=False)
        link = NeighbourLink(i, config, *endpoints, tx_domains)
        phy(m, link)
        links.append(link)
    return links


class LinkedNode(wiring.Component):
    """One node as its FPGA sees the chain: the :class:`~hw.node.top.Node` with a
    :class:`LinkEndpoint` on each chain port that faces a neighbour (``up_phy``, ``down_phy``:
    :class:`PhySignature` ports for the PHYs; ``up_link_up``, ``down_link_up``). Node 0's ``up``
    port, the images and labels from the host, stays a ChainLink port, and the node's ``dram``
    port (its ``dram_queues``) passes through.

    Clock domains: the node in ``sync``; each endpoint's link clock ``{side}_link`` and receive
    clock ``{side}_link_rx`` (the PHY's word and recovered clocks).
    """

    def __init__(self, config, *, lane_width=link_model.LANE_WIDTH, phy_latency=link_model.PHY_LATENCY,
                 params=None, family=None):
        self.node = Node(config, params=params, family=family)
        self.dram_queues = self.node.dram_queues
        self.dram_init, self.dram_traffic = self.node.dram_init, self.node.dram_traffic
        members = {"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS)}
        if self.dram_queues:
            members["dram"] = self.node.signature.members["dram"]
        self.links = {}
        for side in ("up", "down"):
            if side not in self.node.signature.members:
                continue
            if side == "up" and config.index == 0:
                members["up"] = self.node.signature.members["up"]
                continue
            self.links[side] = chain_link_config(getattr(self.node, side), lane_width, phy_latency)
            members[f"{side}_phy"] = Out(PhySignature(lane_width))
            members[f"{side}_link_up"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.node = node = self.node
        m.d.comb += [node.total_samples.eq(self.total_samples), self.updates.eq(node.updates)]
        if "up" not in self.links:
            connect(m, flipped(self.up), node.up)
        if self.dram_queues:
            connect(m, node.dram, flipped(self.dram))
        for side, config in self.links.items():
            endpoint = LinkEndpoint(config, "sync", f"{side}_link", f"{side}_link_rx")
            m.submodules[f"{side}_link"] = endpoint
            attach_endpoint(m, getattr(node, side), endpoint, upstream=side == "down")
            connect(m, endpoint.phy, flipped(getattr(self, f"{side}_phy")))
            m.d.comb += getattr(self, f"{side}_link_up").eq(endpoint.link_up)
        return m
