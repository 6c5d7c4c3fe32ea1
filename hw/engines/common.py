"""Pieces shared by the FP, EB and PG engines: the multipliers, the step counter and the
operand selection of a channel group or pass.

All three engines walk the output channels in ``G = ceil(O / P)`` groups of P and the
S input channels in ``v = ceil(S / b)`` passes of b (b tiles per CE; b = S, one pass,
unless the mapping folds), one step (group, pass) per cycle reading LPRAM address
``g*v + i``, through a pipeline of ``hw.arith.pipeline`` (registers, adder tree,
accumulators). FP and EB never stall (their credited output buffers what the consumer
does not take); PG, whose beats are every product of the engine (a buffer of them would
cost more LUT RAM than the engine has logic), holds every register on one enable.
"""

from amaranth.hdl import Array, Cat, Const, Mux, Signal

from mapping.numerics import WORD_BITS

from ..arith.mult import Multiplier
from ..base.counter import ModuloCounter


def multiply(m, name, a, b, family, enable=None):
    """A ``hw.arith.mult.Multiplier`` of two words under ``enable`` (a stalling pipeline's; None:
    every cycle, as ``CreditedOutput.enable`` of a pipeline that never stalls); its registered
    product."""
    mult = m.submodules[name] = Multiplier(WORD_BITS, WORD_BITS, family)
    m.d.comb += [mult.a.eq(a), mult.b.eq(b), mult.en.eq(1 if enable is None else enable)]
    return mult.p


class Issue:
    """The step counter: walks the ``G*v`` steps (group g, pass i) of the input beat held valid.

    One step per cycle; step (g, i) reads weight address ``addr = g*v + i`` (group-major,
    pass-minor LPRAM layout). ``group_major`` walks the v passes of a group consecutively
    (FP, PG: a CE's accumulator sums consecutive passes), otherwise the G groups of a pass
    (EB: its accumulator sums consecutive groups). ``issue`` is high in each cycle a step
    enters the pipeline (input valid and ``advance``: the pipeline's output has room);
    ``accept`` (= input ready) in the cycle the last step does, so the input beat is taken
    once its G*v steps are issued and the next beat's first step can follow in the next cycle.
    """

    def __init__(self, m, groups, passes, valid, advance, *, group_major):
        self.issue, self.accept = Signal(), Signal()
        inner_count, outer_count = (passes, groups) if group_major else (groups, passes)
        inner = ModuloCounter(m, inner_count, self.issue)
        outer = ModuloCounter(m, outer_count, self.issue & inner.last)
        by_pass, by_group = (inner, outer) if group_major else (outer, inner)
        self.pass_, self.first_pass, self.last_pass = by_pass.value, by_pass.first, by_pass.last
        self.group, self.first_group, self.last_group = by_group.value, by_group.first, by_group.last
        last = self.last_group & self.last_pass
        m.d.comb += [self.issue.eq(valid & advance), self.accept.eq(advance & last)]
        if passes == 1:
            self.addr = self.group  # one pass: the address is the group
            return
        # A register rather than g*v + i: no multiplier for Yosys to map to a DSP.
        self.addr = Signal(range(groups * passes))
        step = self.addr + 1 if group_major else Mux(self.last_group, self.pass_ + 1, self.addr + passes)
        with m.If(self.issue):
            m.d.sync += self.addr.eq(Mux(last, 0, step))


def select_words(payload, index, count, words):
    """Words ``index*words .. index*words+words-1`` of an array payload, zero past its end.

    The engines take the P output channels of a group from a beat holding all O of them
    (EB, PG errors) and the b input channels of a pass from a window of all S (FP, PG);
    channels past O in the last group and past S in the last pass read as zero, so every
    product with them is zero whatever the weight row holds there.
    """
    value = payload.as_value()
    width = words * WORD_BITS
    padded = Cat(value, Const(0, count * width - len(value)))
    if count == 1:
        return padded
    # A mux of the ``count`` chunks, not ``padded.word_select(index, width)``: a part select at a
    # variable offset makes each output bit depend on every input bit, which Amaranth's netlist
    # check walks edge by edge (a VGG-16 conv3_2 node: 432 words of 3 passes, 32 s to convert
    # one select, 0.7 s as a mux) and Yosys builds as a shifter over the whole window.
    return Array(padded[k * width:(k + 1) * width] for k in range(count))[index]


