"""What a slice costs: node budgets, engine shapes and the per-slice multipliers, memory
blocks and DRAM traffic at a pipeline period (paper sections 4.1, 5.3-5.5, 6.3.1).

Engines. A slice owns ``S`` input and ``O`` output channels (ICP: S = its units,
O = all; OCP: S = all, O = its units). Its FP, EB and PG engines have the same
shape, ``P x b`` tiles of K x K multipliers (P along output, b along input
channels) reading one LPRAM row per cycle (docs/node_dataflow.md); an engine
walks ``u = ceil(O / P)`` output-channel groups times ``v = ceil(S / b)``
input-channel groups per pixel, so per sample

    FP = max(OH*OW*u*v, R)    PG = max(OH*OW*u*v, R)    EB = max(H*W*u*v, R)

(the line buffer takes one input pixel per cycle, so a strided layer pays its
input raster; EB walks the zero-dilated error map, i.e. the input raster); the
raster counts the padding columns and rows the line buffers walk over too
(``LayerPlan.raster``, :mod:`mapping.line_walk`). The
engine arrays are ``fp = Engine(P, b)``, ``eb = Engine(b, P)`` (S CEs of P tiles in
the paper's words), ``pg = Engine(P, b)``; the first weighted layer has no EB.
``v > 1`` (fewer tiles than input channels) folds the input channels over
several cycles; the mapping folds only where it saves multipliers.

P is the same on every ICP slice of a layer (all of them stream the same pixels
and partial sums at the same rate); b is the same on every OCP slice.

A grouped layer (``groups`` G, mapping/partition/plan.py) has the same engines with the
full dimension one group's channels (``LayerPlan.group_full``: OC / G under ICP): every
slice lies inside one group, and a run of units a node takes across a group boundary is
priced, and built, as one slice per group (:meth:`SliceCosts._cost`, ``cuts.slices``).

Fully connected layers are 1x1 convolutions on a 1x1 map. On a device with DRAM
their weights and 48-bit gradient accumulators stay off chip (paper 6.3.1) and
flow as in :func:`dram_bytes` (the FC dataflow, documented in mapping/perf.py);
that transfer time is part of the slice's cycles, so the partitioner gives FC
layers as many DRAM devices as their traffic needs. Without DRAM they are kept on
chip like convolution weights (the simulated hardware's small FC layers).
"""

from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from .. import balance
from .. import resources
from ..numerics import ACC_BITS
from ..nodeconfig import ChannelRanges
from .plan import LayerPlan
from ..resources import onchip_blocks, tile_multipliers

# A layer's engine parameter is the one with the fewest multipliers (then the
# narrowest engine). Where the chain cannot hold the network that way, the
# partitioner tries the narrowest engine (fewest tiles along the full dimension)
# within CHOICE_SLACK of the fewest multipliers: narrow engines have narrow weight
# memories and partial-sum buffers, and memory is what fills most nodes of a
# paper-scale chain.
CHOICE_SLACK = 0.1
# A fully connected stage needs its whole input vector before it can finish, so its
# time is pipeline latency for every layer before it (their Act-RAMs hold those
# samples): the compute of FC layers with weights in DRAM (paper-scale classifiers,
# six such stages between the last conv layer's FP and its PG) is sized for
# 1/FC_SPEEDUP of the period; their work is small. On-chip FC layers (small nets)
# are sized for the full period like convolutions.
FC_SPEEDUP = 8
# DRAM bytes per fully connected weight held off chip (mapping/perf.py, "FC dataflow"):
# one 16-bit read per sample period serves FP of sample s and EB of sample s - d;
# once per mini-batch the updated 16-bit weight is written back (its gradient is
# formed in PG's 48-bit accumulators from the mini-batch's stored vectors, so no
# gradient travels to DRAM).
FC_READ_BYTES = 2
FC_UPDATE_BYTES = 2


@dataclass(frozen=True)
class NodeBudget:
    """What the partitioner may use on one node."""

    device: object
    multipliers: int
    blocks: int           # usable on-chip RAM, 18 Kb units
    clock_hz: float
    dram_bytes_per_s: float

    @property
    def capacity(self):
        """MACs per second with every usable multiplier busy."""
        return self.multipliers * self.clock_hz


def budgets(cluster, *, dsp_fraction, bram_fraction, max_multipliers=None):
    result = []
    for device in cluster:
        mult = int(device.dsp * dsp_fraction)
        if max_multipliers is not None:
            mult = min(mult, max_multipliers)
        result.append(NodeBudget(device, mult, int(onchip_blocks(device) * bram_fraction),
                                 device.clock_mhz * 1e6, device.dram_gbps * 1e9 / 8))
    return tuple(result)


@dataclass(frozen=True)
class Shape:
    """Engine shape of one slice: P x b tiles, u x v passes per pixel."""

    P: int
    b: int
    u: int
    v: int


@dataclass
class Slice(ChannelRanges):
    """One layer slice on one node, as the partitioner sizes it."""

    plan: LayerPlan
    node: int
    lo: int               # unit range [lo, hi)
    hi: int
    shape: Shape
    offchip: bool
    first: bool = False   # position among the nodes of its layer
    last: bool = False
    multipliers: int = 0
    remote_rows: int = 0  # output-channel rows kept on other nodes (balance)
    act_storage: str = "chip"  # where its Act-RAM and SFU masks live (LayerSlice.act_storage)

    @property
    def units(self):
        return self.hi - self.lo

    @property
    def in_range(self):
        return self.plan.input_range(self.lo, self.hi) if self.plan.mode == "icp" else self.plan.partner_range(self.lo)

    @property
    def out_range(self):
        return self.plan.partner_range(self.lo) if self.plan.mode == "icp" else (self.lo, self.hi)

    @property
    def kernel(self):
        return self.plan.kernel

    @property
    def row_words(self):
        return self.in_channels * self.plan.kernel ** 2

    @property
    def useful_macs(self):
        """FP + EB + PG multiply-accumulates of one sample on this slice."""
        return self.plan.engines * self.weight_words * self.plan.out_pixels

    def compute_cycles(self):
        return slice_cycles(self.plan, self.shape)


def engine_shape(plan, choice, units, vmax):
    """Engine shape of ``units`` units with at most ``vmax`` per tile (None if vmax < 1)."""
    if vmax < 1:
        return None
    units *= plan.unit_inputs  # a tile folds over inputs, whatever the cuts
    tiles = -(-units // min(units, vmax))
    per = -(-units // tiles)
    if plan.mode == "icp":
        P = choice.p_full
        return Shape(P=P, b=tiles, u=-(-plan.group_full // P), v=per)
    b = choice.p_full
    return Shape(P=tiles, b=b, u=per, v=-(-plan.group_full // b))


def slice_multipliers(plan, shape, family):
    """Multipliers of the slice's FP, EB and PG engines (the pipeline stages)."""
    return plan.engines * tile_multipliers(plan.kernel, family) * shape.P * shape.b


def slice_cycles(plan, shape):
    passes = shape.u * shape.v
    fp = max(plan.out_pixels * passes, plan.raster)
    eb = plan.in_pixels * passes if plan.needs_eb else 0
    return max(fp, eb)  # PG takes the same cycles as FP


def dram_bytes(plan, units, batch):
    """DRAM bytes per sample, on average over a mini-batch, of ``units`` units of an FC
    layer with weights off chip."""
    return units * plan.weights_per_unit * (FC_READ_BYTES + FC_UPDATE_BYTES / batch)


def slice_dram_bytes(sl, batch):
    """DRAM bytes per sample of slice ``sl``: its FC weights off chip (:func:`dram_bytes`) and
    its Act-RAM and SFU masks in DRAM, written once and read back once
    (:func:`mapping.balance.dram_bits_per_sample`)."""
    weights = dram_bytes(sl.plan, sl.units, batch) if sl.offchip else 0
    return weights + 2 * balance.dram_bits_per_sample(sl) / 8



class LayerChoice(NamedTuple):
    """Per-layer engine parameters shared by all its slices at one period."""

    p_full: int      # tiles along the full dimension (P for ICP, b for OCP)
    w_full: int      # passes along the full dimension



class SliceCosts:
    """Sizing of candidate slices for one network on one chain at a pipeline period.

    Periods are integers: cycles of the slowest node clock (``ref_clock``). Engines
    count whole cycles, so the shortest feasible period is a whole number of them
    and the bisection over integers is exact (on a chain with one clock; faster
    nodes get the whole cycles of theirs that fit). Units are numbered along the
    chain: layer l has units ``starts[l]`` to ``starts[l + 1]``."""

    def __init__(self, plans, node_budgets, *, samples_held, link_latency_cycles, describe, batch,
                 local_weights=False, buildable_balance=False, fold_inputs=True, offchip_fc=True,
                 overlapped_update=False, grad_bits=ACC_BITS, act_dram=False):
        self.describe = describe
        self.grad_bits = grad_bits
        self.overlapped_update = overlapped_update
        self.fold_inputs = fold_inputs
        self.batch = batch
        self.local_weights = local_weights
        self.buildable_balance = buildable_balance
        self.plans = plans
        self.nodes = node_budgets
        self.samples_held = samples_held
        self.latency = link_latency_cycles
        self.starts = [0]
        for p in plans:
            self.starts.append(self.starts[-1] + p.units)
        self.total = self.starts[-1]
        self.clocks = [round(b.clock_hz) for b in node_budgets]
        self.ref_clock = min(self.clocks)
        self.has_dram = [offchip_fc and b.device.dram_gb > 0 for b in node_budgets]
        self.dram = any(self.has_dram)
        self.act_dram = [act_dram and b.device.dram_gb > 0 for b in node_budgets]
        self.families = [b.device.family for b in node_budgets]
        self._costs = {}

    def seconds(self, period):
        return period / self.ref_clock

    def choose(self, period, slack=0.0):
        """Shared engine parameter of every layer at ``period`` (see CHOICE_SLACK), or None
        if the period is too short."""
        biggest = max(b.multipliers for b in self.nodes)
        choices = []
        for p in self.plans:
            cycles = period // (FC_SPEEDUP if p.kind == "fc" and self.dram else 1)
            inputs = p.units * p.unit_inputs
            q = min(cycles // p.pass_pixels, p.group_full * inputs)  # more passes than MACs are moot
            if cycles < p.raster or q < 1:
                return None
            w = np.arange(1, min(p.group_full, q) + 1)
            if not self.fold_inputs and p.mode == "ocp":
                w = w[:1]  # every input channel gets its own tile
            p_full = -(-p.group_full // w)
            vmax = np.minimum(q // w, inputs)
            if not self.fold_inputs and p.mode == "icp":
                vmax = np.minimum(vmax, 1)
            cost = p_full / vmax
            ok = p.engines * p.kernel ** 2 * p_full <= biggest
            if self.buildable_balance and p.groups > 1:
                ok &= p.group_full % p_full == 0  # the generator's partial-sum beats lie in one group
            if not ok.any():
                return None
            cost = np.where(ok, cost, np.inf)
            best = np.flatnonzero(cost <= cost.min() * (1 + slack + 1e-12))
            i = best[np.argmin(p_full[best])]  # fewest tiles, then least folding
            choices.append(LayerChoice(int(p_full[i]), int(w[i])))
        return choices

    def vmax(self, plan, choice, node, period):
        """Most units one tile may fold over on ``node`` at ``period`` (0: it cannot run)."""
        speedup = FC_SPEEDUP if self.offchip(plan, node) else 1
        cycles = period * self.clocks[node] // (self.ref_clock * speedup)
        if cycles < plan.raster:
            return 0
        most = cycles // plan.pass_pixels // choice.w_full
        return min(most, 1) if not self.fold_inputs and plan.mode == "icp" else most

    def shape(self, plan, choice, units, node, period):
        """Engine shape of ``units`` units of ``plan`` on ``node``, or None if it cannot run."""
        return engine_shape(plan, choice, units, self.vmax(plan, choice, node, period))

    def offchip(self, plan, node):
        return plan.kind == "fc" and self.has_dram[node]

    def act_storage(self, node):
        """Where the slices on ``node`` keep their Act-RAM and SFU masks: with ``act_dram``,
        in the DRAM of a device that has one."""
        return "dram" if self.act_dram[node] else "chip"

    def slice(self, plan, node, lo, units, shape, first=False, last=False):
        """The Slice of units [lo, lo + units) of ``plan`` on ``node`` with engines ``shape``."""
        return Slice(plan, node, lo, lo + units, shape, self.offchip(plan, node), first, last,
                     multipliers=slice_multipliers(plan, shape, self.families[node]),
                     act_storage=self.act_storage(node))

    def _cost(self, plan, choice, lo, units, node, period, first, last):
        """(multipliers, fixed memory blocks, DRAM bytes per sample) of candidate units
        [lo, lo + units) of ``plan`` on ``node``, or None if they cannot run: one slice, or
        in a grouped layer one slice per group they reach into (the sum of those)."""
        parts = plan.group_parts(lo, lo + units)
        if len(parts) == 1:
            return self._slice_cost(plan, choice, lo, units, node, period, first, last)
        total = (0, 0, 0)
        for a, b in parts:
            cost = self._slice_cost(plan, choice, a, b - a, node, period, first and a == lo,
                                    last and b == lo + units)
            if cost is None:
                return None
            total = tuple(t + c for t, c in zip(total, cost))
        return total

    def _slice_cost(self, plan, choice, lo, units, node, period, first, last):
        """:meth:`_cost` of one slice, units [lo, lo + units) inside one group.

        Remembered per engine shape: neighbouring periods mostly give the same shapes."""
        vmax = self.vmax(plan, choice, node, period)
        if vmax < 1:
            return None
        key = (plan.index, choice, units, min(vmax, units * plan.unit_inputs), self.families[node], self.offchip(plan, node),
               self.act_storage(node), first, last, self._buffer_start(plan, lo))
        if key not in self._costs:
            sl = self.slice(plan, node, lo, units, engine_shape(plan, choice, units, vmax), first, last)
            mem = self._memory(sl)
            # The budget also pays for the weight update's multipliers, and for the bias
            # update's on every slice of a layer with biases (only the slice owning them has
            # one: the safe side; mapper.py counts exactly).
            multipliers = sl.multipliers + resources.update_multipliers(plan.bias)
            self._costs[key] = (multipliers, mem.bram_blocks, slice_dram_bytes(sl, self.batch))
        return self._costs[key]

    def _buffer_start(self, plan, lo):
        """What a slice's memory depends on besides its size: with ``buildable_balance``
        (the memories hw/ builds), an ICP slice buffers the inputs of every channel from its
        first one up (the later nodes' channels pass through it); none otherwise."""
        return lo if self.buildable_balance and plan.mode == "icp" else None

    def _start_key(self, plan, lo):
        """What the cost of units from (or up to) unit ``lo`` of ``plan`` depends on besides their count: the
        slice's :meth:`_buffer_start` and, in a grouped layer, where in its group ``lo`` is
        (which group boundaries cut the units into slices)."""
        return self._buffer_start(plan, lo), lo % plan.group_units if plan.groups > 1 else None

    def _memory(self, sl):
        """Memory a candidate slice ``sl`` holds whatever weight balancing does: its buffers and its
        weights, or where its rows may move (:meth:`weights_stay`), what of them cannot:
        with ``buildable_balance`` one engine group of rows (the generator's balancing
        leaves whole groups), else the weight memories' width."""
        plan, shape, units, offchip = sl.plan, sl.shape, sl.units, sl.offchip
        family, held = self.families[sl.node], self.samples_held[plan.name]
        buffers = balance.fixed_buffers(plan, units, shape, held, family, first=sl.first, last=sl.last,
                                        latency_cycles=self.latency, gradient_batch=self.batch if offchip else 0,
                                        grad_bits=self.grad_bits, act_storage=sl.act_storage)
        if self.buildable_balance:
            if not self.weights_stay(plan):
                sl = replace(sl, remote_rows=sl.out_channels - min(shape.P, sl.out_channels))
            return balance.exact_slice_memory(sl, replace(buffers, overlapped_update=self.overlapped_update),
                                              family, self.grad_bits)
        if self.weights_stay(plan):
            return buffers.cost + balance.weight_memory_of(plan, units, shape, family, offchip, self.grad_bits)
        return buffers.cost + balance.weight_floor(plan, units, shape, family, offchip, self.grad_bits)

    def weights_stay(self, plan):
        """Whether every weight row of ``plan`` stays on the node that uses it: with
        ``local_weights``, or with ``buildable_balance`` for conv layers (the generator
        moves only fully connected rows, mapping/balance.py)."""
        return self.local_weights or (self.buildable_balance and plan.kind != "fc")

    def limits(self, node, period):
        """What ``node`` offers at ``period``: multipliers, blocks, DRAM bytes per sample."""
        budget = self.nodes[node]
        return budget.multipliers, budget.blocks, self.seconds(period) * budget.dram_bytes_per_s

    def _layer_at(self, g):
        return bisect_right(self.starts, g) - 1

