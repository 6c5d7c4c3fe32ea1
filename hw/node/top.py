"""The node top: every layer slice of one NodeConfig, chained, with the paper's two link pairs.

Slices are in layer order; consecutive slices on one node are the end of layer L
and the start of layer L+1, so inside the node only two streams join them: L's
finished activations forward (``act``) and L+1's input errors backward (``err``).
The node's own ports are the first slice's predecessor-facing ports and the last
slice's successor-facing ports (see hw/slice_unit.py for the channel names), plus
the labels, which enter node 0 with the images and travel to the last node, where
the loss turns the class scores into output errors. Until the link cores exist,
nodes are chained port to port (``connect_chain``).

Weight balancing adds, per range of rows a node keeps on another node, the
``bp_*`` channels of its slice unit and of the host's HostedRows (hw/weight_stream.py,
hw/bpram_host.py): rows for the owner's FP and EB engines towards the owner, their
gradients towards the host, on the forward or the backward link as the host lies.
Every node in between passes them on (``Relay``). The node renames them after the
block (:func:`balance_port`), the same on every node they cross.
"""

from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping.memories import LABEL_FIFO_DEPTH

from ..balance.hosted_rows import (HostedRows, Relay, balance_member,
                                   balance_streams, hosted_blocks,
                                   member_stream, relayed_blocks,
                                   towards_owner)
from ..base.checks import refuse
from ..memory.fifo import Fifo
from ..memory.update_gate import COUNT_BITS
from .loss import LABEL_BITS, LossUnit
from .slice_unit import SliceUnit, slice_ports

UPSTREAM_PORTS = ("act_in", "psum_in", "ocp_in", "err_out", "zerr_out", "epsum_out")
DOWNSTREAM_PORTS = ("act_out", "psum_out", "ocp_out", "err_in", "zerr_in", "epsum_in")


def balance_port(block, name):
    """Node port of a member ``name`` (hw/bpram_host.balance_member) of the owner's slice unit,
    the host's HostedRows or a Relay for ``block``: ``bp<layer>n<owner>_h<host>_<stream>_<end>``,
    unique on every node."""
    return f"bp{block.owner_slice.position}n{block.owner}{name[len('bp'):]}"


def balance_destination(block, name):
    """The node an output member ``name`` for ``block`` sends towards."""
    return block.owner if towards_owner(member_stream(name)) else block.host


class Node(wiring.Component):
    """``params``: the network's initial parameter words (golden layout) or None for zeros.
    ``family``: the device family for vendor primitives; None simulates."""

    def __init__(self, config, *, params=None, family=None):
        if not config.slices:
            refuse(self, f"node {config.index} has no layer slices")
        if config.chain_length < 1:
            refuse(self, f"node {config.index}: the NodeConfig does not say how long the chain is")
        self.config, self.params, self.family = config, params, family
        self.applies_loss = config.index == config.chain_length - 1
        self.units = [SliceUnit(s, config.formats, config.training, params=params, family=family)
                      for s in config.slices]
        self.hosted = [HostedRows(block, config.formats, config.training, params=params, family=family)
                       for block in hosted_blocks(config)]
        self.relays = [Relay(block, family=family) for block in relayed_blocks(config)]
        first, last = slice_ports(config.slices[0]), slice_ports(config.slices[-1])
        members = {"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS),
                   "label_in": In(stream.Signature(LABEL_BITS))}
        if not self.applies_loss:
            members["label_out"] = Out(stream.Signature(LABEL_BITS))
        for name in UPSTREAM_PORTS:
            if name in first:
                members[name] = _port(*first[name])
        for name in DOWNSTREAM_PORTS:
            if name in last and not (self.applies_loss and name in ("act_out", "err_in")):
                members[name] = _port(*last[name])
        # where each weight-balancing output port sends: connect_chain follows it
        self.balance_routes = {}
        for unit, block, name, member in self._balance_members():
            members[balance_port(block, name)] = member
            if name.endswith("_out"):
                self.balance_routes[balance_port(block, name)] = balance_destination(block, name)
        super().__init__(members)

    def _balance_members(self):
        """(unit, block, member name, member) of every weight-balancing port of the node's units."""
        owners = [(unit, block) for unit in self.units for block in unit.remote.blocks]
        others = [(unit, unit.block) for unit in self.hosted + self.relays]
        members = []
        for unit, block in owners + others:
            for stream_name in balance_streams(block):
                for end in ("in", "out"):
                    name = balance_member(block, stream_name, end)
                    if name in unit.signature.members:
                        members.append((unit, block, name, unit.signature.members[name]))
        return members

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        units = self.units
        for n, unit in enumerate(units):
            m.submodules[f"slice{n}_{unit.slice.layer}"] = unit
        for host in self.hosted:
            m.submodules[f"host_{host.rows.layer}_for{host.block.owner}"] = host
        for relay in self.relays:
            m.submodules[f"relay_{relay.block.layer}_for{relay.block.owner}_from{relay.block.host}"] = relay
        # Mini-batch updates every slice and hosted range of this node has applied.
        fewest = units[0].updates
        for unit in units + self.hosted:
            m.d.comb += unit.total_samples.eq(self.total_samples)
            fewest = Mux(unit.updates < fewest, unit.updates, fewest)
        m.d.comb += self.updates.eq(fewest)
        for unit, block, name, member in self._balance_members():
            port = getattr(self, balance_port(block, name))
            if member.flow == In:
                connect(m, flipped(port), getattr(unit, name))
            else:
                connect(m, getattr(unit, name), flipped(port))
        for upstream, downstream in zip(units, units[1:]):
            connect(m, upstream.act_out, downstream.act_in)
            connect(m, downstream.err_out, upstream.err_in)
        for name in UPSTREAM_PORTS:
            if name in self.signature.members:
                connect(m, flipped(getattr(self, name)), getattr(units[0], name))
        for name in DOWNSTREAM_PORTS:
            if name in self.signature.members:
                connect(m, getattr(units[-1], name), flipped(getattr(self, name)))

        labels = m.submodules.labels = Fifo(LABEL_BITS, LABEL_FIFO_DEPTH, family=self.family)
        connect(m, flipped(self.label_in), labels.i)
        if self.applies_loss:
            last = cfg.slices[-1]
            loss = m.submodules.loss = LossUnit(classes=last.out_shape[0], position=last.position,
                                                formats=cfg.formats)
            connect(m, units[-1].act_out, loss.scores)
            connect(m, loss.errors, units[-1].err_in)
            labels_out = loss.labels
        else:
            labels_out = self.label_out
        m.d.comb += [labels_out.payload.eq(labels.o.payload), labels_out.valid.eq(labels.o.valid),
                     labels.o.ready.eq(labels_out.ready)]
        return m


def _port(direction, layout):
    return (In if direction == "in" else Out)(stream.Signature(layout))


def connect_chain(m, nodes, link=None):
    """Port-to-port chain of Nodes: every successor-facing port meets its predecessor-facing twin.

    ``link(m, producer, consumer)`` connects one stream (default: directly); simulations
    use it to put random back-pressure on the links.
    """
    link = link or (lambda m, producer, consumer: connect(m, producer, consumer))
    unpaired = {(node.config.index, name) for node in nodes for name in node.signature.members
                if name.startswith("bp")}
    for i, node in enumerate(nodes):  # weight-balancing channels, one hop towards where they go
        for name, destination in node.balance_routes.items():
            j = i + (1 if destination > node.config.index else -1)
            twin = name[:-len("_out")] + "_in"
            if 0 <= j < len(nodes) and twin in nodes[j].signature.members:
                link(m, getattr(node, name), getattr(nodes[j], twin))
                unpaired -= {(node.config.index, name), (nodes[j].config.index, twin)}
    for a, b in zip(nodes, nodes[1:]):
        pairs = [("act_out", "act_in"), ("psum_out", "psum_in"), ("ocp_out", "ocp_in"),
                 ("err_in", "err_out"), ("zerr_in", "zerr_out"), ("epsum_in", "epsum_out")]
        for a_name, b_name in pairs:
            on_a, on_b = a_name in a.signature.members, b_name in b.signature.members
            if on_a != on_b:
                raise ValueError(f"nodes {a.config.index} and {b.config.index} disagree about the "
                                 f"'{a_name.rsplit('_', 1)[0]}' channel between them")
            if not on_a:
                continue
            if a_name.endswith("_out"):
                link(m, getattr(a, a_name), getattr(b, b_name))
            else:
                link(m, getattr(b, b_name), getattr(a, a_name))
        link(m, a.label_out, b.label_in)
    if unpaired:
        raise ValueError(f"weight-balancing ports with no partner on the next node towards their "
                         f"destination: {sorted(unpaired)}")
