"""Registers that all advance on one enable: the stalling pipelines of the engines and
the rounders (a stall at the output freezes every register, so no skid buffer is needed)."""

from amaranth.hdl import EnableInserter, Module, Mux, Signal


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

    def accumulate(self, values, first, enable, shape):
        """Registers of ``shape`` summing ``values`` over the cycles ``enable`` is high.

        ``first`` loads instead of adding; between enabled cycles they hold, so a bubble
        in the pipeline adds nothing.
        """
        accs = [Signal(shape, name=f"acc_{n}") for n in range(len(values))]
        with self.module.If(enable):
            self.module.d.sync += [acc.eq(Mux(first, 0, acc) + value) for acc, value in zip(accs, values)]
        return accs

    def attach(self, m, advance):
        m.submodules.pipe = EnableInserter(advance)(self.module)

