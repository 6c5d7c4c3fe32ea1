"""Weight rows streamed between nodes for weight balancing (paper 3.4, Fig. 6).

Where a fully connected slice's weights do not fit its node, the mapping keeps its
top output-channel rows in the BPRAM of another node, the host
(``WeightBlock.owner_slice``; the nodes in between relay the streams,
hw/bpram_host.Relay). The host lays them out exactly as the owner's LPRAM
would hold them past its local rows (``hw.param_ram.WeightLayout`` of the owner's
engines: G_r*v addresses of P rows of b*K*K words), so one address is one beat of
the owner engine's walk, and the remote rows start at an engine-group boundary:
the owner's own LPRAM holds addresses ``0 .. first_remote - 1``, the host's
``first_remote .. G*v - 1`` (renumbered from 0).

- :class:`RowStreamer` (host) walks the block's addresses once per sample, in the
  order the owner's engine reads them (FP group-major, EB pass-major), through a
  ParamRam read port, and sends every address's P rows as one beat. A pass starts
  only while ``allow`` (the host's UpdateGate, which mirrors the owner's weight
  versions); once started it runs to its end.
- :class:`WeightSource` (owner) stands between an engine and its LPRAM port: a step
  at a local address reads the LPRAM, a step at a remote address takes the next
  beat of the row stream, and the engine's window is held (neither valid to the
  engine nor ready to its producer) while that beat has not arrived. The window it
  offers the engine may thus lose ``valid`` before it is taken, as a SampleGate's
  does at a sample boundary: the engines issue a step in any cycle their window is
  valid and take it only with its last step, so nothing is lost or repeated.
- :class:`GradientSplit` (owner) sends the PG beats of local addresses to the LGB and
  those of remote addresses, renumbered, back to the host's BGB.

A fully connected slice has one window per sample, so per sample and weight one
16-bit word crosses towards the owner for FP, one for EB, and one 48-bit gradient
product back (``mapping.perf`` counts the same).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.engine_common import Issue
from hw.param_ram import bank_layout, weight_port_signature
from hw.pg_engine import grads_layout
from hw.rounding import refuse


class RowStreamer(wiring.Component):
    """Streams the ``layout.rows`` addresses of a ParamRam port once per allowed sample.

    ``group_major``: FP order (address g*v + i ascending), else EB order (the G groups
    of pass 0, then of pass 1, ...). ``start`` pulses when a pass's first address is
    read, ``done`` when its last beat is taken.
    """

    def __init__(self, layout, *, group_major):
        self.layout, self.group_major = layout, group_major
        super().__init__({
            "port": Out(weight_port_signature(layout.rows, layout.banks, layout.words)),
            "rows": Out(stream.Signature(bank_layout(layout.banks, layout.words))),
            "allow": In(1), "start": Out(1), "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        out = self.rows
        advance = ~out.valid | out.ready  # the beat on display is free or being taken
        busy = Signal()  # a pass is under way: it finishes whatever ``allow`` does
        issue = Issue(m, self.layout.groups, self.layout.passes, busy | self.allow, advance,
                      group_major=self.group_major)
        first = issue.first_group & issue.first_pass
        last = issue.last_group & issue.last_pass
        m.d.comb += [self.port.weight_addr.eq(issue.addr), self.port.weight_en.eq(issue.issue),
                     self.start.eq(issue.issue & first)]
        with m.If(issue.issue):
            m.d.sync += busy.eq(~last)
        # The port's read register is the beat's payload: it holds while the beat waits.
        last_beat = Signal()
        with m.If(advance):
            m.d.sync += [out.valid.eq(issue.issue), last_beat.eq(issue.issue & last)]
        m.d.comb += [out.payload.eq(self.port.weight_data),
                     self.done.eq(out.valid & out.ready & last_beat)]
        return m


class WeightSource(wiring.Component):
    """An engine's weight port split between the LPRAM (addresses below ``first_remote``) and a
    row stream from the host (the rest); ``windows_in`` -> ``windows_out`` is the engine's
    window stream, held while a remote step's row has not arrived.

    ``rows``: the engine's G*v addresses of ``banks`` rows of ``words`` words;
    ``first_remote`` = 0 when every row is remote (no ``ram`` port then).
    """

    def __init__(self, *, rows, banks, words, first_remote, window):
        if not 0 <= first_remote < rows:
            refuse(self, f"weight source: the first remote address {first_remote} is not below the "
                         f"engine's {rows} addresses")
        self.rows, self.first_remote = rows, first_remote
        members = {
            "engine": In(weight_port_signature(rows, banks, words)),
            "remote": In(stream.Signature(bank_layout(banks, words))),
            "windows_in": In(stream.Signature(window)),
            "windows_out": Out(stream.Signature(window)),
        }
        if first_remote:
            members["ram"] = Out(weight_port_signature(first_remote, banks, words))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        engine, remote = self.engine, self.remote
        # The engine's address is a register holding the step it issues next.
        is_remote = engine.weight_addr >= self.first_remote
        ready_to_step = ~is_remote | remote.valid
        m.d.comb += [
            self.windows_out.payload.eq(self.windows_in.payload),
            self.windows_out.valid.eq(self.windows_in.valid & ready_to_step),
            self.windows_in.ready.eq(self.windows_out.ready & ready_to_step),
            remote.ready.eq(engine.weight_en & is_remote),
        ]
        # Both sources hold their word while the engine stalls, like a RAM read register.
        held, from_stream = Signal.like(remote.payload), Signal()
        with m.If(engine.weight_en):
            m.d.sync += from_stream.eq(is_remote)
        with m.If(remote.ready):
            m.d.sync += held.eq(remote.payload)
        if self.first_remote:
            m.d.comb += [self.ram.weight_addr.eq(engine.weight_addr),
                         self.ram.weight_en.eq(engine.weight_en & ~is_remote),
                         engine.weight_data.eq(Mux(from_stream, held.as_value(),
                                                   self.ram.weight_data.as_value()))]
        else:
            m.d.comb += engine.weight_data.eq(held)
        return m


class GradientSplit(wiring.Component):
    """PG beats of addresses below ``first_remote`` to ``local``, the others to ``remote`` with
    their address less ``first_remote`` (the host's numbering)."""

    def __init__(self, *, rows, banks, words, first_remote):
        if not 0 < first_remote < rows:
            refuse(self, f"gradient split: the first remote address {first_remote} does not split the "
                         f"engine's {rows} addresses")
        self.first_remote = first_remote
        super().__init__({
            "i": In(stream.Signature(grads_layout(rows, banks, words))),
            "local": Out(stream.Signature(grads_layout(first_remote, banks, words))),
            "remote": Out(stream.Signature(grads_layout(rows - first_remote, banks, words))),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self.i.payload
        to_remote = beat.row >= self.first_remote
        m.d.comb += [
            self.local.payload.row.eq(beat.row), self.local.payload.values.eq(beat.values),
            self.remote.payload.row.eq(beat.row - self.first_remote),
            self.remote.payload.values.eq(beat.values),
            self.local.valid.eq(self.i.valid & ~to_remote),
            self.remote.valid.eq(self.i.valid & to_remote),
            self.i.ready.eq(Mux(to_remote, self.remote.ready, self.local.ready)),
        ]
        return m
