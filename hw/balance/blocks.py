"""Which weight rows cross which nodes, and the streams that carry them.

:func:`remote_blocks` (owner), :func:`hosted_blocks` (host) and :func:`relayed_blocks`
(the nodes in between) merge the WeightBlocks of one owner slice on one host into one
contiguous range, and refuse in one line what the generator does not build
(``mapping.memories.remote_rows_problem``). :class:`RowStreams` is the signature of
the three streams of one such range, the same on every node they cross.
"""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.errors import SpecError
from mapping.memories import hosted_groups, merge_blocks, relayed_groups, remote_groups, remote_rows_problem

from ..base.layouts import bank_layout, grads_layout
from ..memory.param_ram import WeightLayout


def remote_blocks(s):
    """The rows slice ``s`` keeps on other nodes, one merged WeightBlock per host, in row
    order (owner side)."""
    problem = remote_rows_problem(s.remote_weights, s)
    if problem:
        raise SpecError(problem)
    return [merge_blocks(group) for group in remote_groups(s)]


def _merged(blocks):
    """The WeightBlocks of one owner slice as one block of contiguous rows (its owner_slice
    cut to them); SpecError for rows the generator does not stream."""
    problem = remote_rows_problem(blocks, None)
    if problem:
        raise SpecError(problem)
    return merge_blocks(blocks)


def hosted_blocks(config):
    """The blocks a NodeConfig hosts, merged per owner slice, in chain order."""
    return [_merged(blocks) for blocks in hosted_groups(config)]


def relayed_blocks(config):
    """The blocks whose streams pass through a NodeConfig, merged per owner slice."""
    return [_merged(blocks) for blocks in relayed_groups(config)]


class RowStreams(wiring.Signature):
    """The streams between the host and the owner of a merged ``block``, seen from the host:
    ``fp`` and ``eb`` (out: one weight address of the owner's engines each, no ``eb`` for a
    layer without EB) and ``grad`` (in: an address counted from the block's first and its
    exact gradient products)."""

    def __init__(self, block):
        layout = WeightLayout.from_slice(block.owner_slice)
        rows = bank_layout(layout.banks, layout.words)
        self.block = block
        members = {"fp": Out(stream.Signature(rows))}
        if block.owner_slice.needs_eb:
            members["eb"] = Out(stream.Signature(rows))
        members["grad"] = In(stream.Signature(grads_layout(layout.rows, layout.banks, layout.words)))
        super().__init__(members)

    def __eq__(self, other):
        other = other.flip() if isinstance(other, wiring.FlippedSignature) else other
        return type(self) is type(other) and self.members == other.members

    def __hash__(self):
        return hash(tuple(self.members))

    @staticmethod
    def member_name(block):
        """The name of ``block``'s streams wherever they are one member among others: the
        owner slice's position, owner and host (unique on every node)."""
        return f"rows{block.owner_slice.position}_n{block.owner}_h{block.host}"
