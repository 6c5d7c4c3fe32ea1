"""Greedy fills: how many units a node holds from a given unit on, forwards or
backwards, at a pipeline period, and whether the chain holds the network at all.

A greedy fill decides whether a period is feasible; it is exact for a contiguous
partition with monotone costs."""

from ..balance import largest
from .cost import CHOICE_SLACK, SliceCosts


class GreedyFills(SliceCosts):
    """The greedy fills over :class:`SliceCosts`."""

    # the most units a slice that stops short of its layer's end holds, for one period
    _memo_period = None

    def _take(self, choices, node, period, l, fixed, rem, used, forward):
        """Most units (<= rem) of layer l the node can add to ``used`` (a :meth:`_cost` sum).

        The slice grows away from unit ``fixed`` (its lower end when ``forward``, else
        its upper end); it is the layer's first/last slice when it reaches that end of
        the layer. Returns (units, cost) or (0, None).

        A slice that stops short of the layer's far end costs the same wherever it
        starts (but for :meth:`_start_key`), so the most units such a slice holds are
        remembered per period and reused by every node in the same situation (most of a
        long chain)."""
        plan, choice, limits = self.plans[l], choices[l], self.limits(node, period)
        edge = fixed == (self.starts[l] if forward else self.starts[l + 1])

        def cost(n, reach):
            first, last = (edge, reach) if forward else (reach, edge)
            lo = fixed - self.starts[l] if forward else fixed - self.starts[l] - n
            return self._cost(plan, choice, lo, n, node, period, first, last)

        (mult, blocks, dram), (used_mult, used_blocks, used_dram) = limits, used

        def fits(c):
            return c is not None and used_mult + c[0] <= mult and used_blocks + c[1] <= blocks and \
                used_dram + c[2] <= dram

        whole = cost(rem, True)
        if fits(whole):
            return rem, whole
        if period != self._memo_period:
            self._memo, self._memo_period = {}, period
        key = (l, choice, self.nodes[node], used, forward, edge, self._start_key(plan, fixed - self.starts[l]))
        if key not in self._memo:
            self._memo[key] = largest(lambda n: fits(cost(n, False)), plan.units - 1)
        n = min(self._memo[key], rem - 1)
        c = cost(n, False) if n else None
        if n and not fits(c):  # costs not monotone in the units: search below n
            n = largest(lambda k: fits(cost(k, False)), n - 1)
            c = cost(n, False) if n else None
        return (n, c) if n else (0, None)

    def fill(self, choices, node, g, period):
        """Largest g' such that units [g, g') fit on ``node`` at ``period``."""
        used = (0, 0, 0)
        while g < self.total:
            l = self._layer_at(g)
            rem = self.starts[l + 1] - g
            n, c = self._take(choices, node, period, l, g, rem, used, True)
            if n == 0:
                break
            used = tuple(u + x for u, x in zip(used, c))
            g += n
            if n < rem:
                break
        return g

    def fill_back(self, choices, node, g, period):
        """Smallest g' such that units [g', g) fit on ``node`` at ``period``."""
        used = (0, 0, 0)
        while g > 0:
            l = self._layer_at(g - 1)
            rem = g - self.starts[l]
            n, c = self._take(choices, node, period, l, g, rem, used, False)
            if n == 0:
                break
            used = tuple(u + x for u, x in zip(used, c))
            g -= n
            if n < rem:
                break
        return g

    def feasible(self, period):
        """The engine choices with which the chain holds the network at ``period``, or None."""
        for slack in (0.0, CHOICE_SLACK):
            choices = self.choose(period, slack)
            if choices is None:
                return None
            g = 0
            for node in range(len(self.nodes)):
                g = self.fill(choices, node, g, period)
                if g == self.total:
                    return choices
        return None
