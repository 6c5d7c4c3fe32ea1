"""Registered flags: a modulo counter whose first and last flags are registers,
:func:`next_value`, for a flag of any register, and :func:`up_down`, a count moved by late
handshakes.

Engines and sample gates decide their ready from "is this the first / last step", and
that decision sits on paths through several blocks (an engine's window ready, a FIFO's
clock enable behind it); comparing the count there adds a level of logic, so the flags
are registered with the count instead.
"""

from amaranth.hdl import Cat, Mux, Signal


def next_value(m, register):
    """The value ``register`` takes at the next clock edge, assigned combinationally in place of
    its synchronous assignments (it holds unless assigned; later assignments win, as for
    ``m.d.sync``). A flag registered from a function of it equals the same function of the
    register in every cycle, without that function's logic in front of the flag's readers."""
    value = Signal.like(register, name=f"{register.name}_next")
    m.d.comb += value.eq(register)
    m.d.sync += register.eq(value)
    return value


def up_down(m, register, up, down):
    """``register`` becomes ``register + up - down`` (one-bit steps) at each clock edge. Both
    candidates (one more, one less) come from the register alone and the steps only choose
    between them, so a late handshake meets one multiplexer instead of entering the carry
    chain of ``register + up - down`` (a FIFO's level, moved by its consumer's ready, was an
    ECP5-85 node's path at 125 MHz). Returns ``after(f)``: ``f`` of the next value, chosen the
    same way (a flag registered from the next count)."""
    more, less = register + 1, register - 1

    def after(f):
        return Mux(up & ~down, f(more), Mux(down & ~up, f(less), f(register)))

    m.d.sync += register.eq(after(lambda value: value))
    return after


class ModuloCounter:
    """``value`` counts 0 .. ``count``-1 and wraps, one step in each cycle ``step`` is high;
    ``first`` is high while ``value == 0``, ``last`` while ``value == count - 1``."""

    def __init__(self, m, count, step):
        self.value = Signal(range(count))
        self.first, self.last = Signal(init=1), Signal(init=count == 1)
        if count == 1:
            return  # always 0, first and last
        with m.If(step):
            m.d.sync += [self.value.eq(Mux(self.last, 0, self.value + 1)), self.first.eq(self.last),
                         self.last.eq(~self.last & (self.value == count - 2))]


def saturating_increment(m, counter, limit):
    """``counter`` counts up to ``limit`` and stays there (one more each cycle this is reached)."""
    with m.If(counter != limit):
        m.d.sync += counter.eq(counter + 1)


def ring_successor(pointer, size):
    """The next position of ``pointer`` on a ring of ``size`` places: 0 after ``size - 1``."""
    return Mux(pointer == size - 1, 0, pointer + 1)


def gather(m, beat, take, beats, width):
    """A vector of ``width`` bits arriving as ``beats`` beats of ``beat`` (a Value, low part first):
    each beat but the last, taken on ``take``, is kept in a register, and the last completes the
    vector with no stage of its own. Returns (the vector, high while the beat on ``beat`` is the
    last). The SFU's conv pixels and the loss unit's errors are gathered so."""
    size = len(beat)
    count = Signal(range(beats))
    held = Signal(size * (beats - 1))
    with m.If(take):
        m.d.sync += count.eq(Mux(count == beats - 1, 0, count + 1))
        for n in range(beats - 1):
            with m.If(count == n):
                m.d.sync += held[n * size:(n + 1) * size].eq(beat)
    return Cat(held, beat)[:width], count == beats - 1
