"""BPRAM and BGB: weight rows a node hosts for an adjacent node (paper 5.2.2, items 3 and 5).

:func:`remote_block` (owner) and :func:`hosted_blocks` (host) merge the WeightBlocks
of one owner slice into one contiguous range, and refuse in one line what the
generator does not build (``mapping.memories.remote_rows_problem``).

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
from mapping.memories import hosted_groups, merge_blocks, remote_rows_problem
from .grad_buffer import GradientBuffer
from .param_ram import ParamRam, WeightLayout, bank_layout
from .pg_engine import grads_layout
from .update_gate import COUNT_BITS, SampleGate, UpdateGate
from .weight_stream import RowStreamer


def _merged(blocks, owner=None):
    """The WeightBlocks of one owner slice as one block of contiguous rows (its owner_slice
    cut to them); SpecError for rows the generator does not stream."""
    problem = remote_rows_problem(blocks, owner)
    if problem:
        raise SpecError(problem)
    return merge_blocks(blocks)


def remote_block(s):
    """The rows slice ``s`` keeps on another node as one WeightBlock (owner side), or None."""
    return _merged(s.remote_weights, s) if s.remote_weights else None


def hosted_blocks(config):
    """The blocks a NodeConfig hosts, merged per owner slice, in chain order."""
    return [_merged(blocks) for blocks in hosted_groups(config)]


class HostedRows(wiring.Component):
    """The BPRAM, BGB, row streamers and update gate of one merged hosted ``block``.

    Ports (the owner's ``bp_*`` ports mirrored): ``bp_fp_out`` / ``bp_eb_out`` (beats to the
    owner's FP / EB engine; no ``bp_eb_out`` for a layer without EB), ``bp_grad_in`` (the
    owner's gradient beats, addresses renumbered from 0), ``total_samples``, ``updates``
    (mini-batch updates applied).
    ``params``: the network's initial parameter words (golden layout) or None for zeros.
    """

    def __init__(self, block, formats, training, *, params=None, family=None):
        from .slice_unit import slice_weights  # the slice unit builds on this module

        rows = self.rows = block.owner_slice
        self.block, self.formats, self.training, self.family = block, formats, training, family
        layout = self.layout = WeightLayout.from_slice(rows)
        self.bpram = ParamRam.from_slice(rows, init=slice_weights(rows, params)[0], family=family)
        beat = stream.Signature(bank_layout(layout.banks, layout.words))
        members = {"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS), "bp_fp_out": Out(beat),
                   "bp_grad_in": In(stream.Signature(grads_layout(layout.rows, layout.banks, layout.words)))}
        if rows.needs_eb:
            members["bp_eb_out"] = Out(beat)
        super().__init__(members)

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
        connect(m, fp.rows, flipped(self.bp_fp_out))
        m.d.comb += [fp.allow.eq(gate.fp_allow), gate.fp_start.eq(fp.start), gate.fp_done.eq(fp.done)]
        if rows.needs_eb:
            eb = m.submodules.eb_stream = RowStreamer(layout, group_major=False)
            connect(m, eb.port, bpram.b)
            connect(m, eb.rows, flipped(self.bp_eb_out))
            m.d.comb += [eb.allow.eq(gate.eb_allow), gate.eb_start.eq(eb.start), gate.eb_done.eq(eb.done)]
        else:
            m.d.comb += bpram.b.weight_en.eq(0)

        # A sample's gradients enter the BGB only while its mini-batch is the one being summed.
        grads = m.submodules.grads = SampleGate(self.bp_grad_in.payload.shape(), layout.rows)
        connect(m, flipped(self.bp_grad_in), grads.i)
        connect(m, grads.o, bgb.i)
        m.d.comb += [grads.allow.eq(gate.pg_allow), gate.pg_start.eq(grads.start),
                     gate.pg_done.eq(grads.done)]
        return m
