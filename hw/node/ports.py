"""The chain-facing ports of slices and nodes: one :class:`ChainLink` per neighbour.

A ChainLink holds every logical channel between two neighbouring nodes (or slices),
each seen from the upstream side: the forward channels are outputs there, the
backward ones inputs.

forward (to the successor)             backward (to the predecessor)
  act    input bypass / finished         err    ICP: input errors [lo, C) (all of them on
         output activations                     the layer's first node); OCP: pooled-output
  psum   ICP partial sums (psum_bits)           errors [0, lo), or on the first node the
  ocp    OCP output channels [0, hi)            rounded input errors; at a layer boundary:
  label  the sample's class                     errors of the output
                                         zerr   ICP conv-output errors, bypassed backwards
                                         epsum  OCP partial input errors (psum_bits)

and, for weight balancing, one :class:`~hw.balance.blocks.RowStreams` per block of rows
whose streams cross the link, an output where its host lies upstream. A node's ``up``
port is ``In(ChainLink(...))`` and its ``down`` port ``Out(ChainLink(...))``, so
``connect(m, a.down, b.up)`` joins two neighbours, and a link core serialises exactly
the streams :func:`link_streams` lists.
"""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

UPSTREAM_FLOW = {"act": Out, "psum": Out, "ocp": Out, "label": Out, "err": In, "zerr": In, "epsum": In}
CHANNELS = tuple(UPSTREAM_FLOW)


class ChainLink(wiring.Signature):
    """``channels``: {channel name: payload layout} (names from :data:`CHANNELS`);
    ``rows``: {member name: RowStreams signature, as its host sees it} with the hosts'
    side: ``upstream_hosts`` the names whose host lies upstream."""

    def __init__(self, channels, rows=None, upstream_hosts=()):
        members = {}
        for name, layout in channels.items():
            if name not in UPSTREAM_FLOW:
                raise ValueError(f"chain link: unknown channel '{name}'")
            members[name] = UPSTREAM_FLOW[name](stream.Signature(layout))
        for name, streams in (rows or {}).items():
            members[name] = Out(streams) if name in upstream_hosts else In(streams)
        super().__init__(members)

    def __eq__(self, other):
        other = other.flip() if isinstance(other, wiring.FlippedSignature) else other
        return isinstance(other, ChainLink) and self.members == other.members

    def __hash__(self):
        return hash(tuple(self.members))


def link_streams(interface, flow=Out, path=()):
    """Every stream of ``interface`` (a ChainLink port, or a signature nested in one) as
    (path, downstream, stream): ``downstream`` is True where the upstream side produces it."""
    signature = interface.signature
    if isinstance(signature, wiring.FlippedSignature):
        signature = signature.flip()
    for name, member in signature.members.items():
        sub = getattr(interface, name)
        direction = member.flow if flow == Out else member.flow.flip()
        sub_signature = member.signature
        if isinstance(sub_signature, wiring.FlippedSignature):
            sub_signature = sub_signature.flip()
        if isinstance(sub_signature, stream.Signature):
            yield path + (name,), direction == Out, sub
        else:
            yield from link_streams(sub, direction, path + (name,))
