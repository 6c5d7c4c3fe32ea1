"""When a slice's weight update happens, made a function of the mapping alone
(docs/weight_versions.md).

The update of mini-batch m (samples mB .. mB+B-1) is applied

- after PG and EB have finished sample (m+1)B - 1 and FP has finished sample
  (m+1)B - 1 + fp_stale, and
- before FP starts sample (m+1)B + fp_stale and EB or PG start sample (m+1)B.

So FP of sample s always uses weight version max(0, (s - fp_stale) // B) and EB
of sample s uses version s // B, exactly as ``mapping.golden.train`` assumes,
whatever the timing of the rest of the chain. ``fp_stale`` comes from the
mapping (samples in flight between this slice's FP and PG): with it large
enough the gate never stalls FP in steady state; ``fp_stale = 0`` is aligned SGD
with a pipeline drain at every mini-batch boundary.

``total_samples`` (from the host; 0 = unbounded) lets the last update happen
when FP will never reach the boundary sample: the condition becomes FP having
finished every sample there is, which is still independent of timing.

Engines raise ``*_start`` for one cycle when they begin a sample (only while
``*_allow`` is high) and ``*_done`` when they finish one.

:class:`OverlappedGate` is the gate of the update that does not stop the engines (EB one
sample behind, the weights in a VersionedParamRam).
"""

from amaranth.hdl import Assert, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..base.checks import refuse
from ..base.counter import ModuloCounter, next_value

COUNT_BITS = 32


# The ports of both gates: engine events in, allows and the update's strobe out.
GATE_PORTS = {
    "fp_start": In(1), "fp_done": In(1), "eb_start": In(1), "eb_done": In(1), "pg_start": In(1), "pg_done": In(1),
    "update_done": In(1), "total_samples": In(COUNT_BITS),
    "fp_allow": Out(1), "eb_allow": Out(1), "pg_allow": Out(1),
    "update_start": Out(1),  # one-cycle pulse
    "batch_index": Out(COUNT_BITS),  # mini-batches applied so far (the update's SR sample number)
}


class UpdateGate(wiring.Component):
    def __init__(self, *, batch, fp_stale, needs_eb=True):
        if batch < 1 or fp_stale < 0:
            refuse(self, f"update gate: batch = {batch} must be >= 1 and fp_stale = {fp_stale} >= 0")
        self.batch, self.fp_stale, self.needs_eb = batch, fp_stale, needs_eb
        super().__init__(GATE_PORTS)

    def elaborate(self, platform):
        m = Module()
        # Timing: the allows gate every engine's stream, whose handshake fans out to wide
        # clock enables, so each is a register of its own (one per engine, placed by it),
        # loaded from the next values of the update flag and its count's "zero" flag. Each
        # count is kept as the distance to its boundary (boundary - count) with that
        # registered flag, so no adder or magnitude comparator sits in front of an allow. The
        # update strobe may come a cycle later than its condition: the condition holds until
        # the update (counts only grow, and starts past the boundary are never allowed).
        updating, pending = Signal(), Signal()
        updating_next = next_value(m, updating)
        finishing = updating & self.update_done
        b, fp_first = self.batch, self.batch + self.fp_stale  # boundaries of mini-batch 0

        def left_to_boundary(pulse, first):
            """Zero flag (register) of ``boundary - count``: ``pulse`` counts, each update adds B.

            The distance is at most ``first`` when an update ends (the update waits for the
            counts to reach their boundary, or for FP to finish a run shorter than it), so it
            fits ``range(first + B + 1)``: a few bits, not a sample count's 32, which keeps the
            clock enable ``updating`` drives small (it was the worst path of a 135-multiplier
            node on an ECP5-85, 8.7 ns of routing)."""
            left, zero = Signal(range(first + b + 1), init=first), Signal(init=first == 0)
            zero_next = next_value(m, zero)
            with m.If(finishing):
                m.d.sync += [left.eq(left + b),
                             Assert(left <= first, "update gate: a count beyond its boundary at an update")]
                m.d.comb += zero_next.eq(0)
            with m.Elif(pulse):
                m.d.sync += left.eq(left - 1)
                m.d.comb += zero_next.eq(left == 1)
            # Starts stop at the boundary and the update waits for their ends.
            m.d.sync += Assert(~(finishing & pulse), "update gate: a sample ended during the update")
            return zero, zero_next

        def allow(port, started):
            """``port`` = not updating and not at the boundary, from a register of its own."""
            zero, zero_next = started
            register = Signal(init=not zero.init)
            m.d.sync += [register.eq(~updating_next & ~zero_next),
                         Assert(register == (~updating & ~zero), "update gate: an allow disagrees with its flags")]
            m.d.comb += port.eq(register)

        fp_started, (fp_finished, _) = left_to_boundary(self.fp_start, fp_first), left_to_boundary(self.fp_done, fp_first)
        pg_started, (pg_finished, _) = left_to_boundary(self.pg_start, b), left_to_boundary(self.pg_done, b)
        # A slice without EB (the first layer) counts no EB samples: its counts would only grow.
        if self.needs_eb:
            eb_started, (eb_finished, _) = left_to_boundary(self.eb_start, b), left_to_boundary(self.eb_done, b)
        else:
            never = Signal()  # at its boundary: never driven, so always 0
            eb_started, eb_finished = (never, Const(0)), Const(1)
        for port, started in ((self.fp_allow, fp_started), (self.eb_allow, eb_started), (self.pg_allow, pg_started)):
            allow(port, started)
        # With total_samples below FP's boundary, FP finishing every sample there is counts.
        fp_done_count, every_sample = Signal(COUNT_BITS), Signal()
        with m.If(self.fp_done):
            m.d.sync += fp_done_count.eq(fp_done_count + 1)
        m.d.sync += every_sample.eq((self.total_samples != 0) & (fp_done_count >= self.total_samples))
        ready = pg_finished & eb_finished & (fp_finished | every_sample)
        m.d.sync += pending.eq(ready & ~updating & ~pending)
        m.d.comb += self.update_start.eq(pending)
        with m.If(pending):
            m.d.comb += updating_next.eq(1)
        with m.If(finishing):
            m.d.comb += updating_next.eq(0)
            m.d.sync += self.batch_index.eq(self.batch_index + 1)
        return m


class OverlappedGate(wiring.Component):
    """The gate of the update that does not stop the engines (docs/weight_versions.md): FP of
    sample s uses version max(0, (s - fp_stale) // B), EB version max(0, (s - 1) // B), PG of
    s adds into the sums of mini-batch s // B, as ``mapping.golden.train(..., eb_stale=1)``
    (``fp_stale`` includes the sample the rule adds, ``mapping.perf.fp_stale(overlapped=True)``).

    The weights live in a VersionedParamRam: the engines read one copy while the walk of
    mini-batch m writes version m + 1 into the other. The walk (``update_start``) starts once
    PG has finished sample (m + 1)B - 1 and the copies were swapped after walk m - 1; PG
    goes on into the other gradient sum meanwhile, up to the end of mini-batch m + 1 (the
    sums of m + 2 are the walk's until it is done). ``swap`` pulses once walk m is done,
    FP has finished sample (m + 1)B - 1 + fp_stale and EB sample (m + 1)B, the last samples
    of version m; FP starts no later sample and EB none past (m + 1)B before it. So the
    engines wait only where the walk is longer than EB's sample on the old version.

    Same ports as :class:`UpdateGate` (``batch_index`` counts the walks done: the next
    walk's rounding sample number) and ``swap``. ``total_samples`` (0 = unbounded) lets the
    last swap happen once FP and EB have finished every sample there is. Counts are kept
    whole (COUNT_BITS), compared in front of registers; not the default, timed on node 3 of
    the default chain only (docs/boards.md).
    """

    def __init__(self, *, batch, fp_stale, needs_eb=True):
        if batch < 1 or fp_stale < 1:
            refuse(self, f"overlapped update gate: batch = {batch} must be >= 1 and fp_stale = {fp_stale} >= 1")
        self.batch, self.fp_stale, self.needs_eb = batch, fp_stale, needs_eb
        super().__init__({**GATE_PORTS, "swap": Out(1)})

    def elaborate(self, platform):
        m = Module()
        b = self.batch

        def count(pulse, first=0, step=1):
            """A register counting ``pulse`` by ``step`` from ``first``, and its next value."""
            register = Signal(COUNT_BITS, init=first)
            following = next_value(m, register)
            with m.If(pulse):
                m.d.comb += following.eq(register + step)
            return register, following

        walks, _ = count(self.update_start)
        walked, _ = count(self.update_done)
        swaps, _ = count(self.swap)
        # Sample limits: an engine starts sample n only while n < its limit.
        limits = {"fp": count(self.swap, b + self.fp_stale, b), "eb": count(self.swap, b + 1, b),
                  "pg": count(self.update_done, 2 * b, b)}
        walk_need, _ = count(self.update_start, b, b)  # PG samples finished before the next walk
        finished = {}
        for name, (limit, limit_next) in limits.items():
            started, started_next = count(getattr(self, f"{name}_start"))
            finished[name], _ = count(getattr(self, f"{name}_done"))
            allow = Signal(init=1, name=f"{name}_allowed")  # registered from the next counts
            m.d.sync += [allow.eq(started_next < limit_next),
                         Assert(allow == (started < limit), f"overlapped update gate: {name} allow disagrees")]
            m.d.comb += getattr(self, f"{name}_allow").eq(allow)

        def all_done(name):
            done, (limit, _) = finished[name], limits[name]
            return (done >= limit) | ((self.total_samples != 0) & (done >= self.total_samples))

        walk_ready, walk_pending = Signal(), Signal()
        m.d.sync += [walk_ready.eq((finished["pg"] >= walk_need) & (swaps == walks)),
                     walk_pending.eq(walk_ready & ~walk_pending & (swaps == walks))]
        swap_ready, swap_pending = Signal(), Signal()
        eb_ready = all_done("eb") if self.needs_eb else 1
        m.d.sync += [swap_ready.eq((walked > swaps) & all_done("fp") & eb_ready),
                     swap_pending.eq(swap_ready & ~swap_pending & (walked > swaps))]
        m.d.comb += [self.update_start.eq(walk_pending), self.swap.eq(swap_pending),
                     self.batch_index.eq(walked)]
        m.d.sync += Assert(~(self.update_start & (walks != walked)), "overlapped update gate: a walk while walking")
        return m


class SampleGate(wiring.Component):
    """A stream pass-through that counts ``beats`` per sample and holds a new sample until ``allow``.

    ``start`` pulses when the first beat of a sample passes, ``done`` when its last
    beat passes. With ``allow`` tied high it only counts (to detect a sample's end).
    """

    def __init__(self, layout, beats):
        if beats < 1:
            refuse(self, f"sample gate: beats = {beats} must be at least 1")
        self.beats = beats
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout)),
                          "allow": In(1), "start": Out(1), "done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        beat = ModuloCounter(m, self.beats, self.o.valid & self.o.ready)
        open_ = ~beat.first | self.allow  # mid-sample beats are never held
        m.d.comb += [self.o.payload.eq(self.i.payload),
                     self.o.valid.eq(self.i.valid & open_),
                     self.i.ready.eq(self.o.ready & open_)]
        with m.If(self.o.valid & self.o.ready):
            m.d.comb += [self.start.eq(beat.first), self.done.eq(beat.last)]
        return m


class BothDone(wiring.Component):
    """``both`` pulses once per event that both pulse inputs ``a`` and ``b`` have reported, in
    any interleaving, a cycle after the later of the two.

    Counts rather than flags: a pipelined source may report event n+1 before the other
    reports event n, and each must still pair with its own. Each input keeps only how many of
    its events wait for the other's (at most ``most_ahead``: the caller's bound, asserted in
    simulation) and a registered "some wait" flag, so ``both`` is one AND of two registers: as
    two 32-bit comparisons of event counts it was the worst path of a 72-multiplier node on an
    ECP5-45 (into the update gate's flags, 7.8 ns of routing).
    """

    a: In(1)
    b: In(1)
    both: Out(1)

    def __init__(self, most_ahead):
        if most_ahead < 1:
            refuse(self, f"both done: most_ahead = {most_ahead} must be at least 1")
        self.most_ahead = most_ahead
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        some = []
        for name, done in (("a", self.a), ("b", self.b)):
            waiting = Signal(range(self.most_ahead + 1), name=f"{name}_waiting")
            any_waiting = Signal(name=f"{name}_some")
            with m.If(done & ~self.both):
                m.d.sync += [waiting.eq(waiting + 1), any_waiting.eq(1),
                             Assert(waiting < self.most_ahead, f"both done: {name} more than {self.most_ahead} ahead")]
            with m.Elif(self.both & ~done):
                m.d.sync += [waiting.eq(waiting - 1), any_waiting.eq(waiting != 1)]
            some.append(any_waiting)
        m.d.comb += self.both.eq(some[0] & some[1])
        return m
