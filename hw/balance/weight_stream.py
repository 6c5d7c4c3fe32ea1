"""Weight rows streamed between nodes for weight balancing (paper 3.4, Fig. 6).

Where a fully connected slice's weights do not fit its node, the mapping keeps its
top output-channel rows in the BPRAM of another node, the host
(``WeightBlock.owner_slice``; the nodes in between relay the streams,
hw/balance/relay.py). The host lays them out exactly as the owner's LPRAM
would hold them past its local rows (``hw.memory.param_ram.WeightLayout`` of the owner's
engines: G_r*v addresses of P rows of b*K*K words), so one address is one beat of
the owner engine's walk, and each host's rows start at an engine-group boundary:
the owner's own LPRAM holds addresses ``0 .. starts[0] - 1``, host k's
``starts[k] .. starts[k+1] - 1`` (renumbered from 0; the last host's up to G*v - 1).

- :class:`RowStreamer` (host) walks the block's addresses once per sample, in the
  order the owner's engine reads them (FP group-major, EB pass-major), through a
  ParamRam read port, and sends every address's P rows as one beat. A pass starts
  only while ``allow`` (the host's UpdateGate, which mirrors the owner's weight
  versions); once started it runs to its end.
- :class:`WeightSource` (owner) stands between an engine and its LPRAM port: a step
  at a local address reads the LPRAM, a step at a remote address takes the next
  beat of its host's row stream, and the engine's window is held (neither valid to the
  engine nor ready to its producer) while that beat has not arrived. The window it
  offers the engine may thus lose ``valid`` before it is taken, as a SampleGate's
  does at a sample boundary: the engines issue a step in any cycle their window is
  valid and take it only with its last step, so nothing is lost or repeated.
- :class:`GradientSplit` (owner) sends the PG beats of local addresses to the LGB and
  those of remote addresses, renumbered, back to their host's BGB.

A fully connected slice has one window per sample, so per sample and weight one
16-bit word crosses towards the owner for FP, one for EB, and one 48-bit gradient
product back (``mapping.perf`` counts the same).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..base.checks import refuse
from ..base.layouts import bank_layout, grads_layout
from ..base.signatures import WeightPortSignature
from ..engines.common import Issue


class RowStreamer(wiring.Component):
    """Streams the ``layout.rows`` addresses of a ParamRam port once per allowed sample.

    ``group_major``: FP order (address g*v + i ascending), else EB order (the G groups
    of pass 0, then of pass 1, ...). ``start`` pulses when a pass's first address is
    read, ``done`` when its last beat is taken.
    """

    def __init__(self, layout, *, group_major):
        self.layout, self.group_major = layout, group_major
        super().__init__({
            "port": Out(WeightPortSignature(layout.rows, layout.banks, layout.words)),
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
        m.d.comb += [self.port.addr.eq(issue.addr), self.port.en.eq(issue.issue),
                     self.start.eq(issue.issue & first)]
        with m.If(issue.issue):
            m.d.sync += busy.eq(~last)
        # The port's read register is the beat's payload: it holds while the beat waits.
        last_beat = Signal()
        with m.If(advance):
            m.d.sync += [out.valid.eq(issue.issue), last_beat.eq(issue.issue & last)]
        m.d.comb += [out.payload.eq(self.port.data),
                     self.done.eq(out.valid & out.ready & last_beat)]
        return m


def _check_starts(owner, what, starts, rows):
    """Refuse remote range starts that are not ascending addresses of the engine's ``rows``."""
    if not starts or list(starts) != sorted(set(starts)) or starts[0] < 0 or starts[-1] >= rows:
        refuse(owner, f"{what}: the remote ranges' first addresses {list(starts)} are not ascending "
                      f"addresses below the engine's {rows}")


def _ranges(starts, rows):
    """(first, end) of each remote range."""
    return list(zip(starts, list(starts[1:]) + [rows]))


def _within(addr, first, end, rows):
    return (addr >= first) & (addr < end) if end < rows else addr >= first


class WeightSource(wiring.Component):
    """An engine's weight port split between the LPRAM (addresses below ``starts[0]``) and
    the row streams ``remote[k]`` of the hosts of ranges ``starts[k]`` .. ``starts[k+1] - 1``
    (the last to the end); ``windows_in`` -> ``windows_out`` is the engine's window stream,
    held while a remote step's row has not arrived.

    ``rows``: the engine's G*v addresses of ``banks`` rows of ``words`` words;
    ``starts[0]`` = 0 when every row is remote (no ``ram`` port then).
    """

    def __init__(self, *, rows, banks, words, starts, window):
        _check_starts(self, "weight source", starts, rows)
        self.rows, self.starts = rows, tuple(starts)
        members = {
            "engine": In(WeightPortSignature(rows, banks, words)),
            "windows_in": In(stream.Signature(window)),
            "windows_out": Out(stream.Signature(window)),
        }
        members["remote"] = In(stream.Signature(bank_layout(banks, words))).array(len(starts))
        if starts[0]:
            members["ram"] = Out(WeightPortSignature(starts[0], banks, words))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        engine = self.engine
        # The engine's address is a register holding the step it issues next.
        addr = engine.addr
        is_remote = addr >= self.starts[0]
        arrived = 0
        held, from_stream = Signal(self.remote[0].payload.shape()), Signal()
        for remote, (first, end) in zip(self.remote, _ranges(self.starts, self.rows)):
            mine = _within(addr, first, end, self.rows)
            arrived |= mine & remote.valid
            m.d.comb += remote.ready.eq(engine.en & mine)
            # Both sources hold their word while the engine stalls, like a RAM read register.
            with m.If(remote.ready):
                m.d.sync += held.eq(remote.payload)
        ready_to_step = ~is_remote | arrived
        m.d.comb += [
            self.windows_out.payload.eq(self.windows_in.payload),
            self.windows_out.valid.eq(self.windows_in.valid & ready_to_step),
            self.windows_in.ready.eq(self.windows_out.ready & ready_to_step),
        ]
        with m.If(engine.en):
            m.d.sync += from_stream.eq(is_remote)
        if self.starts[0]:
            m.d.comb += [self.ram.addr.eq(addr),
                         self.ram.en.eq(engine.en & ~is_remote),
                         engine.data.eq(Mux(from_stream, held.as_value(),
                                                   self.ram.data.as_value()))]
        else:
            m.d.comb += engine.data.eq(held)
        return m


class GradientSplit(wiring.Component):
    """PG beats of addresses below ``starts[0]`` to ``local`` (none if ``starts[0]`` is 0),
    those of range k to ``remote<k>`` with their address less ``starts[k]`` (the host's
    numbering)."""

    def __init__(self, *, rows, banks, words, starts):
        _check_starts(self, "gradient split", starts, rows)
        self.rows, self.starts = rows, tuple(starts)
        members = {"i": In(stream.Signature(grads_layout(rows, banks, words)))}
        if starts[0]:
            members["local"] = Out(stream.Signature(grads_layout(starts[0], banks, words)))
        for k, (first, end) in enumerate(_ranges(starts, rows)):
            members[f"remote{k}"] = Out(stream.Signature(grads_layout(end - first, banks, words)))
        super().__init__(members)

    def remotes(self):
        """The ``remote<k>`` outputs in range order (their row ranges, and so their
        payloads, differ: one member each rather than an array)."""
        return [getattr(self, f"remote{k}") for k in range(len(self.starts))]

    def elaborate(self, platform):
        m = Module()
        beat = self.i.payload
        outputs = [(remote, first, _within(beat.row, first, end, self.rows))
                   for remote, (first, end) in zip(self.remotes(), _ranges(self.starts, self.rows))]
        if self.starts[0]:
            outputs.append((self.local, 0, beat.row < self.starts[0]))
        ready = 0
        for out, first, mine in outputs:
            m.d.comb += [out.payload.row.eq(beat.row - first), out.payload.values.eq(beat.values),
                         out.valid.eq(self.i.valid & mine)]
            ready |= mine & out.ready
        m.d.comb += self.i.ready.eq(ready)
        return m
