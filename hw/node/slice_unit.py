"""One layer slice of a node: its FP, EB and PG datapaths, memories and update gate.

See docs/node_dataflow.md for the dataflow. The unit's chain-facing ports are its
``up`` (from the predecessor) and ``down`` (to the successor) ChainLinks
(hw/node/ports.py), with the channels the slice's position in its layer needs, and
``hosts``, one RowStreams per host of its rows kept on other nodes, and, where its
``act_storage`` is "dram", ``dram``: the DramQueueSignature of its Act-RAM (``act_ram``) and
of its SFU's mask FIFO (``sfu_masks``), named as in :attr:`SliceUnit.dram_queues`.
"""

import math
from dataclasses import replace

from amaranth.hdl import Module, Signal, Value
from amaranth.hdl._ir import PortDirection  # what rtlil.convert's ``ports`` take; not re-exported
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping import numerics
from mapping.errors import SpecError
from mapping.nodeconfig import sfu_shape
from mapping.memories import (PAB_MIN_DEPTH, activation_slack, bias_steps, buildable, deep_fc_stores,
                              deep_vector_stores,
                              dram_queues, dram_weights_problem, fc_weights_queue, pg_error_range,
                              pg_error_slack, sfu_error_slack,
                              sfu_samples_in_flight, window_slack)

from ..arith.map_rounder import MapRounder
from ..balance.blocks import RowStreams, remote_blocks
from ..balance.weight_stream import GradientSplit, WeightSource
from ..base.handshake import SkidBuffer, lockstep
from ..base.layouts import pixel_layout, psum_layout
from ..base.signatures import DramQueueSignature
from ..engines.eb_engine import EBEngine
from ..engines.fp_engine import FPEngine
from ..engines.pg_engine import BiasTerms, PGEngine
from ..memory.act_ram import ActRam
from ..memory.dram_weights import DramWeights
from ..memory.eb_windows import ChunkedErrorWindows
from ..memory.fc_store import DeepFcErrorStore, DeepFcWindowStore, ErrorReplay, FcErrorStore, FcWindowStore
from ..memory.fifo import Fifo
from ..memory.grad_buffer import GradientBuffer
from ..memory.grad_rounding import GradientRounder
from ..memory.line_buffer import LineBuffer
from ..memory.pab import PartialActivationBuffer, partial_sums_between_slices
from ..memory.param_ram import ParamRam, VersionedParamRam, WeightLayout, slice_weights
from ..memory.update_gate import COUNT_BITS, BothDone, OverlappedGate, SampleGate, UpdateGate
from ..streams.channels import ChannelConcat, ChannelFork, channel_slice
from .ports import ChainLink
from .sfu import SFU, BiasRows


def slice_ports(s, psum_bits):
    """The chain-facing channels of slice ``s``, its partial sums ``psum_bits`` wide
    (``Formats.psum_bits``): ({channel: layout} from the predecessor,
    {channel: layout} to the successor), channel names as in hw/node/ports.py."""
    c_in, h, w = s.in_shape
    post = sfu_shape(s)[0]  # pooling keeps the channel count; a vector travels as its map's channels
    up, down = {}, {}
    if s.mode == "icp":
        # The map's pixels, where the layer flattens one: the channels from the slice's first on.
        lo, hi = (s.map_channels(end) for end in s.in_range)
        c_in = s.map_channels(c_in)
        up["act"] = pixel_layout(c_in - lo)
        if not s.last:
            down["act"] = pixel_layout(c_in - hi)
            down["psum"] = psum_layout(s.fp.ces, psum_bits)
            if s.needs_eb:
                down["err"] = pixel_layout(c_in - hi)
            down["zerr"] = pixel_layout(s.error_beat_channels)
        else:
            down["act"] = pixel_layout(post)
            down["err"] = pixel_layout(post)
        if not s.first:
            up["psum"] = psum_layout(s.fp.ces, psum_bits)
            up["zerr"] = pixel_layout(s.upstream_error_beat_channels)
        if s.needs_eb:
            up["err"] = pixel_layout(c_in - lo)
    else:
        lo, hi = s.out_range
        up["act"] = pixel_layout(c_in)
        if not s.first:
            up["ocp"] = pixel_layout(lo)
            up["err"] = pixel_layout(lo)
        if not s.last:
            down["act"] = pixel_layout(c_in)
            down["ocp"] = pixel_layout(hi)
            down["err"] = pixel_layout(hi)
            if s.needs_eb:
                down["epsum"] = psum_layout(c_in, psum_bits)
        else:
            down["act"] = pixel_layout(s.out_shape[0])
            down["err"] = pixel_layout(s.out_shape[0])
        if s.needs_eb:
            if s.first:
                up["err"] = pixel_layout(c_in)
            else:
                up["epsum"] = psum_layout(c_in, psum_bits)
    return up, down


class RemoteRows:
    """Where slice ``s``'s weight rows live: its own LPRAM holds ``local`` (the slice cut to its
    local rows, None if every row is remote), host k of ``blocks`` (merged, in row order)
    the rows from engine address ``starts[k]`` on (hw/balance/weight_stream.py)."""

    def __init__(self, s):
        self.blocks = remote_blocks(s)
        lo, passes = s.out_range[0], WeightLayout.from_slice(s).passes
        self.starts = tuple((b.out_range[0] - lo) // s.fp.ces * passes for b in self.blocks)
        first_remote = self.blocks[0].out_range[0] if self.blocks else s.out_range[1]
        self.local = replace(s, out_range=(lo, first_remote), remote_weights=()) if first_remote > lo else None


def check_buildable(s, training):
    """The generator keeps weights on chip (rows of fully connected slices may live on other
    nodes, hw/balance/blocks.remote_blocks) or, for a fully connected slice, in DRAM at
    mini-batch 1 (``memories.dram_weights_problem``), and builds the three engines of one shape
    (P x b tiles, b <= the slice's input channels: folded over ceil(S / b) passes)."""
    problem = dram_weights_problem(s, training.batch)
    if problem:
        raise SpecError(f"layer '{s.layer}': {problem}")
    remote_blocks(s)
    if not buildable(s):
        raise SpecError(
            f"layer '{s.layer}' ({s.mode} slice, input channels {s.in_range[0]}..{s.in_range[1] - 1}): "
            f"engines FP {s.fp.ces} x {s.fp.tiles}, EB {s.eb.ces} x {s.eb.tiles}, PG {s.pg.ces} x "
            f"{s.pg.tiles} tiles; the generator builds FP = PG = P x b and EB = b x P with b at most "
            f"{s.in_channels}")


class SliceUnit(wiring.Component):
    """The hardware of one ``LayerSlice``; ``params``: the layer's initial words (golden layout)."""

    def __init__(self, layer_slice, formats, training, *, params=None, family=None):
        check_buildable(layer_slice, training)
        s = self.slice = layer_slice
        self.formats, self.training, self.family = formats, training, family
        self.remote = RemoteRows(s)
        local = None if s.weights_offchip else self.remote.local
        weights, bias = slice_weights(s, params)
        # Built here rather than in elaborate() so a testbench can read the weights back and
        # watch the updates (sim.chain.train_chain, trace_updates).
        # The update that does not stop the engines: a gate and weight memories of its own.
        gate, ram = (OverlappedGate, VersionedParamRam) if s.overlapped_update else (UpdateGate, ParamRam)
        self.gate = gate(batch=training.batch, fp_stale=s.fp_stale, needs_eb=s.needs_eb)
        self.lpram = (ram.from_slice(local, init=slice_weights(local, params)[0], family=family)
                      if local is not None else None)
        self.owns_bias = s.owns_biases
        bias_ram = dict(banks=s.bias_banks, rows=-(-s.sfu_channels // s.bias_banks), words=1, init=bias.reshape(-1, 1),
                        family=family)
        if not s.overlapped_update:
            bias_ram.update(shared_update=True)
        self.bias_ram = ram(**bias_ram) if self.owns_bias else None
        up, down = slice_ports(s, formats.psum_bits)
        members = {"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS),
                   "up": In(ChainLink(up)), "down": Out(ChainLink(down))}
        # The weights in DRAM and, for the DRAM, their first contents (the board loads them).
        self.dram_weights, self.dram_init = None, {}
        if s.weights_offchip:
            self.dram_weights = DramWeights.from_slice(s, formats, training, family=family)
            self.dram_init["fc_weights"] = self.dram_weights.initial_words(weights)
        queues = dram_queues(s) + ([fc_weights_queue(s)] if s.weights_offchip else [])
        self.dram_queues = {name.replace(".", "_"): DramQueueSignature(width, depth)
                            for name, width, depth, _ in queues}
        # Bits each queue writes per sample, as many read: its share of the DRAM (simulated_drams).
        self.dram_traffic = {name.replace(".", "_"): width * beats for name, width, _, beats in queues}
        if self.dram_queues:
            members["dram"] = Out(wiring.Signature({name: Out(signature)
                                                    for name, signature in self.dram_queues.items()}))
        if self.remote.blocks:
            members["hosts"] = Out(wiring.Signature({RowStreams.member_name(b): In(RowStreams(b))
                                                      for b in self.remote.blocks}))
        super().__init__(members)
        # Tuples in channel order, not sets: elaboration order (and so the netlist text that caches
        # synthesis and Verilator builds) must not depend on string hashing.
        self.up_channels, self.down_channels = tuple(up), tuple(down)

    def remote_streams(self):
        """The RowStreams port of each host of the slice's remote rows, in row order."""
        return [getattr(self.hosts, RowStreams.member_name(b)) for b in self.remote.blocks]

    def module_ports(self):
        """Every signal that crosses the slice's boundary, as ``rtlil.convert``'s ``ports``
        (name -> (signal, direction)): its signature's members, named as ``rtlil.convert`` names
        them, and the ``host`` ports of the weight memories it holds, which the node's host access
        drives (hw/node/top.py). A node that elaborates its slices apart
        (``Node(slices_apart=True)``) instantiates the module with these ports."""
        ports = {}
        members = [((), self)] + [((name,), ram) for name, ram in (("lpram", self.lpram), ("bias_ram", self.bias_ram))
                                  if ram is not None]
        for prefix, owner in members:
            for path, member, value in owner.signature.flatten(owner):
                if owner is self or path[0] == "host":
                    direction = PortDirection.Input if member.flow == In else PortDirection.Output
                    ports["__".join(map(str, prefix + path))] = (Value.cast(value), direction)
        return ports

    def elaborate(self, platform):
        m = Module()
        gate, lgb, bias_lgb = self._build_update(m)
        act_ram, z_errors = self._build_forward(m, gate)
        pg_errors, eb_errors = self._fork_output_errors(m, z_errors)
        self._build_gradients(m, gate, act_ram, pg_errors, lgb, bias_lgb)
        if eb_errors is not None:
            self._build_input_errors(m, gate, eb_errors)
        return m

    def _build_update(self, m):
        """LPRAM, bias RAM, their gradient buffers (LGB) and the update gate. Rows kept on
        another node are updated there (hw/balance); this gate updates the local rows and
        the biases. Returns (gate, LGB or None, bias LGB or None)."""
        s, f = self.slice, self.formats
        gate = m.submodules.gate = self.gate
        m.d.comb += [gate.total_samples.eq(self.total_samples), self.updates.eq(gate.batch_index)]
        lpram, lgb, bias_lgb = self.lpram, None, None
        updated = []  # the done pulses of every buffer the update runs through
        if lpram is not None:
            m.submodules.lpram = lpram
            lgb = m.submodules.lgb = GradientBuffer.from_slice(self.remote.local, f, self.training,
                                                               family=self.family)
            connect(m, lgb.upd, lpram.upd)
            m.d.comb += [lgb.update.eq(gate.update_start), lgb.batch.eq(gate.batch_index)]
            self._swap(m, lpram)
            updated.append(lgb.done)
        if self.owns_bias:
            bias_ram = m.submodules.bias_ram = self.bias_ram
            bias_lgb = m.submodules.bias_lgb = GradientBuffer.from_slice(s, f, self.training, bias=True,
                                                                        family=self.family)
            connect(m, bias_lgb.upd, bias_ram.upd)
            m.d.comb += [bias_lgb.update.eq(gate.update_start), bias_lgb.batch.eq(gate.batch_index),
                         bias_ram.b.en.eq(0)]
            self._swap(m, bias_ram)
            updated.append(bias_lgb.done)
        if not updated:
            # Every row lives on another node or in DRAM and there are no biases: the gate still
            # counts the mini-batches. It listens for done from the cycle after its strobe.
            nothing = Signal()
            m.d.sync += nothing.eq(gate.update_start)
            updated.append(nothing)
        if self.dram_weights is not None:
            # The rows in DRAM are updated as their pass streams them, often before the gate's
            # strobe: the pair below holds that pulse until the strobe's own.
            weights = m.submodules.dram_weights = self.dram_weights
            m.d.comb += weights.total_samples.eq(self.total_samples)
            connect(m, weights.dram, flipped(self.dram.fc_weights))
            updated.append(weights.stored)
        if len(updated) == 2:
            # The next update starts only once both have reported this one: one ahead at most.
            updated = [_both_done(m, "updates_done", *updated, most_ahead=1)]
        m.d.comb += gate.update_done.eq(updated[0])
        return gate, lgb, bias_lgb

    def _swap(self, m, ram):
        if self.slice.overlapped_update:
            m.d.comb += ram.swap.eq(self.gate.swap)

    def _build_forward(self, m, gate):
        """Input split, Act-RAM, FP line buffer and engine, PAB (ICP) and SFU where the
        slice completes its outputs. Returns (Act-RAM, the stream of conv-output errors)."""
        s, f, lpram = self.slice, self.formats, self.lpram
        c_in, _, _ = s.in_shape
        _, oh, ow = s.out_shape
        own_in, ces = s.map_channels(s.in_channels), s.fp.ces
        act_in = flipped(self.up.act)
        arriving = s.map_channels(c_in - (s.in_range[0] if s.mode == "icp" else 0))
        # The producer (a pooling SFU, or the previous node) delivers in bursts while the
        # line buffer takes a pixel per window: two input rows of slack keep both busy. Its
        # pops are counted from a register: the consumers' joint ready comes from the FP
        # window FIFO's full flag through the line buffer (node 1 at 126 MHz: 8.3 ns).
        slack = m.submodules.act_slack = Fifo(pixel_layout(arriving), activation_slack(s), family=self.family,
                                              pop_register=True)
        connect(m, act_in, slack.i)
        act_in = slack.o
        local = (0, own_in)
        ranges = [local, local]
        bypass = not s.last and "act" in self.down_channels
        if bypass:
            ranges.append((own_in, arriving) if s.mode == "icp" else (0, arriving))
        split = m.submodules.split = ChannelFork(arriving, ranges)
        connect(m, act_in, split.i)
        act_ram = m.submodules.act_ram = ActRam.from_slice(s, family=self.family)
        connect(m, split.o0, act_ram.i)
        if s.act_storage == "dram":
            connect(m, act_ram.dram, flipped(self.dram.act_ram))
        windows, beats = self._windows(m, "fp", split.o1)
        if bypass:
            connect(m, split.o2, flipped(self.down.act))

        fp_gate = m.submodules.fp_gate = SampleGate(windows.payload.shape(), beats)
        connect(m, windows, fp_gate.i)
        fp = m.submodules.fp = FPEngine.from_slice(s, family=self.family)
        connect(m, self._weights(m, "fp", fp, fp_gate.o, None if lpram is None else lpram.a), fp.windows)
        m.d.comb += [fp_gate.allow.eq(gate.fp_allow), gate.fp_start.eq(fp_gate.start)]

        # FP done is counted where the sample's last partial sum leaves the FP path, after
        # the bias is applied, so the update never changes a weight or bias a sample in
        # flight still needs.
        beats = oh * ow * -(-s.sums_channels // ces)
        fp_end = m.submodules.fp_end = SampleGate(psum_layout(ces), beats)
        m.d.comb += [fp_end.allow.eq(1), gate.fp_done.eq(fp_end.done)]
        if s.mode == "icp":
            pab = m.submodules.pab = PartialActivationBuffer.from_slice(s, family=self.family)
            connect(m, fp.psums, pab.local)
            if not s.first:
                connect(m, partial_sums_between_slices(m, "psum_in", flipped(self.up.psum), ces, f.psum_bits,
                                                       leaving=False), pab.upstream)
            connect(m, pab.o, fp_end.i)
        else:
            connect(m, fp.psums, fp_end.i)
        if s.mode == "icp" and not s.last:
            connect(m, partial_sums_between_slices(m, "psum_out", fp_end.o, ces, f.psum_bits, leaving=True),
                    flipped(self.down.psum))
            z_errors = flipped(self.down.zerr)
        else:
            sfu = m.submodules.sfu = SFU.from_slice(s, f, samples_in_flight=sfu_samples_in_flight(s),
                                                  family=self.family)
            m.d.comb += sfu.sample_base.eq(0)
            if "sfu_masks" in self.dram_queues:
                connect(m, sfu.dram, flipped(self.dram.sfu_masks))
            connect(m, fp_end.o, sfu.fp_in)
            if self.owns_bias:
                bias_port = self.bias_ram.a
                if s.bias_banks != ces:
                    rows = m.submodules.bias_rows = BiasRows(rows=sfu.groups, lanes=ces, banks=s.bias_banks)
                    connect(m, rows.ram, bias_port)
                    bias_port = rows.sfu
                connect(m, sfu.bias, bias_port)
            if s.out_map is not None:
                self._vector_outputs(m, sfu)
            elif s.mode == "icp":
                connect(m, sfu.fp_out, flipped(self.down.act))
                connect(m, flipped(self.down.err), self._sfu_errors(m, sfu))
            else:
                self._ocp_outputs(m, sfu)
            # The errors' consumers (PG, EB behind its sample gate, the predecessor) take a beat
            # together; their ready stops at this buffer instead of reaching the SFU's mask
            # FIFO (the worst path of the CI bitstream's node, 8.1 ns of routing).
            skid = m.submodules.conv_errors = SkidBuffer(sfu.eb_out.payload.shape())
            connect(m, sfu.eb_out, skid.i)
            z_errors = skid.o
        return act_ram, z_errors

    def _fork_output_errors(self, m, z_errors):
        """Conv-output errors (those of ``LayerSlice.sums_channels``) to PG (``memories.
        pg_error_range``), EB (the slice's own channels) and the predecessor (ICP, not the
        layer's first node: those of its groups). Returns (PG's errors, EB's errors or None)."""
        s = self.slice
        beat = s.error_beat_channels
        own = (beat - s.out_channels, beat) if s.out_map is None else (0, beat)
        z_ranges = [pg_error_range(s)]
        if s.needs_eb:
            z_ranges.append(own)
        if "zerr" in self.up_channels:
            z_ranges.append((0, s.upstream_error_beat_channels))
        z_split = m.submodules.z_split = ChannelFork(beat, z_ranges)
        connect(m, z_errors, z_split.i)
        pg_errors = z_split.o0
        if s.needs_eb:
            # PG takes an error pixel only with its output pixel, while the EB line buffer
            # needs the errors about a row ahead: this FIFO lets EB run ahead instead of
            # being dragged into PG's lockstep by the fork.
            slack = m.submodules.pg_errors = Fifo(pg_errors.payload.shape(), pg_error_slack(s), family=self.family)
            connect(m, z_split.o0, slack.i)
            pg_errors = slack.o
        if "zerr" in self.up_channels:
            connect(m, z_split.outputs()[-1], flipped(self.up.zerr))
        return pg_errors, (z_split.o1 if s.needs_eb else None)

    def _build_gradients(self, m, gate, act_ram, pg_errors, lgb, bias_lgb):
        """PG: Act-RAM replay -> line buffer -> gradient engine -> LGB (and the hosts' BGBs);
        the bias beats, the engine's or BiasTerms', into the bias LGB."""
        s = self.slice
        _, oh, ow = s.out_shape
        # The line buffer's ready stops at a register, not at the Act-RAM's occupancy count and
        # read enable, which are by its block RAM, often far from the PG engine's multipliers
        # (the path between them was an ECP5-85 node's worst at 125 MHz, 5.3 ns of routing).
        acts = m.submodules.act_skid = SkidBuffer(act_ram.o.payload.shape())
        connect(m, act_ram.o, acts.i)
        windows, beats = self._windows(m, "pg", acts.o)
        pg_gate = m.submodules.pg_gate = SampleGate(windows.payload.shape(), beats)
        connect(m, windows, pg_gate.i)
        pg = m.submodules.pg = PGEngine.from_slice(s, family=self.family)
        connect(m, pg_gate.o, pg.windows)
        bias_grads = pg.bias_grads if pg.bias else None
        if s.biases_beyond_rows:
            bias_grads = self._bias_terms(m, pg_errors, pg.errors)
        else:
            connect(m, pg_errors, pg.errors)
        m.d.comb += [pg_gate.allow.eq(gate.pg_allow), gate.pg_start.eq(pg_gate.start)]
        pg_done = _connect_gradients(m, self._rounded(m, pg.grads, "grads"), self._gradient_sink(m, lgb),
                                     oh * ow * pg.rows, "lgb")
        if bias_lgb is not None:
            bias_done = _connect_gradients(m, self._rounded(m, bias_grads, "bias_grads", bias=True), bias_lgb.i,
                                           oh * ow * math.prod(bias_steps(s)), "bias_lgb")
            # PG starts no sample past its mini-batch's last until the update, which waits for
            # both sources' B samples: neither gets more than B ahead (2B where the update does
            # not stop PG, which waits only for the update of the mini-batch before).
            ahead = gate.batch * (2 if s.overlapped_update else 1)
            m.d.comb += gate.pg_done.eq(_both_done(m, "grads_done", pg_done, bias_done, most_ahead=ahead))
        else:
            m.d.comb += gate.pg_done.eq(pg_done)

    def _bias_terms(self, m, errors, engine_errors):
        """Where the slice owns biases beyond its rows (``LayerSlice.biases_beyond_rows``): PG's
        ``errors`` (those of every channel its SFU finishes) to the PG engine's ``engine_errors``
        (its own channels) and, in the same cycle, through a FIFO to BiasTerms, whose bias beats
        it returns; in lockstep, so that no bias beat of a sample comes before the update gate
        lets PG start that sample."""
        s = self.slice
        lo, hi = s.out_range
        slack = m.submodules.bias_errors = Fifo(errors.payload.shape(), PAB_MIN_DEPTH, family=self.family)
        lockstep(m, errors, engine_errors, slack.i)
        m.d.comb += [engine_errors.payload.eq(channel_slice(errors.payload, lo, hi)),
                     slack.i.payload.eq(errors.payload)]
        terms = m.submodules.bias_terms = BiasTerms(channels=s.sfu_channels, lanes=s.bias_banks)
        connect(m, slack.o, terms.errors)
        return terms.bias_grads

    def _build_input_errors(self, m, gate, errors):
        """EB: error line buffer -> error engine -> round (ICP) or reduce (OCP)."""
        s, lpram = self.slice, self.lpram
        _, h, w = s.in_shape
        # Rows from DRAM come once per sample in address order, for FP and EB together.
        group_major = self.dram_weights is not None
        layout = WeightLayout.from_slice(s)
        if s.out_map is not None:  # the errors a group a beat, once per pass
            replay = m.submodules.eb_replay = ErrorReplay(lanes=layout.banks, groups=layout.groups,
                                                          replays=layout.passes, consecutive=group_major,
                                                          family=self.family)
            connect(m, errors, replay.i)
            windows, beats = replay.o, layout.rows
        elif s.eb_chunks is not None:  # windows too wide for a word: a group a beat, from chunks
            chunked = m.submodules.eb_windows = ChunkedErrorWindows.from_slice(s, family=self.family)
            connect(m, errors, chunked.i)
            windows, beats = chunked.o, h * w * layout.rows
        else:
            eb_lb = m.submodules.eb_lb = LineBuffer.from_slice(s, "eb", family=self.family)
            connect(m, errors, eb_lb.i)
            windows, beats = self._window_slack(m, "eb", eb_lb.o), h * w
        eb_gate = m.submodules.eb_gate = SampleGate(windows.payload.shape(), beats)
        connect(m, windows, eb_gate.i)
        eb = m.submodules.eb = EBEngine.from_slice(s, family=self.family, group_major=group_major)
        connect(m, self._weights(m, "eb", eb, eb_gate.o, None if lpram is None else lpram.b), eb.windows)
        # EB is done with the weights only when the sample's last error sum leaves the
        # engine: a stalled engine holds its operands in LPRAM port B's read register,
        # which the update's row reads would overwrite.
        # A fully connected layer's EB gives a beat per pass (pass_errors), every G steps.
        beats, steps = (eb.passes, eb.groups) if eb.pass_errors else (1, eb.groups * eb.passes)
        eb_end = m.submodules.eb_end = SampleGate(eb.errors.payload.shape(), h * w * beats)
        connect(m, eb.errors, eb_end.i)
        m.d.comb += [eb_gate.allow.eq(gate.eb_allow), gate.eb_start.eq(eb_gate.start),
                     eb_end.allow.eq(1), gate.eb_done.eq(eb_end.done)]
        if s.mode == "icp":
            self._icp_input_errors(m, eb_end.o, steps)
        else:
            self._ocp_input_errors(m, eb_end.o, steps)

    def _weights(self, m, role, engine, windows, ram_port):
        """Connect ``engine``'s weight port to the LPRAM, or through a WeightSource to the LPRAM
        and the ``<role>`` row stream of each host of remote rows, or of the DRAM; returns the
        window stream the engine takes."""
        if self.dram_weights is not None:
            starts, streams = (0,), [getattr(self.dram_weights, role)]
        else:
            starts, streams = self.remote.starts, [flipped(getattr(host, role)) for host in self.remote_streams()]
        if not streams:
            connect(m, engine.weights, ram_port)
            return windows
        source = m.submodules[f"{role}_weights"] = WeightSource(
            rows=engine.rows, banks=self.slice.fp.ces, words=engine.words, starts=starts,
            window=windows.payload.shape())
        connect(m, engine.weights, source.engine)
        if ram_port is not None:
            connect(m, source.ram, ram_port)
        for rows, remote in zip(streams, source.remote):
            connect(m, rows, remote)
        connect(m, windows, source.windows_in)
        return source.windows_out

    def _rounded(self, m, grads, name, *, bias=False):
        """PG's gradient beats, rounded to the grid of narrow sums where the formats have them
        (GradientRounder; before the split, so the hosts' BGBs get rounded beats too)."""
        f = self.formats
        if (f.bias_grad_shift if bias else f.grad_shift) == 0:
            return grads
        rounder = m.submodules[f"{name}_rounder"] = GradientRounder.from_slice(self.slice, f, grads.payload.shape(),
                                                                             bias=bias)
        connect(m, grads, rounder.i)
        return rounder.o

    def _gradient_sink(self, m, lgb):
        """Where PG's weight-gradient beats go: the LGB, or split between the LGB and the hosts."""
        if self.dram_weights is not None:
            return self.dram_weights.grads
        if not self.remote.blocks:
            return lgb.i
        layout = WeightLayout.from_slice(self.slice)
        split = m.submodules.grad_split = GradientSplit(rows=layout.rows, banks=layout.banks,
                                                        words=layout.words, starts=self.remote.starts)
        if lgb is not None:
            connect(m, split.local, lgb.i)
        for streams, remote in zip(self.remote_streams(), split.remotes()):
            connect(m, remote, flipped(streams.grad))
        return split.i

    def _windows(self, m, role, pixels):
        """The ``role`` engine's windows of the input ``pixels``: a line buffer and a FIFO of
        windows behind it, so that it takes in the first rows of the next sample while the engine
        still works on the previous sample's last windows; for a fully connected layer after a
        flatten, an FcWindowStore, a pass of its flattened input per step. Returns (the window
        stream, its beats per sample)."""
        s = self.slice
        if s.map_pixels > 1:
            layout = WeightLayout.from_slice(s)
            kind = DeepFcWindowStore if deep_fc_stores(s) else FcWindowStore
            store = m.submodules[f"{role}_store"] = kind(
                channels=s.map_channels(s.in_channels), pixels=s.map_pixels, tiles=layout.tiles,
                replays=layout.groups, family=self.family)
            connect(m, pixels, store.i)
            return store.o, layout.rows
        line_buffer = m.submodules[f"{role}_lb"] = LineBuffer.from_slice(s, role, family=self.family)
        connect(m, pixels, line_buffer.i)
        return self._window_slack(m, role, line_buffer.o), s.out_shape[1] * s.out_shape[2]

    def _window_slack(self, m, role, windows):
        """Windows buffered after a line buffer (:meth:`_windows`)."""
        slack = m.submodules[f"{role}_windows"] = Fifo(windows.payload.shape(),
                                                        window_slack(self.slice, role), family=self.family)
        connect(m, windows, slack.i)
        return slack.o

    def _round_errors(self, m, sums, channels, channel_base, steps):
        """EB rounding point: ``requantize(sum, eb_shift, EB_OUT)`` over (C, H, W) indices,
        as many channels per cycle as keep up with one pixel per ``steps`` cycles."""
        s, f = self.slice, self.formats
        _, h, w = s.in_shape
        rounder = m.submodules.eb_round = MapRounder(
            channels=channels, lanes=-(-channels // steps), pixels=h * w, shift=f.eb_shift, seed=f.seed,
            tensor=numerics.tensor_id(s.position, numerics.EB_OUT), channel_base=channel_base)
        connect(m, sums, rounder.i)
        return rounder.o

    def _round_pass_errors(self, m, sums, steps):
        """The EB rounding point of a fully connected layer after a flatten: each pass's sums,
        flattened inputs ``i*b ..`` of the slice, then turned back into the map's pixels
        (FcErrorStore)."""
        s, f = self.slice, self.formats
        layout = WeightLayout.from_slice(s)
        rounder = m.submodules.eb_round = MapRounder(
            channels=layout.tiles, lanes=-(-layout.tiles // steps), pixels=layout.passes, shift=f.eb_shift,
            seed=f.seed, tensor=numerics.tensor_id(s.position, numerics.EB_OUT), channel_base=s.in_range[0],
            consecutive_beats=True)
        kind = DeepFcErrorStore if deep_fc_stores(s) else FcErrorStore
        store = m.submodules.eb_store = kind(channels=s.map_channels(s.in_channels), pixels=s.map_pixels,
                                             tiles=layout.tiles, family=self.family)
        connect(m, sums, rounder.i)
        connect(m, rounder.o, store.i)
        return store.o

    def _icp_input_errors(self, m, sums, steps):
        s = self.slice
        if s.map_pixels > 1:
            own = self._round_pass_errors(m, sums, steps)
        else:
            own = self._round_errors(m, sums, s.in_channels, s.in_range[0], steps)
        if s.last:
            connect(m, own, flipped(self.up.err))
            return
        join = m.submodules.err_join = ChannelConcat([s.map_channels(s.in_channels),
                                                      s.map_channels(s.in_shape[0] - s.in_range[1])])
        # The EB errors reach the join through a skid buffer: the join's ready (the next node's
        # errors arriving over the link) stops at its register instead of running on through the
        # rounder into the EB engine's credit (an ECP5-85 node's worst path at 125 MHz, 2.0 ns
        # logic and 6.4 ns routing from the down link's receive port).
        skid = m.submodules.eb_errors = SkidBuffer(own.payload.shape())
        connect(m, own, skid.i)
        connect(m, skid.o, join.i0)
        connect(m, flipped(self.down.err), join.i1)
        connect(m, join.o, flipped(self.up.err))

    def _ocp_input_errors(self, m, sums, steps):
        s = self.slice
        c_in = s.in_shape[0]
        reduce = m.submodules.eb_pab = PartialActivationBuffer(
            lanes=c_in, depth=max(PAB_MIN_DEPTH, s.pab_words // c_in), first=s.last, family=self.family)
        connect(m, sums, reduce.local)
        if not s.last:
            connect(m, partial_sums_between_slices(m, "epsum_in", flipped(self.down.epsum), c_in,
                                                   self.formats.psum_bits, leaving=False), reduce.upstream)
        if s.first:
            connect(m, self._round_errors(m, reduce.o, c_in, 0, steps), flipped(self.up.err))
        else:
            connect(m, partial_sums_between_slices(m, "epsum_out", reduce.o, c_in, self.formats.psum_bits,
                                                   leaving=True), flipped(self.up.epsum))

    def _sfu_errors(self, m, sfu):
        """Where the SFU's backward input takes pooled-output errors: behind a FIFO of one
        pooled row where it pools (``mapping.memories.sfu_error_slack``)."""
        depth = sfu_error_slack(self.slice)
        if depth is None:
            return sfu.eb_in
        slack = m.submodules.sfu_errors = Fifo(sfu.eb_in.payload.shape(), depth, family=self.family)
        connect(m, slack.o, sfu.eb_in)
        return slack.i

    def _vector_outputs(self, m, sfu):
        """A layer whose output vector travels as a map (``LayerSlice.out_map``): the SFU's beats of
        P outputs turned into the map's pixels, the error pixels coming back into beats of P
        (hw/memory/fc_store.py)."""
        s = self.slice
        channels, _, pixels = s.out_map
        deep = deep_vector_stores(s)
        turn = (DeepFcErrorStore if deep else FcErrorStore)(channels=channels, pixels=pixels, tiles=s.fp.ces,
                                                             family=self.family)
        m.submodules.out_store = turn
        connect(m, sfu.fp_out, turn.i)
        connect(m, turn.o, flipped(self.down.act))
        back = (DeepFcWindowStore if deep else FcWindowStore)(channels=channels, pixels=pixels, tiles=s.fp.ces,
                                                              replays=1, family=self.family)
        m.submodules.err_store = back
        connect(m, flipped(self.down.err), back.i)
        connect(m, back.o, sfu.eb_in)

    def _ocp_outputs(self, m, sfu):
        """OCP: append this slice's finished channels to those of the layer's earlier nodes,
        and take this slice's pooled-output errors out of the backward stream."""
        s = self.slice
        lo, hi = s.out_range
        out_port = flipped(self.down.act) if s.last else flipped(self.down.ocp)
        if s.first:
            connect(m, sfu.fp_out, out_port)
        else:
            join = m.submodules.ocp_join = ChannelConcat([lo, hi - lo])
            connect(m, flipped(self.up.ocp), join.i0)
            connect(m, sfu.fp_out, join.i1)
            connect(m, join.o, out_port)
        arriving = hi
        ranges = [(lo, hi)] + ([(0, lo)] if not s.first else [])
        err_split = m.submodules.err_split = ChannelFork(arriving, ranges)
        connect(m, flipped(self.down.err), err_split.i)
        connect(m, err_split.o0, self._sfu_errors(m, sfu))
        if not s.first:
            connect(m, err_split.o1, flipped(self.up.err))


def _both_done(m, name, done_a, done_b, most_ahead):
    pair = m.submodules[name] = BothDone(most_ahead)
    m.d.comb += [pair.a.eq(done_a), pair.b.eq(done_b)]
    return pair.both


def _connect_gradients(m, grads, buffer_in, beats_per_sample, name):
    """PG beats (one group of P rows each) straight into a gradient buffer, which adds one per
    cycle; returns the pulse of each sample's last beat."""
    end = m.submodules[f"{name}_end"] = SampleGate(grads.payload.shape(), beats_per_sample)
    m.d.comb += end.allow.eq(1)
    connect(m, grads, end.i)
    connect(m, end.o, buffer_in)
    return end.done
