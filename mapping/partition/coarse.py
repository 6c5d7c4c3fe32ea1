"""The coarse phase: the layer sequence laid along the chain in proportion to each
device's compute capacity (usable multipliers x clock), giving contiguous groups of
near-equal FP+EB+PG work; the fine phase starts its node boundaries from it."""

import numpy as np


def coarse(plans, node_budgets):
    """Coarse phase: per node, the (layer, start fraction, end fraction) pieces it gets
    when the work is laid along the chain in proportion to node capacity."""
    total = sum(p.macs for p in plans)
    caps = [b.capacity for b in node_budgets]
    bounds = np.concatenate([[0.0], np.cumsum(caps) / sum(caps) * total])
    starts = np.concatenate([[0], np.cumsum([p.macs for p in plans])])
    groups = []
    for d in range(len(node_budgets)):
        lo, hi = bounds[d], bounds[d + 1]
        pieces = []
        for p, a, b in zip(plans, starts[:-1], starts[1:]):
            x, y = max(lo, a), min(hi, b)
            if y > x:
                pieces.append((p.name, float((x - a) / p.macs), float((y - a) / p.macs)))
        groups.append(tuple(pieces))
    return tuple(groups)



def proportional_cuts(plans, node_budgets):
    """The coarse phase's node boundaries rounded to whole units: n+1 unit positions
    along the chain (layer l's units follow those of the layers before it)."""
    starts_units = np.concatenate([[0], np.cumsum([p.units for p in plans])])
    caps = np.array([b.capacity for b in node_budgets], dtype=float)
    work = np.array([p.macs for p in plans], dtype=float)
    bounds = np.cumsum(caps)[:-1] / caps.sum() * work.sum()
    starts = np.concatenate([[0.0], np.cumsum(work)])
    cuts = [0]
    for x in bounds:
        l = min(int(np.searchsorted(starts, x, side="right")) - 1, len(plans) - 1)
        frac = (x - starts[l]) / work[l]
        cuts.append(int(starts_units[l]) + int(round(frac * plans[l].units)))
    cuts.append(int(starts_units[-1]))
    return cuts
