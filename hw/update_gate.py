"""When a slice's weight update happens, made a function of the mapping alone (DESIGN.md 7).

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
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .rounding import refuse

COUNT_BITS = 32


class UpdateGate(wiring.Component):
    fp_start: In(1)
    fp_done: In(1)
    eb_start: In(1)
    eb_done: In(1)
    pg_start: In(1)
    pg_done: In(1)
    update_done: In(1)
    total_samples: In(COUNT_BITS)

    fp_allow: Out(1)
    eb_allow: Out(1)
    pg_allow: Out(1)
    update_start: Out(1)   # one-cycle pulse
    batch_index: Out(COUNT_BITS)  # mini-batches applied so far (the update's SR sample number)

    def __init__(self, *, batch, fp_stale, needs_eb=True):
        if batch < 1 or fp_stale < 0:
            refuse(self, f"update gate: batch = {batch} must be >= 1 and fp_stale = {fp_stale} >= 0")
        self.batch, self.fp_stale, self.needs_eb = batch, fp_stale, needs_eb
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        counts = {}
        for name in ("fp_start", "fp_done", "eb_start", "eb_done", "pg_start", "pg_done"):
            counts[name] = count = Signal(COUNT_BITS, name=f"{name}_count")
            with m.If(getattr(self, name)):
                m.d.sync += count.eq(count + 1)
        updating = Signal()
        # End of the mini-batch being accumulated now, and FP's matching boundary.
        boundary = Signal(COUNT_BITS)
        m.d.comb += boundary.eq((self.batch_index + 1) * self.batch)
        fp_boundary, fp_target = Signal(COUNT_BITS), Signal(COUNT_BITS)
        m.d.comb += [fp_boundary.eq(boundary + self.fp_stale), fp_target.eq(fp_boundary)]
        m.d.comb += [
            self.fp_allow.eq(~updating & (counts["fp_start"] < fp_boundary)),
            self.eb_allow.eq(~updating & (counts["eb_start"] < boundary)),
            self.pg_allow.eq(~updating & (counts["pg_start"] < boundary)),
        ]
        eb_ready = (counts["eb_done"] >= boundary) if self.needs_eb else 1
        with m.If((self.total_samples != 0) & (self.total_samples < fp_boundary)):
            m.d.comb += fp_target.eq(self.total_samples)
        ready = (counts["pg_done"] >= boundary) & eb_ready & (counts["fp_done"] >= fp_target)
        with m.If(~updating & ready):
            m.d.comb += self.update_start.eq(1)
            m.d.sync += updating.eq(1)
        with m.If(updating & self.update_done):
            m.d.sync += [updating.eq(0), self.batch_index.eq(self.batch_index + 1)]
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
        beat = Signal(range(self.beats))
        open_ = (beat != 0) | self.allow  # mid-sample beats are never held
        m.d.comb += [self.o.payload.eq(self.i.payload),
                     self.o.valid.eq(self.i.valid & open_),
                     self.i.ready.eq(self.o.ready & open_)]
        with m.If(self.o.valid & self.o.ready):
            m.d.comb += [self.start.eq(beat == 0), self.done.eq(beat == self.beats - 1)]
            m.d.sync += beat.eq(Mux(beat == self.beats - 1, 0, beat + 1))
        return m
