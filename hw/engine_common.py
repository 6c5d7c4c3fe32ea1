"""Pieces shared by the FP, EB and PG engines: the stalling pipeline, the adder tree,
the group issue counter and the operand selection of a channel group.

All three engines walk the output channels in ``G = ceil(O / P)`` groups of P (one per
cycle, weight row ``g`` of the LPRAM in cycle ``g``) and hold their whole datapath
on one enable, ``advance``, so a stall at the output freezes every register and no
skid buffer is needed.
"""

from amaranth.hdl import Cat, Const, EnableInserter, Module, Mux, Signal

from hw.mult import Multiplier
from mapping.numerics import WORD_BITS


def tree_levels(terms):
    """Register levels of :meth:`Pipeline.adder_tree` over ``terms`` values (at least one)."""
    return max(1, (terms - 1).bit_length())


class Pipeline:
    """Registers that all advance together; :meth:`attach` puts them under ``advance``."""

    def __init__(self):
        self.module = Module()

    def stage(self, value, shape=None):
        reg = Signal(shape if shape is not None else value.shape())
        self.module.d.sync += reg.eq(value)
        return reg

    def delay(self, value, cycles):
        for _ in range(cycles):
            value = self.stage(value)
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

    def attach(self, m, advance):
        m.submodules.pipe = EnableInserter(advance)(self.module)


def multiply(m, name, a, b, advance, family):
    """A ``hw.mult.Multiplier`` of two words on the pipeline's enable; its registered product."""
    mult = m.submodules[name] = Multiplier(WORD_BITS, WORD_BITS, family)
    m.d.comb += [mult.a.eq(a), mult.b.eq(b), mult.en.eq(advance)]
    return mult.p


class GroupIssue:
    """The group counter: issues groups 0 .. G-1 of the input beat held valid, one per cycle.

    ``issue`` is high in each cycle a group enters the pipeline (input valid and the
    pipeline advancing); ``accept`` (= input ready) in the cycle the last group does, so
    the input beat is taken once its G groups are issued and the next beat's group 0
    can follow in the next cycle.
    """

    def __init__(self, m, groups, valid, advance):
        self.group = Signal(range(groups))
        self.first, self.last = Signal(), Signal()
        self.issue, self.accept = Signal(), Signal()
        m.d.comb += [
            self.first.eq(self.group == 0),
            self.last.eq(self.group == groups - 1),
            self.issue.eq(valid & advance),
            self.accept.eq(advance & self.last),
        ]
        with m.If(self.issue):
            m.d.sync += self.group.eq(Mux(self.last, 0, self.group + 1))


def group_words(payload, group, groups, words):
    """Words ``group*words .. group*words+words-1`` of an array payload, zero past its end.

    The EB and PG engines take the P output channels of a group from a beat holding all
    O of them; channels past O in the last group read as zero, so every product with
    them is zero whatever the weight row's lanes past O hold.
    """
    value = payload.as_value()
    width = words * WORD_BITS
    padded = Cat(value, Const(0, groups * width - len(value)))
    return padded.word_select(group, width)
