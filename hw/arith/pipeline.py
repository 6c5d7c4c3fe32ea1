"""Pipeline registers (:class:`Pipeline`): the stalling pipelines of the PG engine, a folded EB
engine and most rounders (a stall at the output freezes every register, so no skid buffer is
needed), and the FP and unfolded EB engines' and the SFU's rounder's pipelines, which never
stall (:class:`CreditedOutput`)."""

from amaranth.hdl import Assert, EnableInserter, Module, Mux, Signal
from amaranth.lib import memory

from mapping.memories import tree_levels

from ..base.counter import up_down
from ..base.ram import NO_RW_CHECK, ram_attrs


class Pipeline:
    """Registers that all advance together: :meth:`attach` puts them under one enable (a
    stalling pipeline) or none (a pipeline with a :class:`CreditedOutput`)."""

    def __init__(self):
        self.module = Module()

    def stage(self, value, shape=None, *, reset=False):
        """A register of ``value``. Only ``reset`` ones (a valid flag) are on the reset net:
        data is ignored until its valid flag rises, and a reset reaching every data flip-flop
        was a one-board chain's worst path on ECP5 (15.5 ns of routing to the LSR inputs)."""
        reg = Signal(shape if shape is not None else value.shape(), reset_less=not reset)
        self.module.d.sync += reg.eq(value)
        return reg

    def delay(self, value, cycles, *, reset=False):
        for _ in range(cycles):
            value = self.stage(value, reset=reset)
        return value

    def adder_tree(self, values, shape=None, final=None):
        """Sum of ``values`` after :func:`tree_levels` register levels, growing one bit per level.

        The last level's register has ``shape`` (when given) and holds ``final(sum)`` (when
        given), so a lane can be zeroed or widened without an extra cycle.
        """
        levels = tree_levels(len(values))
        for level in range(levels):
            pairs = [values[i] + values[i + 1] if i + 1 < len(values) else values[i]
                     for i in range(0, len(values), 2)]
            if level == levels - 1:
                total = final(pairs[0]) if final is not None else pairs[0]
                return self.stage(total, shape)
            values = [self.stage(pair) for pair in pairs]

    def accumulate(self, values, first, enable, shape):
        """Registers of ``shape`` summing ``values`` over the cycles ``enable`` is high.

        ``first`` loads instead of adding; between enabled cycles they hold, so a bubble
        in the pipeline adds nothing.
        """
        accs = [Signal(shape, name=f"acc_{n}", reset_less=True) for n in range(len(values))]
        with self.module.If(enable):
            self.module.d.sync += [acc.eq(Mux(first, 0, acc) + value) for acc, value in zip(accs, values)]
        return accs

    def attach(self, m, advance=None):
        """The registers as a submodule of ``m``, under ``advance`` (None: they load every cycle)."""
        m.submodules.pipe = self.module if advance is None else EnableInserter(advance)(self.module)


class CreditedOutput:
    """The output of an engine pipeline that never stalls: registers and multipliers load every
    cycle (no clock enable), and an output the consumer does not take waits in a buffer.

    ``room`` (a register) is high while fewer than ``capacity`` outputs are outstanding (issued
    into the pipeline, not yet taken); the engine issues a step that will produce an output only
    then, so even a consumer that stops for good leaves every outstanding output a place in the
    buffer. With ``capacity`` = the pipeline's latency + 1 a consumer that is always ready sees
    one output per cycle, in the cycle a stalling pipeline would give it (the buffer is passed by
    while empty). Why: a stall that holds the whole pipeline is one enable from the consumer's
    handshake to every register and multiplier of the engine, and on a full ECP5 that net's
    routing, after the FIFO levels and handshakes in front of it, was the node's worst path.

    The buffer: ``capacity`` x (width of the payload) of distributed RAM (read asynchronously,
    so its head is on the output the cycle it is written; ``family``: ``ram_style`` as for
    every memory of the generator, None in simulation).

    ``stall=True`` builds the plain stalling output instead, for an engine whose result is
    wide and rare (a folded EB: all S channels once per G*v steps), where a buffer would cost
    more than the enable it removes: ``room`` is then the consumer's handshake and ``enable``
    holds the pipeline (the registers under ``Pipeline.attach(m, enable)``, the multipliers'
    enables); with credits ``enable`` is None (no enable).
    """

    def __init__(self, capacity, family=None, *, stall=False):
        self.capacity, self.family, self.stall = capacity, family, stall
        self.room = Signal(init=1)
        self.enable = self.room if stall else None

    def attach(self, m, *, produced, valid, payload, out):
        """Count ``produced`` (an issued step that will produce an output) against ``capacity``;
        the pipeline's ``valid`` and ``payload`` reach the stream ``out`` directly or through
        the buffer."""
        if self.stall:
            m.d.comb += [out.valid.eq(valid), out.payload.eq(payload), self.room.eq(~out.valid | out.ready)]
            return
        depth = self.capacity
        buffer = m.submodules.output_buffer = memory.Memory(
            shape=len(payload), depth=depth, init=[], attrs=NO_RW_CHECK | ram_attrs(depth, self.family))
        write, head_word = buffer.write_port(), buffer.read_port(domain="comb")
        head, tail, stored = Signal(range(depth)), Signal(range(depth)), Signal(range(depth + 1))
        waiting = stored != 0
        push = valid & (waiting | ~out.ready)
        pop = waiting & out.ready
        m.d.comb += [out.valid.eq(waiting | valid), out.payload.eq(Mux(waiting, head_word.data, payload)),
                     head_word.addr.eq(head), write.addr.eq(tail), write.data.eq(payload), write.en.eq(push)]
        with m.If(push):
            m.d.sync += tail.eq(Mux(tail == depth - 1, 0, tail + 1))
        with m.If(pop):
            m.d.sync += head.eq(Mux(head == depth - 1, 0, head + 1))
        up_down(m, stored, push, pop)
        m.d.sync += Assert(~(push & (stored == depth)), "credited output: an output beyond the credits")
        outstanding = Signal(range(depth + 1))
        following = up_down(m, outstanding, produced, out.valid & out.ready)
        m.d.sync += self.room.eq(following(lambda value: value < depth))
