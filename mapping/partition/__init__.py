"""FPDeep partitioner: coarse layer groups, then channel-granularity slices with engines
(paper sections 3.2, 3.4, 4.1, 5.3-5.5).

The package, in the order a partition is made:

- :mod:`.plan`: the weighted layers with their SFU and ICP/OCP choice (``plan_layers``);
- :mod:`.cost`: node budgets, engine shapes, what a candidate slice costs at a period;
- :mod:`.coarse`: the coarse phase and its proportional node boundaries;
- :mod:`.fill`: greedy fills, the feasibility test of a period;
- :mod:`.refusals`: the SpecErrors that name what blocks a network;
- :mod:`.search`: the shortest feasible period;
- :mod:`.cuts`: node boundaries at that period and the slices they give.

Each fine-phase module adds one layer to the :class:`Partitioner` (cost, fill,
refusals, search, cuts, each class built on the one before).

Phases
------
1. Coarse (:func:`coarse`): the layer sequence is laid along the chain in
   proportion to each device's compute capacity (usable multipliers x clock),
   giving contiguous groups of near-equal FP+EB+PG work.
2. Fine (:class:`Partitioner`): at channel granularity. For a pipeline period
   (whole cycles of the slowest clock), each node holds a contiguous run of
   units whose engines (whole K x K tiles, sized for the period) fit its
   multipliers, its DRAM bandwidth and its non-movable on-chip memory: buffers,
   and the width of its weight memories, which every cycle's reads need (their
   depth, the weights themselves, can move to other nodes later,
   :mod:`mapping.balance`). With ``buildable_balance``, the generator's mappings,
   memory is priced as hw/ builds it, memory by memory (mapping/memories.py), and
   only fully connected rows can move (the generator's form of balancing): conv
   weights count in full, a fully connected slice one engine group of rows.
   Where balancing cannot place the weights (rows whose weight-stationary partial
   sums cost more than the rows free, or none the generator can move), the mapper
   tries longer periods, then partitions again with every weight counted locally.
   A greedy fill decides whether a period is feasible; it is exact for a
   contiguous partition with monotone costs. Feasibility is not monotone in the
   period (:meth:`Partitioner.min_period` says why), so the shortest feasible
   period is searched on a geometric grid from a lower bound, then by bisection
   on integers. Among the partitions that reach it, the node boundaries are the
   coarse phase's boundaries rounded to whole channels and moved only as far as
   feasibility requires, so work spreads over every node in proportion to its
   capacity; every node gets at least one unit (a chain with more nodes than the
   network has units is refused: the generator builds no pass-through node). Slice
   costs are not monotone in the units, so every node's slices are checked against
   its budget and a boundary that would overfill a node gives way to the next
   nearest (:meth:`Partitioner.cuts`).
"""

from dataclasses import dataclass, field

from .coarse import coarse
from ..numerics import ACC_BITS
from .cost import (CHOICE_SLACK, FC_READ_BYTES, FC_SPEEDUP, FC_UPDATE_BYTES, NodeBudget, Shape, Slice,
                   budgets, dram_bytes, slice_cycles, slice_dram_bytes, slice_multipliers)
from .cuts import SEARCH_ENDS, CutPlacement, _nearest_first
from .plan import OCP_BELOW_IN_CHANNELS, LayerPlan, plan_layers

__all__ = ["CHOICE_SLACK", "FC_READ_BYTES", "FC_SPEEDUP", "FC_UPDATE_BYTES", "OCP_BELOW_IN_CHANNELS",
           "SEARCH_ENDS", "LayerPlan", "NodeBudget", "Partition", "Partitioner", "Shape", "Slice",
           "budgets", "coarse", "dram_bytes", "partition", "plan_layers", "slice_cycles", "slice_dram_bytes",
           "slice_multipliers", "_nearest_first"]


class Partitioner(CutPlacement):
    """The fine phase for one network on one chain (see the package docstring); refuses
    up front a layer no node can hold a tile or a channel of."""

    def __init__(self, plans, node_budgets, *, search_ends=SEARCH_ENDS, **options):
        super().__init__(plans, node_budgets, **options)
        self.search_ends = search_ends
        self._check_tiles()
        self._check_units()


@dataclass
class Partition:
    tau: float                     # the period the engines were sized for (s)
    period: int                    # the same in cycles of the slowest clock
    slices: list                   # Slice objects in chain order
    coarse: tuple
    choices: list = field(default_factory=list)



def partition(plans, node_budgets, *, samples_held, link_latency_cycles, describe, batch=1,
              local_weights=False, buildable_balance=False, at_least=0, fold_inputs=True,
              offchip_fc=True, overlapped_update=False, grad_bits=ACC_BITS, act_dram=False):
    """The fine phase; ``local_weights`` makes every node hold all its weights itself
    (no balancing), ``buildable_balance`` all its conv weights (the generator balances
    only fully connected rows), otherwise only their width is reserved (see the package docstring).
    ``at_least``: a period (cycles) known to be infeasible below, from an earlier
    partition with smaller buffers; ``describe()`` names the network and cluster in
    refusals; ``batch`` the mini-batch (FC weights in DRAM); ``fold_inputs=False`` gives
    every input channel of a slice its own tile and ``offchip_fc=False`` keeps fully
    connected weights on chip (both as hw/ generates); ``overlapped_update`` plans the weight
    copies of the update that does not stop the engines (with ``buildable_balance``);
    ``grad_bits`` the width of the gradient sums (numerics.Formats); ``act_dram`` keeps the
    Act-RAM and SFU masks of every slice on a device with DRAM in that DRAM."""
    part = Partitioner(plans, node_budgets, samples_held=samples_held, link_latency_cycles=link_latency_cycles,
                       describe=describe, batch=batch, local_weights=local_weights,
                       buildable_balance=buildable_balance, fold_inputs=fold_inputs,
                       offchip_fc=offchip_fc, overlapped_update=overlapped_update, grad_bits=grad_bits,
                       act_dram=act_dram, search_ends=SEARCH_ENDS)  # read when called: one setting
    period = part.min_period(at_least)
    choices = part.feasible(period)
    cuts = part.cuts(period, choices)
    return Partition(part.seconds(period), period, part.slices(period, choices, cuts),
                     coarse(plans, node_budgets), choices)
