"""BPRAM and BGB: weight rows a node hosts for another node (paper 5.2.2, items 3 and 5).

:func:`remote_blocks` (owner), :func:`hosted_blocks` (host) and :func:`relayed_blocks`
(the nodes in between) merge the WeightBlocks of one owner slice on one host into one
contiguous range, and refuse in one line what the generator does not build
(``mapping.memories.remote_rows_problem``). :func:`balance_streams` gives the beats
of the three streams between host and owner, the same on every node they cross.

:class:`HostedRows` is the host's hardware for one such range: the rows in a
ParamRam laid out like the owner's LPRAM past its local rows, two
``hw.weight_stream.RowStreamer`` s that send them to the owner once per sample for
its FP (port A) and EB (port B) engines, and a GradientBuffer (the BGB) that sums
the gradient products the owner sends back and applies the SGD update to the BPRAM
through port B, exactly as an LGB updates an LPRAM (same rounding indices: the
rows keep their global channel numbers). Its UpdateGate takes the owner slice's
``fp_stale`` and the mini-batch size, so the rows streamed for FP of sample s are
weight version max(0, (s - fp_stale) // B) and those for EB version s // B, the
versions the owner's local rows have and ``mapping.golden.train`` assumes: a pass
for a sample past the boundary starts only after the update, and the update waits
until the boundary samples' passes are sent and their gradients summed.
"""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping.errors import SpecError
from mapping.memories import (RELAY_DEPTH, hosted_groups, merge_blocks,
                              relayed_groups, remote_groups,
                              remote_rows_problem)

from ..base.layouts import bank_layout, grads_layout
from ..memory.fifo import Fifo
from ..memory.grad_buffer import GradientBuffer
from ..memory.param_ram import ParamRam, WeightLayout, slice_weights
from ..memory.update_gate import COUNT_BITS, SampleGate, UpdateGate
from .weight_stream import RowStreamer


def _merged(blocks, owner=None):
    """The WeightBlocks of one owner slice as one block of contiguous rows (its owner_slice
    cut to them); SpecError for rows the generator does not stream."""
    problem = remote_rows_problem(blocks, owner)
    if problem:
        raise SpecError(problem)
    return merge_blocks(blocks)


def remote_blocks(s):
    """The rows slice ``s`` keeps on other nodes, one merged WeightBlock per host, in row
    order (owner side)."""
    problem = remote_rows_problem(s.remote_weights, s)
    if problem:
        raise SpecError(problem)
    return [merge_blocks(group) for group in remote_groups(s)]


def hosted_blocks(config):
    """The blocks a NodeConfig hosts, merged per owner slice, in chain order."""
    return [_merged(blocks) for blocks in hosted_groups(config)]


def relayed_blocks(config):
    """The blocks whose streams pass through a NodeConfig, merged per owner slice."""
    return [_merged(blocks) for blocks in relayed_groups(config)]


def balance_streams(block):
    """{stream: payload layout} between the host and the owner of a merged ``block``: ``fp``
    and ``eb`` (host to owner; one weight address of the owner's engines each, no ``eb``
    for a layer without EB) and ``grad`` (owner to host; an address counted from the
    block's first and its exact gradient products)."""
    layout = WeightLayout.from_slice(block.owner_slice)
    rows = bank_layout(layout.banks, layout.words)
    streams = {"fp": rows, "eb": rows, "grad": grads_layout(layout.rows, layout.banks, layout.words)}
    if not block.owner_slice.needs_eb:
        del streams["eb"]
    return streams


def towards_owner(stream_name):
    return stream_name != "grad"


def balance_member(block, stream_name, end):
    """Name of the ``end`` ("in"/"out") port of ``block``'s ``stream_name`` on the owner's
    slice unit, the host's HostedRows or a Relay: ``bp_h<host>_<stream>_<end>``."""
    return f"bp_h{block.host}_{stream_name}_{end}"


def member_stream(member):
    """The stream a :func:`balance_member` name carries."""
    return member.split("_")[2]


class Relay(wiring.Component):
    """The streams of a merged ``block`` through a node between its host and owner: each
    ``bp_h<host>_<stream>_in`` to ``..._out`` through a FIFO of RELAY_DEPTH beats, which
    passes one beat per cycle and registers the path (no combinational path crosses a
    node)."""

    def __init__(self, block, *, family=None):
        self.block, self.family = block, family
        self.streams = balance_streams(block)
        members = {}
        for name, layout in self.streams.items():
            members[balance_member(block, name, "in")] = In(stream.Signature(layout))
            members[balance_member(block, name, "out")] = Out(stream.Signature(layout))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for name, layout in self.streams.items():
            fifo = m.submodules[name] = Fifo(layout, RELAY_DEPTH, family=self.family)
            connect(m, flipped(getattr(self, balance_member(self.block, name, "in"))), fifo.i)
            connect(m, fifo.o, flipped(getattr(self, balance_member(self.block, name, "out"))))
        return m


class HostedRows(wiring.Component):
    """The BPRAM, BGB, row streamers and update gate of one merged hosted ``block``.

    Ports (the owner's ``bp_h<host>_*`` ports mirrored, :func:`balance_member`): ``fp_out`` /
    ``eb_out`` (beats to the owner's FP / EB engine; no ``eb_out`` for a layer without EB),
    ``grad_in`` (the
    owner's gradient beats, addresses renumbered from 0), ``total_samples``, ``updates``
    (mini-batch updates applied).
    ``params``: the network's initial parameter words (golden layout) or None for zeros.
    """

    def __init__(self, block, formats, training, *, params=None, family=None):
        rows = self.rows = block.owner_slice
        self.block, self.formats, self.training, self.family = block, formats, training, family
        self.layout = WeightLayout.from_slice(rows)
        self.bpram = ParamRam.from_slice(rows, init=slice_weights(rows, params)[0], family=family)
        members = {"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS)}
        for name, layout in balance_streams(block).items():
            flow, end = (Out, "out") if towards_owner(name) else (In, "in")
            members[balance_member(block, name, end)] = flow(stream.Signature(layout))
        super().__init__(members)

    def _port(self, stream_name, end):
        return getattr(self, balance_member(self.block, stream_name, end))

    def elaborate(self, platform):
        m = Module()
        rows, layout = self.rows, self.layout
        bpram = m.submodules.bpram = self.bpram
        bgb = m.submodules.bgb = GradientBuffer.from_slice(rows, self.formats, self.training,
                                                           family=self.family)
        gate = m.submodules.gate = UpdateGate(batch=self.training.batch, fp_stale=rows.fp_stale,
                                              needs_eb=rows.needs_eb)
        connect(m, bgb.upd, bpram.upd)
        m.d.comb += [gate.total_samples.eq(self.total_samples), bgb.update.eq(gate.update_start),
                     bgb.batch.eq(gate.batch_index), gate.update_done.eq(bgb.done),
                     self.updates.eq(gate.batch_index)]

        fp = m.submodules.fp_stream = RowStreamer(layout, group_major=True)
        connect(m, fp.port, bpram.a)
        connect(m, fp.rows, flipped(self._port("fp", "out")))
        m.d.comb += [fp.allow.eq(gate.fp_allow), gate.fp_start.eq(fp.start), gate.fp_done.eq(fp.done)]
        if rows.needs_eb:
            eb = m.submodules.eb_stream = RowStreamer(layout, group_major=False)
            connect(m, eb.port, bpram.b)
            connect(m, eb.rows, flipped(self._port("eb", "out")))
            m.d.comb += [eb.allow.eq(gate.eb_allow), gate.eb_start.eq(eb.start), gate.eb_done.eq(eb.done)]
        else:
            m.d.comb += bpram.b.en.eq(0)

        # A sample's gradients enter the BGB only while its mini-batch is the one being summed.
        grad_in = self._port("grad", "in")
        grads = m.submodules.grads = SampleGate(grad_in.payload.shape(), layout.rows)
        connect(m, flipped(grad_in), grads.i)
        connect(m, grads.o, bgb.i)
        m.d.comb += [grads.allow.eq(gate.pg_allow), gate.pg_start.eq(grads.start),
                     gate.pg_done.eq(grads.done)]
        return m
