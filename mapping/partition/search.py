"""Period search: the shortest pipeline period at which the chain holds the network.

Feasibility is not monotone in the period (:meth:`PeriodSearch.min_period` says why),
so the shortest feasible period is searched on a geometric grid from a lower bound,
then by bisection on integers."""

import math

from .cost import FC_SPEEDUP, Shape, dram_bytes, slice_dram_bytes
from .refusals import Refusals


class PeriodSearch(Refusals):
    """Bounds on the period and the search between them."""

    def lower_bound(self):
        """A period (cycles) no partition beats: all multipliers busy, one sample through
        the largest raster and, where every node has DRAM, every FC weight through it."""
        work = sum(p.macs for p in self.plans)
        seconds = work / sum(b.capacity for b in self.nodes)
        dram = sum(b.dram_bytes_per_s for b in self.nodes)
        if all(b.dram_bytes_per_s for b in self.nodes):  # then every FC weight is off chip
            seconds = max(seconds, sum(dram_bytes(p, p.units, self.batch) for p in self.plans
                                       if p.kind == "fc") / dram)
        raster = max(p.raster for p in self.plans) * self.ref_clock // max(self.clocks)
        return max(math.ceil(seconds * self.ref_clock), raster, 1)

    def saturation(self):
        """A period (cycles) beyond which nothing gets easier: every engine is down to one
        tile per node and every FC slice has DRAM time for all its units, and every slice
        with its activations in DRAM for a whole layer's (more than any one node's share)."""
        cycles = max(p.pass_pixels * p.group_full * p.units * p.unit_inputs * (FC_SPEEDUP if p.kind == "fc" else 1)
                     for p in self.plans)
        dram = [b.dram_bytes_per_s for b in self.nodes if b.dram_bytes_per_s]
        traffic = [dram_bytes(p, p.units, self.batch) for p in self.plans if p.kind == "fc"]
        if any(self.act_dram):
            node = self.act_dram.index(True)
            whole = (self.slice(p, node, 0, p.units, Shape(1, 1, 1, 1), True, True) for p in self.plans)
            traffic += [slice_dram_bytes(sl, self.batch) for sl in whole]
        if dram and traffic:
            cycles = max(cycles, math.ceil(max(traffic) / min(dram) * self.ref_clock))
        return cycles

    def min_period(self, at_least=0):
        """The shortest feasible period (cycles); ``at_least`` is a known lower bound.

        Feasibility is not monotone in the period: a longer period deepens memories
        (past distributed RAM into block RAM, onto other block shapes) and changes the
        engine choices. So the search walks up from the lower bound on a geometric grid,
        dense near the bound (steps of 1/16 octave, twice as long every 8 probes), and
        bisects on integers between the last infeasible probe and the first feasible one."""
        lo = max(self.lower_bound(), at_least)
        if self.feasible(lo):
            return lo
        octave_steps, probes = 16, 0
        while True:
            hi = max(lo + 1, math.floor(lo * 2 ** (1 / octave_steps)))
            if self.feasible(hi):
                break
            if hi > self.saturation():
                self._explain_infeasible(hi)
            lo, probes = hi, probes + 1
            if probes % 8 == 0 and octave_steps > 1:
                octave_steps //= 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.feasible(mid) else (mid, hi)
        return hi
