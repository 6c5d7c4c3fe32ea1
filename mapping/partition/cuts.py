"""Cut placement: where the node boundaries go at the period found.

Among the partitions that reach it, the node boundaries are the coarse phase's
boundaries rounded to whole channels and moved only as far as feasibility requires,
so work spreads over every node in proportion to its capacity; every node gets at
least one unit (a chain with more nodes than the network has units is refused: the
generator builds no pass-through node). Slice costs are not monotone in the units,
so every node's slices are checked against its budget and a boundary that would
overfill a node gives way to the next nearest (:meth:`CutPlacement.cuts`)."""

from .coarse import proportional_cuts
from .search import PeriodSearch

# Node ends the search for cuts near the proportional targets tries before it takes the
# greedy cuts (Partitioner._cuts_near_targets): it mostly tries one per node, a few
# hundred where it backtracks on a small chain; this bounds it to some 30 ms.
SEARCH_ENDS = 2048


class CutPlacement(PeriodSearch):
    """Node boundaries and the slices they give. ``search_ends`` bounds the search for
    cuts near the proportional targets (:data:`SEARCH_ENDS`)."""

    search_ends = SEARCH_ENDS

    def cuts(self, period, choices):
        """Node boundaries at ``period``: coarse proportional cuts, moved only as far
        as feasibility requires. Returns n+1 unit positions.

        Slice costs are not monotone in the units (a shorter slice can have another
        engine shape, a memory past distributed RAM, the partial-sum input a layer's
        first slice does without), so a boundary between the bounds the greedy fills
        give can still overfill its node or strand the nodes after it. Each node's
        slices are therefore checked against its budget, and a boundary that fails
        gives way to the next nearest one (:meth:`_cuts_near_targets`); where none
        holds the network, the cuts are the greedy fill's, which :meth:`feasible`
        found to hold it."""
        self._check_enough_units()
        cuts = self._cuts_near_targets(period, choices) or self._greedy_cuts(period, choices)
        self._check_no_empty_node(cuts)
        self._check_holds(period, choices, cuts)
        return cuts

    def _cuts_near_targets(self, period, choices):
        """Cuts with every node's slices within its budget, each as near its proportional
        target as the cuts before it allow, or None.

        A depth-first search along the chain: node d tries the ends of its units from
        the one nearest its target outwards, between the smallest start from which the
        greedy backward fill holds the rest on nodes d+1.. and what the forward fill
        reaches from its start; where no end lets the later nodes hold the rest, node
        d-1 tries its next end. Starts found to strand the rest are not tried twice,
        and the search gives up after ``search_ends`` ends."""
        n, target = len(self.nodes), proportional_cuts(self.plans, self.nodes)
        earliest = [0] * (n + 1)
        earliest[n] = self.total
        for node in range(n - 1, -1, -1):
            earliest[node] = self.fill_back(choices, node, earliest[node + 1], period)
        budget = self.search_ends

        def ends(node, start):
            """The ends of node's units from ``start`` that fit it, nearest the target first."""
            nonlocal budget
            if node == n - 1:
                tried = [self.total]
            else:
                # Every node gets at least one unit and leaves one to each later node: an
                # empty node would only pass the streams through.
                room = self.total - (n - 1 - node)
                lower = max(earliest[node + 1], start + 1)
                upper = min(max(self.fill(choices, node, start, period), lower), room)
                tried = _nearest_first(target[node + 1], lower, upper)
            for end in tried:
                budget -= 1
                if budget < 0:
                    return
                if self._fits(choices, node, start, end, period):
                    yield end

        # A loop, not recursion: chains may be longer than Python's recursion limit.
        # cuts[d] is node d's start, untried[d] the ends of its units left to try.
        cuts, untried, stranded = [0], [ends(0, 0)], set()
        while untried:
            node = len(untried) - 1
            end = next(untried[-1], None)
            if end is None:  # every end tried strands a later node
                stranded.add((node, cuts.pop()))
                untried.pop()
            elif node == n - 1:
                return cuts + [end]
            elif (node + 1, end) not in stranded:
                cuts.append(end)
                untried.append(ends(node + 1, end))
        return None

    def _greedy_cuts(self, period, choices):
        """The greedy fill's cuts, each node taking all it holds (some may be empty)."""
        cuts = [0]
        for node in range(len(self.nodes)):
            cuts.append(self.fill(choices, node, cuts[-1], period))
        return cuts

    def _fits(self, choices, node, lo, hi, period):
        """Whether units [lo, hi) fit on ``node`` at ``period``, each slice first or last
        of its layer where it reaches that end, as :meth:`slices` marks them."""
        used, g = (0, 0, 0), lo
        while g < hi:
            l = self._layer_at(g)
            end = min(hi, self.starts[l + 1])
            cost = self._cost(self.plans[l], choices[l], g - self.starts[l], end - g, node, period,
                              g == self.starts[l], end == self.starts[l + 1])
            if cost is None:
                return False
            used, g = tuple(u + c for u, c in zip(used, cost)), end
        return all(u <= limit for u, limit in zip(used, self.limits(node, period)))

    def _check_holds(self, period, choices, cuts):
        """Never hand on a partition that overfills a node or leaves units out."""
        over = [node for node in range(len(self.nodes))
                if not self._fits(choices, node, cuts[node], cuts[node + 1], period)]
        if over or cuts[-1] != self.total:
            raise RuntimeError(f"{self.describe()}: cuts {cuts} at period {period} overfill nodes "
                               f"{over} or miss units")  # feasible() guarantees the greedy cuts

    def slices(self, period, choices, cuts):
        """The slices of the partition given by ``cuts``, each sized for ``period``."""
        result = []
        for node in range(len(self.nodes)):
            g, end = cuts[node], cuts[node + 1]
            while g < end:
                l = self._layer_at(g)
                hi = min(end, self.starts[l + 1])
                plan = self.plans[l]
                for lo_unit, hi_unit in plan.group_parts(g - self.starts[l], hi - self.starts[l]):
                    shape = self.shape(plan, choices[l], hi_unit - lo_unit, node, period)
                    result.append(self.slice(plan, node, lo_unit, hi_unit - lo_unit, shape))
                g = hi
        by_layer = {}
        for s in result:
            by_layer.setdefault(s.plan.index, []).append(s)
        for group in by_layer.values():
            group[0].first = True
            group[-1].last = True
        return result



def _nearest_first(target, lower, upper):
    """lower..upper by distance from ``target``, the lower of two equally near first."""
    if lower > upper:
        return
    below = min(max(target, lower), upper)
    above = below + 1
    while below >= lower or above <= upper:
        if above > upper or (below >= lower and target - below <= above - target):
            yield below
            below -= 1
        else:
            yield above
            above += 1
