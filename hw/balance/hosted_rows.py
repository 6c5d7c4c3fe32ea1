"""BPRAM and BGB: weight rows a node hosts for another node (paper 5.2.2, items 3 and 5).

:class:`HostedRows` is the host's hardware for one merged block of rows
(hw/balance/blocks.py): the rows in a ParamRam laid out like the owner's LPRAM past
its local rows, two :class:`~hw.balance.weight_stream.RowStreamer` s that send them to
the owner once per sample for its FP (port A) and EB (port B) engines, and a
GradientBuffer (the BGB) that sums the gradient products the owner sends back and
applies the SGD update to the BPRAM through port B, exactly as an LGB updates an LPRAM
(same rounding indices: the rows keep their global channel numbers). Its UpdateGate
takes the owner slice's ``fp_stale`` and the mini-batch size, so the rows streamed for
FP of sample s are weight version max(0, (s - fp_stale) // B) and those for EB version
s // B, the versions the owner's local rows have and ``mapping.golden.train`` assumes:
a pass for a sample past the boundary starts only after the update, and the update
waits until the boundary samples' passes are sent and their gradients summed.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..memory.grad_buffer import GradientBuffer
from ..memory.param_ram import ParamRam, VersionedParamRam, WeightLayout, slice_weights
from ..memory.update_gate import COUNT_BITS, OverlappedGate, SampleGate, UpdateGate
from .blocks import RowStreams
from .weight_stream import RowStreamer


class HostedRows(wiring.Component):
    """The BPRAM, BGB, row streamers and update gate of one merged hosted ``block``.

    Ports: ``streams`` (:class:`RowStreams`: ``fp`` / ``eb`` beats to the owner's FP / EB
    engine, ``grad`` the owner's gradient beats, addresses renumbered from 0),
    ``total_samples``, ``updates`` (mini-batch updates applied).
    ``params``: the network's initial parameter words (golden layout) or None for zeros.
    """

    def __init__(self, block, formats, training, *, params=None, family=None):
        rows = self.rows = block.owner_slice
        self.block, self.formats, self.training, self.family = block, formats, training, family
        self.layout = WeightLayout.from_slice(rows)
        ram = VersionedParamRam if rows.overlapped_update else ParamRam
        self.bpram = ram.from_slice(rows, init=slice_weights(rows, params)[0], family=family)
        super().__init__({"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS),
                          "streams": Out(RowStreams(block))})

    def elaborate(self, platform):
        m = Module()
        rows, layout = self.rows, self.layout
        bpram = m.submodules.bpram = self.bpram
        bgb = m.submodules.bgb = GradientBuffer.from_slice(rows, self.formats, self.training,
                                                           family=self.family)
        gate = m.submodules.gate = (OverlappedGate if rows.overlapped_update else UpdateGate)(
            batch=self.training.batch, fp_stale=rows.fp_stale, needs_eb=rows.needs_eb)
        if rows.overlapped_update:
            m.d.comb += bpram.swap.eq(gate.swap)
        connect(m, bgb.upd, bpram.upd)
        m.d.comb += [gate.total_samples.eq(self.total_samples), bgb.update.eq(gate.update_start),
                     bgb.batch.eq(gate.batch_index), gate.update_done.eq(bgb.done),
                     self.updates.eq(gate.batch_index)]

        fp = m.submodules.fp_stream = RowStreamer(layout, group_major=True)
        connect(m, fp.port, bpram.a)
        connect(m, fp.rows, flipped(self.streams.fp))
        m.d.comb += [fp.allow.eq(gate.fp_allow), gate.fp_start.eq(fp.start), gate.fp_done.eq(fp.done)]
        if rows.needs_eb:
            eb = m.submodules.eb_stream = RowStreamer(layout, group_major=False)
            connect(m, eb.port, bpram.b)
            connect(m, eb.rows, flipped(self.streams.eb))
            m.d.comb += [eb.allow.eq(gate.eb_allow), gate.eb_start.eq(eb.start), gate.eb_done.eq(eb.done)]
        else:
            m.d.comb += bpram.b.en.eq(0)

        # A sample's gradients enter the BGB only while its mini-batch is the one being summed.
        grad_in = self.streams.grad
        grads = m.submodules.grads = SampleGate(grad_in.payload.shape(), layout.rows)
        connect(m, flipped(grad_in), grads.i)
        connect(m, grads.o, bgb.i)
        m.d.comb += [grads.allow.eq(gate.pg_allow), gate.pg_start.eq(grads.start),
                     gate.pg_done.eq(grads.done)]
        return m
