"""FPDeep partitioner: coarse layer groups, then channel-granularity slices with engines.

Model (paper sections 3.2, 3.4, 4.1, 5.3-5.5)
---------------------------------------------
Only convolution and fully connected ("weighted") layers carry work; ReLU and
max-pool run in the special function unit (SFU) of the node that finishes a
layer's output channels, flatten is a re-ordering. A weighted layer is cut into
*units*: its input channels under ICP, its output channels under OCP.

ICP/OCP rule: ICP, unless the layer has fewer than :data:`OCP_BELOW_IN_CHANNELS`
input channels and more output than input channels (image inputs: grey or RGB,
AlexNet's and VGG's conv1), where ICP could not spread the layer over more than
one to three nodes; those layers use OCP.

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

Fully connected layers are 1x1 convolutions on a 1x1 map. On a device with DRAM
their weights and 48-bit gradient accumulators stay off chip (paper 6.3.1) and
flow as in :func:`dram_bytes` (the FC dataflow, documented in mapping/perf.py);
that transfer time is part of the slice's cycles, so the partitioner gives FC
layers as many DRAM devices as their traffic needs. Without DRAM they are kept on
chip like convolution weights (the simulated hardware's small FC layers).

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

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
import math
from typing import NamedTuple

import numpy as np

from . import balance
from . import resources
from .errors import SpecError
from .line_walk import line_buffer_cycles
from .nodeconfig import ChannelRanges, Pool
from .devices import BRAM_BLOCK_BITS
from .numerics import WORD_BITS
from .resources import is_lutram, onchip_blocks, tile_multipliers

OCP_BELOW_IN_CHANNELS = 4
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
# Node ends the search for cuts near the proportional targets tries before it takes the
# greedy cuts (Partitioner._cuts_near_targets): it mostly tries one per node, a few
# hundred where it backtracks on a small chain; this bounds it to some 30 ms.
SEARCH_ENDS = 2048


@dataclass(frozen=True)
class LayerPlan:
    """A weighted layer with everything the partitioner and hw need about it."""

    index: int            # among the weighted layers
    position: int         # in the network (tensor ids)
    name: str
    kind: str             # "conv" or "fc"
    mode: str             # "icp" or "ocp"
    in_shape: tuple
    out_shape: tuple      # conv/fc output before the SFU
    sfu_shape: tuple      # after ReLU / max-pool: what the next layer receives
    kernel: int
    stride: int
    padding: int
    bias: bool
    relu: bool
    pool: Pool | None
    needs_eb: bool
    macs: int             # FP + EB + PG per sample
    flatten_from: tuple | None = None  # fc after a flatten: the (C, H, W) it flattens

    @cached_property
    def engines(self):
        return 3 if self.needs_eb else 2

    @cached_property
    def units(self):
        return self.in_shape[0] if self.mode == "icp" else self.out_shape[0]

    @cached_property
    def full(self):
        """Channels every slice handles in full: outputs under ICP, inputs under OCP."""
        return self.out_shape[0] if self.mode == "icp" else self.in_shape[0]

    @cached_property
    def in_pixels(self):
        return self.in_shape[1] * self.in_shape[2]

    @cached_property
    def out_pixels(self):
        return self.out_shape[1] * self.out_shape[2]

    @cached_property
    def pass_pixels(self):
        """Cycles per (output group, input group) pass over one sample."""
        return max(self.out_pixels, self.in_pixels if self.needs_eb else 0)

    @cached_property
    def raster(self):
        """Cycles the line buffers need per sample at one column per cycle: the input raster
        plus the padding the windows walk over, and EB's walk over its error map."""
        _, h, w = self.in_shape
        walk = line_buffer_cycles(h, w, self.kernel, self.stride, self.padding)
        if self.needs_eb:
            walk = max(walk, line_buffer_cycles(h, w, self.kernel, self.stride, self.padding, errors=True))
        return walk

    @cached_property
    def weights_per_unit(self):
        return self.full * self.kernel * self.kernel


def plan_layers(network):
    """The weighted layers of a (trainable) network with their SFU and ICP/OCP choice."""
    network.check_trainable()
    plans, first, flattened = [], True, None
    layers = list(network)
    for i, info in enumerate(layers):
        if not info.has_weights:
            continue
        relu, pool, sfu_shape = False, None, info.out_shape
        for after in layers[i + 1:]:
            if after.has_weights:
                break
            if after.type == "relu" and not relu:
                relu = True
            elif after.type == "maxpool" and pool is None:
                pool = Pool(after.kernel, after.layer.stride, after.layer.padding)
            elif after.type != "flatten":
                raise SpecError(f"network {network.name}: layer '{after.name}' ({after.type}) after "
                                f"'{info.name}' cannot run in its SFU (one ReLU and one max-pool at most)")
            if after.type != "flatten":
                sfu_shape = after.out_shape
        kind = "conv" if info.type == "conv2d" else "fc"
        c_in, c_out = info.in_channels, info.out_channels
        mode = "ocp" if c_in < OCP_BELOW_IN_CHANNELS and c_out > c_in else "icp"
        layer = info.layer
        plans.append(LayerPlan(
            index=len(plans), position=info.position, name=info.name, kind=kind, mode=mode,
            in_shape=info.in_shape, out_shape=info.out_shape, sfu_shape=sfu_shape,
            kernel=layer.kernel if kind == "conv" else 1,
            stride=layer.stride if kind == "conv" else 1,
            padding=layer.padding if kind == "conv" else 0,
            bias=layer.bias, relu=relu, pool=pool, needs_eb=not first, macs=info.macs,
            flatten_from=flattened if kind == "fc" else None))
        first = False
        following = layers[i + 1:next((j for j in range(i + 1, len(layers)) if layers[j].has_weights),
                                      len(layers))]
        flattened = sfu_shape if any(a.type == "flatten" for a in following) else None
    return tuple(plans)


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

    @property
    def units(self):
        return self.hi - self.lo

    @property
    def in_range(self):
        return (self.lo, self.hi) if self.plan.mode == "icp" else (0, self.plan.in_shape[0])

    @property
    def out_range(self):
        return (0, self.plan.out_shape[0]) if self.plan.mode == "icp" else (self.lo, self.hi)

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


def _shape(plan, choice, units, vmax):
    """Engine shape of ``units`` units with at most ``vmax`` per tile (None if vmax < 1)."""
    if vmax < 1:
        return None
    tiles = -(-units // min(units, vmax))
    per = -(-units // tiles)
    if plan.mode == "icp":
        P = choice.p_full
        return Shape(P=P, b=tiles, u=-(-plan.full // P), v=per)
    b = choice.p_full
    return Shape(P=tiles, b=b, u=per, v=-(-plan.full // b))


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


class _LayerChoice(NamedTuple):
    """Per-layer engine parameters shared by all its slices at one period."""

    p_full: int      # tiles along the full dimension (P for ICP, b for OCP)
    w_full: int      # passes along the full dimension


class Partitioner:
    """The fine phase for one network on one chain (see module docstring).

    Periods are integers: cycles of the slowest node clock (``ref_clock``). Engines
    count whole cycles, so the shortest feasible period is a whole number of them
    and the bisection over integers is exact (on a chain with one clock; faster
    nodes get the whole cycles of theirs that fit)."""

    def __init__(self, plans, node_budgets, *, fp_stale, link_latency_cycles, describe, batch,
                 local_weights=False, buildable_balance=False, fold_inputs=True, offchip_fc=True):
        self.describe = describe
        self.fold_inputs = fold_inputs
        self.batch = batch
        self.local_weights = local_weights
        self.buildable_balance = buildable_balance
        self.plans = plans
        self.nodes = node_budgets
        self.fp_stale = fp_stale
        self.latency = link_latency_cycles
        self.starts = [0]
        for p in plans:
            self.starts.append(self.starts[-1] + p.units)
        self.total = self.starts[-1]
        self.clocks = [round(b.clock_hz) for b in node_budgets]
        self.ref_clock = min(self.clocks)
        self.has_dram = [offchip_fc and b.device.dram_gb > 0 for b in node_budgets]
        self.dram = any(self.has_dram)
        self.families = [b.device.family for b in node_budgets]
        self._memo, self._memo_period, self._costs = {}, None, {}
        self._check_tiles()
        self._check_units()

    def seconds(self, period):
        return period / self.ref_clock

    # ---- per-layer and per-slice sizing at a period ----

    def _check_tiles(self):
        biggest = max(self.nodes, key=lambda b: b.multipliers)
        for p in self.plans:
            need = p.engines * tile_multipliers(p.kernel, biggest.device.family)
            if need > biggest.multipliers:
                raise SpecError(
                    f"layer '{p.name}' needs {need} multipliers for one {p.kernel}x{p.kernel} tile in "
                    f"each of its {p.engines} engines (FP, {'EB, ' if p.needs_eb else ''}PG), but the "
                    f"largest device of the cluster, {biggest.device.name}, offers "
                    f"{biggest.multipliers}")

    def choose(self, period, slack=0.0):
        """Shared engine parameter of every layer at ``period`` (see CHOICE_SLACK), or None
        if the period is too short."""
        biggest = max(b.multipliers for b in self.nodes)
        choices = []
        for p in self.plans:
            cycles = period // (FC_SPEEDUP if p.kind == "fc" and self.dram else 1)
            q = min(cycles // p.pass_pixels, p.full * p.units)  # more passes than MACs are moot
            if cycles < p.raster or q < 1:
                return None
            w = np.arange(1, min(p.full, q) + 1)
            if not self.fold_inputs and p.mode == "ocp":
                w = w[:1]  # every input channel gets its own tile
            p_full = -(-p.full // w)
            vmax = np.minimum(q // w, p.units)
            if not self.fold_inputs and p.mode == "icp":
                vmax = np.minimum(vmax, 1)
            cost = p_full / vmax
            ok = p.engines * p.kernel ** 2 * p_full <= biggest
            if not ok.any():
                return None
            cost = np.where(ok, cost, np.inf)
            best = np.flatnonzero(cost <= cost.min() * (1 + slack + 1e-12))
            i = best[np.argmin(p_full[best])]  # fewest tiles, then least folding
            choices.append(_LayerChoice(int(p_full[i]), int(w[i])))
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
        return _shape(plan, choice, units, self.vmax(plan, choice, node, period))

    def offchip(self, plan, node):
        return plan.kind == "fc" and self.has_dram[node]

    def _cost(self, plan, choice, lo, units, node, period, first, last):
        """(multipliers, fixed memory blocks, DRAM bytes per sample) of a candidate slice of
        units [lo, lo + units), or None if it cannot run.

        Remembered per engine shape: neighbouring periods mostly give the same shapes."""
        vmax = self.vmax(plan, choice, node, period)
        if vmax < 1:
            return None
        offchip = self.offchip(plan, node)
        family = self.families[node]
        key = (plan.index, choice, units, min(vmax, units), family, offchip, first, last,
               self._start_key(plan, lo))
        if key not in self._costs:
            shape = _shape(plan, choice, units, vmax)
            mem = self._memory(plan, shape, lo, units, node, offchip, first, last)
            # The budget also pays for the weight update's multipliers, and for the bias
            # update's on every slice of a layer with biases (only the slice owning them has
            # one: the safe side; mapper.py counts exactly).
            multipliers = slice_multipliers(plan, shape, family) + resources.update_multipliers(plan.bias)
            self._costs[key] = (multipliers, mem.bram_blocks,
                                dram_bytes(plan, units, self.batch) if offchip else 0)
        return self._costs[key]

    def _start_key(self, plan, lo):
        """What a candidate's memory depends on besides its size: with ``buildable_balance``
        (the memories hw/ builds), an ICP slice buffers the inputs of every channel from its
        first one up (the later nodes' channels pass through it); none otherwise."""
        return lo if self.buildable_balance and plan.mode == "icp" else None

    def _memory(self, plan, shape, lo, units, node, offchip, first, last):
        """Memory a candidate slice holds whatever weight balancing does: its buffers and its
        weights, or where its rows may move (:meth:`weights_stay`), what of them cannot:
        with ``buildable_balance`` one engine group of rows (the generator's balancing
        leaves whole groups), else the weight memories' width."""
        family, fp_stale = self.families[node], self.fp_stale[plan.name]
        buffers = balance.fixed_buffers(plan, units, shape, fp_stale, family, first=first, last=last,
                                        latency_cycles=self.latency,
                                        gradient_batch=self.batch if offchip else 0)
        if self.buildable_balance:
            sl = Slice(plan, node, lo, lo + units, shape, offchip, first, last)
            if not self.weights_stay(plan):
                sl.remote_rows = sl.out_channels - min(shape.P, sl.out_channels)
            return balance.exact_slice_memory(sl, buffers, fp_stale, family)
        if self.weights_stay(plan):
            return buffers.cost + balance.weight_memory_of(plan, units, shape, family, offchip)
        return buffers.cost + balance.weight_floor(plan, units, shape, family, offchip)

    def weights_stay(self, plan):
        """Whether every weight row of ``plan`` stays on the node that uses it: with
        ``local_weights``, or with ``buildable_balance`` for conv layers (the generator
        moves only fully connected rows, mapping/balance.py)."""
        return self.local_weights or (self.buildable_balance and plan.kind != "fc")

    def limits(self, node, period):
        """What ``node`` offers at ``period``: multipliers, blocks, DRAM bytes per sample."""
        budget = self.nodes[node]
        return budget.multipliers, budget.blocks, self.seconds(period) * budget.dram_bytes_per_s

    # ---- greedy fills ----

    def _layer_at(self, g):
        return bisect_right(self.starts, g) - 1

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
        key = (l, choice, self.nodes[node], used, forward, edge, self._start_key(plan, fixed))
        if key not in self._memo:
            self._memo[key] = _largest(lambda n: fits(cost(n, False)), plan.units - 1)
        n = min(self._memo[key], rem - 1)
        c = cost(n, False) if n else None
        if n and not fits(c):  # costs not monotone in the units: search below n
            n = _largest(lambda k: fits(cost(k, False)), n - 1)
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

    # ---- search ----

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
        tile per node and every FC slice has DRAM time for all its units."""
        cycles = max(p.pass_pixels * p.full * p.units * (FC_SPEEDUP if p.kind == "fc" else 1)
                     for p in self.plans)
        dram = [b.dram_bytes_per_s for b in self.nodes if b.dram_bytes_per_s]
        fc = [dram_bytes(p, p.units, self.batch) for p in self.plans if p.kind == "fc"]
        if dram and fc:
            cycles = max(cycles, math.ceil(max(fc) / min(dram) * self.ref_clock))
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

    def _check_units(self):
        """Refuse up front a layer whose single channel overflows the largest node at any
        period: its Act-RAM and, on the node that finishes the layer, its SFU masks."""
        node = max(range(len(self.nodes)), key=lambda d: self.nodes[d].blocks)
        budget, family = self.nodes[node], self.families[node]
        for plan in self.plans:
            stale, (c, h, w) = self.fp_stale[plan.name], plan.in_shape
            act = (1 if plan.mode == "icp" else c) * h * w * stale
            masks = stale * balance.mask_bits(plan, plan.out_shape[0] if plan.mode == "icp" else 1)
            floor = sum(math.ceil(bits / BRAM_BLOCK_BITS) for bits, depth in
                        ((act * WORD_BITS, stale * h * w), (masks, masks // WORD_BITS))
                        if not is_lutram(depth, family))
            if floor > budget.blocks:
                unit = plan.units - 1 if plan.mode == "icp" else 0
                self._refuse_unit(plan, unit, f"at least {floor}", budget, "")

    def _refuse_unit(self, plan, unit, blocks, budget, others):
        """Raise: ``unit`` of ``plan`` alone needs ``blocks`` blocks, more than ``budget`` has."""
        stale, (_, h, w) = self.fp_stale[plan.name], plan.in_shape
        last = plan.mode == "ocp" or unit + 1 == plan.units
        what = f"Act-RAM for its {h}x{w} input of {stale} samples in flight{others}"
        if self.weights_stay(plan) and others:
            what += ", its weights with their 48-bit gradient sums"
        if last:
            outputs = plan.out_shape[0] if plan.mode == "icp" else 1
            bits = stale * balance.mask_bits(plan, outputs)
            what += (f" and, on the node that finishes the layer, ReLU/pooling masks of {outputs} "
                     f"output channel{'s' if outputs > 1 else ''} for those samples, {bits / 1e6:.1f} Mbit")
        channel = f"{'input' if plan.mode == 'icp' else 'output'} channel {unit}"
        raise SpecError(
            f"{self.describe()}: layer '{plan.name}' cannot be cut finely enough: {channel} alone needs "
            f"{blocks} blocks of 18 Kb ({what}), but {budget.device.name} offers {budget.blocks} usable")

    def _explain_infeasible(self, period):
        """Raise a SpecError naming the layer, device and numbers that block every period
        (``period`` is one past which nothing gets easier)."""
        choices = self.choose(period)
        g = 0
        for node in range(len(self.nodes)):
            g = self.fill(choices, node, g, period)
        l = self._layer_at(g)
        plan, unit = self.plans[l], g - self.starts[l]
        node = max(range(len(self.nodes)), key=lambda d: (self.nodes[d].blocks, self.nodes[d].multipliers))
        budget = self.nodes[node]
        first, last = unit == 0, unit + 1 == plan.units
        one = self._cost(plan, choices[l], unit, 1, node, period, first, last)
        if one is not None and one[2] > self.limits(node, period)[2]:
            raise SpecError(f"{self.describe()}: layer '{plan.name}' streams its weights from DRAM, and "
                            f"the DRAM of {budget.device.name} is too slow for even one channel")
        if one is not None and one[1] > budget.blocks:
            self._refuse_unit(plan, unit, f"{one[1]}", budget, ", line buffers, partial sums")
        how = self._weights_held()
        channel = f"{'input' if plan.mode == 'icp' else 'output'} channel {unit}"
        raise SpecError(
            f"{self.describe()}: cluster too small: {how}its {len(self.nodes)} nodes hold the network "
            f"only up to {channel} of {plan.units} of layer '{plan.name}' at any pipeline period "
            f"({budget.device.name}: {budget.blocks} usable blocks of 18 Kb, {budget.multipliers} "
            f"multipliers)")

    def _weights_held(self):
        """For a refusal: the weights every period was tried with in full on their node
        (none where only the width of each weight memory was reserved)."""
        if self.local_weights:
            return "with every weight on the node that uses it, "
        if self.buildable_balance:
            return ("with every conv weight on the node that uses it (the hardware generator moves "
                    "only rows of fully connected layers to other nodes), ")
        return ""

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
        and the search gives up after SEARCH_ENDS ends."""
        n, target = len(self.nodes), self.proportional_cuts()
        earliest = [0] * (n + 1)
        earliest[n] = self.total
        for node in range(n - 1, -1, -1):
            earliest[node] = self.fill_back(choices, node, earliest[node + 1], period)
        budget = SEARCH_ENDS

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

    def _check_enough_units(self):
        n = len(self.nodes)
        if self.total < n:
            self._refuse_empty_node(self.total, f"the network has only {self.total} channel units to "
                                    f"spread (input channels of ICP layers, output channels of OCP "
                                    f"layers), fewer than the {n} nodes")

    def _check_no_empty_node(self, cuts):
        empty = [node for node in range(len(self.nodes)) if cuts[node] == cuts[node + 1]]
        if empty:
            self._refuse_empty_node(empty[0], "the nodes before it must take every unit they hold to "
                                    "keep the rest feasible")

    def _refuse_empty_node(self, node, why):
        raise SpecError(f"{self.describe()}: node {node} ({self.nodes[node].device.name}) would get no "
                        f"layer slice: {why}; use a shorter chain")

    def proportional_cuts(self):
        caps = np.array([b.capacity for b in self.nodes], dtype=float)
        work = np.array([p.macs for p in self.plans], dtype=float)
        bounds = np.cumsum(caps)[:-1] / caps.sum() * work.sum()
        starts = np.concatenate([[0.0], np.cumsum(work)])
        cuts = [0]
        for x in bounds:
            l = min(int(np.searchsorted(starts, x, side="right")) - 1, len(self.plans) - 1)
            frac = (x - starts[l]) / work[l]
            cuts.append(self.starts[l] + int(round(frac * self.plans[l].units)))
        cuts.append(self.total)
        return cuts

    def slices(self, period, choices, cuts):
        """The slices of the partition given by ``cuts``, each sized for ``period``."""
        result = []
        for node in range(len(self.nodes)):
            g, end = cuts[node], cuts[node + 1]
            while g < end:
                l = self._layer_at(g)
                hi = min(end, self.starts[l + 1])
                plan = self.plans[l]
                lo_unit, hi_unit = g - self.starts[l], hi - self.starts[l]
                shape = self.shape(plan, choices[l], hi_unit - lo_unit, node, period)
                result.append(Slice(plan, node, lo_unit, hi_unit, shape, self.offchip(plan, node),
                                    multipliers=slice_multipliers(plan, shape, self.families[node])))
                g = hi
        by_layer = {}
        for s in result:
            by_layer.setdefault(s.plan.index, []).append(s)
        for group in by_layer.values():
            group[0].first = True
            group[-1].last = True
        return result


@dataclass
class Partition:
    tau: float                     # the period the engines were sized for (s)
    period: int                    # the same in cycles of the slowest clock
    slices: list                   # Slice objects in chain order
    coarse: tuple
    choices: list = field(default_factory=list)


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


def _largest(ok, limit):
    """Largest n in 0..limit with ok(n), for ok monotone decreasing in n (ok(0) holds)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def partition(plans, node_budgets, *, fp_stale, link_latency_cycles, describe, batch=1,
              local_weights=False, buildable_balance=False, at_least=0, fold_inputs=True,
              offchip_fc=True):
    """The fine phase; ``local_weights`` makes every node hold all its weights itself
    (no balancing), ``buildable_balance`` all its conv weights (the generator balances
    only fully connected rows), otherwise only their width is reserved (see module docstring).
    ``at_least``: a period (cycles) known to be infeasible below, from an earlier
    partition with smaller buffers; ``describe()`` names the network and cluster in
    refusals; ``batch`` the mini-batch (FC weights in DRAM); ``fold_inputs=False`` gives
    every input channel of a slice its own tile and ``offchip_fc=False`` keeps fully
    connected weights on chip (both as hw/ generates)."""
    part = Partitioner(plans, node_budgets, fp_stale=fp_stale, link_latency_cycles=link_latency_cycles,
                       describe=describe, batch=batch, local_weights=local_weights,
                       buildable_balance=buildable_balance, fold_inputs=fold_inputs,
                       offchip_fc=offchip_fc)
    period = part.min_period(at_least)
    choices = part.feasible(period)
    cuts = part.cuts(period, choices)
    return Partition(part.seconds(period), period, part.slices(period, choices, cuts),
                     coarse(plans, node_budgets), choices)
