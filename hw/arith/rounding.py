"""Stochastic rounding and saturation: :func:`mapping.numerics.requantize` in hardware.

For every lane, ``value = saturate((acc + r) >> shift)`` with the noise
``r = mix32(key ^ index) & (2**shift - 1)`` and the per-sample key
``key = mix32(mix32(seed ^ tensor) ^ sample)``. The inner ``mix32(seed ^ tensor)``
is an elaboration-time constant; the key is recomputed for every beat (it only
changes at sample boundaries, but recomputing costs three adders and needs no
state that would have to be reset between samples).

``mix32`` needs only xorshifts and shift-add multiplies by constants with three set
bits, so the unit uses adders and no DSP blocks. Each mix round (a 32-bit xorshift
and a three-input add) is one pipeline stage, so the clock is never limited by a
chain of adders:

With R = ``len(numerics.MIX_ROUNDS)`` (4):

====================  =====================================================
stage 1..R            key rounds (sample)           | index delayed; stage 1 splits
                                                    | acc into acc >> shift and its low
                                                    | ``shift`` bits, stage 2 clamps the
                                                    | first to 17 bits; both delayed
stage R+1..2R         noise rounds (key ^ index)    | the split acc delayed; stage 2R
                                                    | also holds high + 1
stage 2R+1            high or high + 1, by carry(low + r) (r: low ``shift`` bits of the noise)
stage 2R+2            saturate to 16 bits
====================  =====================================================

With ``shift <= 0`` there is no noise and the unit is a single stage. Every stage
advances together when the output is free or being taken (``advance``), which is
also ``i.ready``: one beat per cycle with a ready consumer, and a stall holds every
stage, so nothing is dropped or duplicated.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping import numerics

from ..base.checks import refuse
from .pipeline import CreditedOutput, Pipeline

INDEX_BITS = 32
SAMPLE_BITS = 32


# Shifts by a constant are written shift_left/shift_right here and in the blocks that round:
# they are wiring, where Amaranth's `<<`/`>>` by an int is a shift operator with an edge from
# every input bit to every output bit, which its netlist's check for combinational cycles walks
# (a 16,384-bit `>>` was 93% of a paper-scale fully connected slice's edges).


def mix_round(x, xorshift, a, b):
    """One round of ``numerics.mix32`` on a 32-bit value: xorshift, then ``x * (1 + 2**a + 2**b)``."""
    x = x ^ x.shift_right(xorshift)
    return (x + x.shift_left(a)[:32] + x.shift_left(b)[:32])[:32]  # modulo 2**32: 32-bit adders


def mix_final(x):
    return x ^ x.shift_right(numerics.MIX_FINAL_XORSHIFT)


def low_bits(value, width):
    """The low ``width`` bits of the signed ``value``, sign-extended where it is narrower: wiring."""
    if len(value) >= width:
        return value[:width]
    return Cat(value, value[-1].replicate(width - len(value)))


def signed_width(constant):
    """The fewest two's-complement bits that hold the integer ``constant``."""
    return (constant if constant >= 0 else ~constant).bit_length() + 1


def clamp(value, lo, hi):
    """``value`` (signed or unsigned) clamped to the constants ``lo`` .. ``hi``, as ``signed(n)``
    for the narrowest n that holds both.

    Whether a wider value fits m bits is whether its bits from m - 1 up are all equal (a LUT
    tree), not two comparisons with constants as wide as the value: Yosys builds each of those
    as a carry chain, and a gradient buffer's saturating adds were mostly such chains. Where
    each bound is at most one beyond the m-bit range (a saturation, or the rounder's
    -2**15 - 1), a value that does not fit m bits is a bound, by its sign: no comparison at
    all. Other bounds are compared on n bits only."""
    if lo > hi:
        raise ValueError(f"clamp: lo = {lo!r} is above hi = {hi!r}")
    n = max(signed_width(lo), signed_width(hi))
    value = _signed(value)
    bounds = Mux(value[-1], Const(lo, signed(n)), Const(hi, signed(n)))
    inside = [m for m in range(1, n + 1) if lo <= -(1 << (m - 1)) and (1 << (m - 1)) - 1 <= hi]
    if inside and lo >= -(1 << (inside[-1] - 1)) - 1 and hi <= 1 << (inside[-1] - 1):
        m = inside[-1]
        if len(value) <= m:
            return value
        return Mux(fits(value, m), value[:n].as_signed(), bounds)  # the bits above m - 1 equal
    narrow = value[:n].as_signed()
    within = Mux(narrow > hi, hi, Mux(narrow < lo, lo, narrow))
    if len(value) <= n:
        return within
    return Mux(fits(value, n), within, bounds)


def saturating_add(narrow, wide, bits):
    """``saturate(narrow + wide, bits)`` for a ``narrow`` value of at most ``bits`` bits (a narrow
    sum) and a ``wide`` one (a term): the add is only ``bits`` + 2 bits wide, since a ``wide``
    that does not fit ``bits`` + 1 bits saturates the sum by its own sign whatever ``narrow``
    is. The carry chain of a full-width add and its overflow check were most of a gradient
    buffer's logic per term."""
    head, wide = bits + 1, _signed(wide)
    if len(wide) <= head:
        return saturate(narrow + wide, bits)
    near = saturate(narrow + wide[:head].as_signed(), bits)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return Mux(fits(wide, head), near, Mux(wide[-1], Const(low, signed(bits)), Const(high, signed(bits))))


def _signed(value):
    """``value`` as a signed value of the same number (an unsigned one gains a zero bit)."""
    return value if value.shape().signed else Cat(value, Const(0, 1)).as_signed()


def fits(value, bits):
    """Whether the signed ``value`` is in the ``bits``-bit two's-complement range."""
    top = value[bits - 1:]
    return top.all() | ~top.any()


def saturate(value, bits):
    """Clamp a signed value to the ``bits``-bit two's-complement range."""
    return clamp(value, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


class StochasticRounder(wiring.Component):
    """``lanes`` accumulators per beat rounded to 16-bit words, bit-exact with ``requantize``.

    ``extra``: an optional ``data.Layout`` carried from input to output unchanged
    (e.g. a channel group or a flag the consumer needs alongside the values).
    ``latency``: cycles from an accepted input to its output with no stall.
    ``credited``: the pipeline never stalls (:class:`~hw.arith.pipeline.CreditedOutput`, a
    buffer of ``capacity`` outputs in memory for ``family``, by default ``latency + 1``, the
    fewest that keep one output per cycle): ``i.ready`` is then a register, not the consumer's
    handshake running into every register's enable; the same outputs in the same order, and
    in the same cycles while the consumer is always ready.
    """

    def __init__(self, *, lanes, shift, seed, tensor, acc_width=numerics.ACC_BITS, extra=None, credited=False,
                 capacity=None, family=None):
        if lanes < 1:
            refuse(self, f"stochastic rounder: lanes = {lanes} must be at least 1")
        if shift > numerics.MAX_SHIFT:
            refuse(self, f"stochastic rounder: shift = {shift} exceeds the "
                         f"{numerics.MAX_SHIFT}-bit noise word")
        if acc_width < 2:
            refuse(self, f"stochastic rounder: acc_width = {acc_width} must be at least 2")
        if not 0 <= seed < 1 << 32:
            refuse(self, f"stochastic rounder: seed = {seed} is not a 32-bit unsigned value")
        if not 0 <= tensor < 1 << 32:
            refuse(self, f"stochastic rounder: tensor = {tensor} is not a 32-bit unsigned value")
        self.lanes, self.shift, self.acc_width = lanes, shift, acc_width
        self.seed, self.tensor, self.extra = seed, tensor, extra
        self.credited, self.family = credited, family
        self.latency = numerics.rounder_latency(shift)
        self.capacity = self.latency + 1 if capacity is None else capacity
        if credited and self.capacity < self.latency + 1:
            refuse(self, f"stochastic rounder: capacity = {self.capacity} is below latency + 1 = {self.latency + 1}")
        inputs = {"acc": data.ArrayLayout(signed(acc_width), lanes),
                  "index": data.ArrayLayout(unsigned(INDEX_BITS), lanes),
                  "sample": unsigned(SAMPLE_BITS)}
        outputs = {"value": data.ArrayLayout(signed(numerics.WORD_BITS), lanes)}
        if extra is not None:
            inputs["extra"] = outputs["extra"] = extra
        super().__init__({
            "i": In(stream.Signature(data.StructLayout(inputs))),
            "o": Out(stream.Signature(data.StructLayout(outputs))),
        })

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()  # every register of the datapath; all advance on one enable
        stage, delay = pipe.stage, pipe.delay

        payload = self.i.payload
        acc_layout = data.ArrayLayout(signed(self.acc_width), self.lanes)
        if self.shift > 0:
            key = Const(int(numerics.mix32(self.seed ^ self.tensor)), 32) ^ payload.sample
            for xorshift, (a, b) in numerics.MIX_ROUNDS:
                key = stage(mix_round(key, xorshift, a, b))
            key = mix_final(key)
            index = delay(payload.index.as_value(), len(numerics.MIX_ROUNDS))
            noise = [key ^ index[lane * INDEX_BITS:(lane + 1) * INDEX_BITS] for lane in range(self.lanes)]
            for xorshift, (a, b) in numerics.MIX_ROUNDS:
                noise = [stage(mix_round(n, xorshift, a, b)) for n in noise]
            # (acc + r) >> shift = (acc >> shift) + carry of (low bits + r), as 0 <= r < 2**shift;
            # clamping acc >> shift to [-2**15 - 1, 2**15 - 1] first changes no saturated result,
            # so the noise rounds delay 17 + shift bits per lane, not the whole accumulator.
            # The clamp waits one stage: its wide comparisons straight off a multiplier's output
            # register (the gradient buffers' update lanes) were a node's worst path on ECP5.
            acc = acc_layout(payload.acc.as_value())
            top = (1 << (numerics.WORD_BITS - 1)) - 1
            high = [stage(clamp(stage(acc[lane].shift_right(self.shift)), -top - 2, top), signed(numerics.WORD_BITS + 1))
                    for lane in range(self.lanes)]
            low = [stage(acc[lane][:self.shift]) for lane in range(self.lanes)]
            # The high part and its successor wait side by side, so the last stage only chooses
            # between them by the carry (the carry chain of low + r, then the 17-bit add of
            # the carry, was an ECP5-85 node's path at 125 MHz).
            high = [delay(h, 2 * len(numerics.MIX_ROUNDS) - 3) for h in high]
            high = [(stage(h), stage(h + 1, signed(numerics.WORD_BITS + 1))) for h in high]
            low = [delay(b, 2 * len(numerics.MIX_ROUNDS) - 1) for b in low]
            sums = [stage(Mux((b + mix_final(n)[:self.shift])[self.shift], h_more, h))
                    for (h, h_more), b, n in zip(high, low, noise)]
            values = [stage(saturate(s, numerics.WORD_BITS), signed(numerics.WORD_BITS)) for s in sums]
        else:
            acc = acc_layout(payload.acc.as_value())
            lanes = [acc[lane] for lane in range(self.lanes)]
            if self.shift < 0:
                # requantize clamps to ACC_BITS before the exact left shift.
                if self.acc_width > numerics.ACC_BITS:
                    lanes = [saturate(a, numerics.ACC_BITS) for a in lanes]
                lanes = [a.shift_left(-self.shift) for a in lanes]
            values = [stage(saturate(a, numerics.WORD_BITS), signed(numerics.WORD_BITS)) for a in lanes]

        extra = [] if self.extra is None else [delay(payload.extra.as_value(), self.latency)]
        if self.credited:
            credit = CreditedOutput(self.capacity, self.family)
            issue = self.i.valid & credit.room
            credit.attach(m, produced=issue, valid=delay(issue, self.latency, reset=True),
                          payload=Cat(*values, *extra), out=self.o)
            m.d.comb += self.i.ready.eq(credit.room)
            pipe.attach(m)
            return m
        m.d.comb += [self.o.valid.eq(delay(self.i.valid, self.latency, reset=True)),
                     self.o.payload.eq(Cat(*values, *extra))]
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        pipe.attach(m, advance)
        return m

