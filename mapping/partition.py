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

    FP = max(OH*OW*u*v, H*W)    PG = max(OH*OW*u*v, H*W)    EB = H*W*u*v

(the line buffer takes one input pixel per cycle, so a strided layer pays its
input raster; EB walks the zero-dilated error map, i.e. the input raster). The
engine arrays are ``fp = Engine(P, b)``, ``eb = Engine(b, P)`` (S CEs of P tiles in
the paper's words), ``pg = Engine(P, b)``; the first weighted layer has no EB.
``v > 1`` (fewer tiles than input channels) folds the input channels over
several cycles; the mapping folds only where it saves multipliers.

P is the same on every ICP slice of a layer (all of them stream the same pixels
and partial sums at the same rate); b is the same on every OCP slice.

Fully connected layers are 1x1 convolutions on a 1x1 map. On a device with DRAM
their weights and gradient accumulators stay off chip (paper 6.3.1) and every
sample reads each weight for FP and for EB and read-modify-writes its 48-bit
gradient accumulator (:data:`FC_DRAM_BYTES_PER_WEIGHT`); that transfer time is
part of the slice's cycles, so the partitioner gives FC layers as many DRAM
devices as their traffic needs. Without DRAM they are kept on chip like
convolution weights.

Phases
------
1. Coarse (:func:`coarse`): the layer sequence is laid along the chain in
   proportion to each device's compute capacity (usable multipliers x clock),
   giving contiguous groups of near-equal FP+EB+PG work.
2. Fine (:class:`Partitioner`): at channel granularity. For a pipeline period
   tau, each node holds a contiguous run of units whose engines (whole K x K
   tiles, sized for tau) fit its multipliers, its DRAM bandwidth and its
   non-movable on-chip memory: buffers, and the width of its weight memories,
   which every cycle's reads need (their depth, the weights themselves, can move
   to other nodes later, :mod:`mapping.balance`). Where balancing cannot place
   the weights (rows whose weight-stationary partial sums cost more than the rows
   free), the mapper partitions again with every weight counted locally.
   The smallest feasible tau is found by bisection over a greedy fill, which is
   exact for a contiguous partition with monotone costs. Among the partitions
   that reach it, the node boundaries are the coarse phase's boundaries rounded
   to whole channels and moved only as far as feasibility requires, so work
   spreads over every node in proportion to its capacity.
"""

from bisect import bisect_right
from dataclasses import dataclass, field
import math

import numpy as np

from . import balance
from .errors import SpecError
from .nodeconfig import Engine, Pool
from .resources import dram_gbps, onchip_blocks, tile_multipliers

OCP_BELOW_IN_CHANNELS = 4
# A fully connected stage needs its whole input vector before it can finish, so its
# time is pipeline latency for every layer before it (their Act-RAMs hold those
# samples): the compute of FC layers with weights in DRAM (paper-scale classifiers,
# six such stages between the last conv layer's FP and its PG) is sized for
# 1/FC_SPEEDUP of the period; their work is small. On-chip FC layers (small nets)
# are sized for the full period like convolutions.
FC_SPEEDUP = 8
# Per fully connected weight per sample: FP read (16 bit), EB read (16 bit),
# gradient accumulator read and write (48 bit each).
FC_DRAM_BYTES_PER_WEIGHT = 2 + 2 + 6 + 6


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

    @property
    def engines(self):
        return 3 if self.needs_eb else 2

    @property
    def units(self):
        return self.in_shape[0] if self.mode == "icp" else self.out_shape[0]

    @property
    def full(self):
        """Channels every slice handles in full: outputs under ICP, inputs under OCP."""
        return self.out_shape[0] if self.mode == "icp" else self.in_shape[0]

    @property
    def in_pixels(self):
        return self.in_shape[1] * self.in_shape[2]

    @property
    def out_pixels(self):
        return self.out_shape[1] * self.out_shape[2]

    @property
    def pass_pixels(self):
        """Cycles per (output group, input group) pass over one sample."""
        return max(self.out_pixels, self.in_pixels if self.needs_eb else 0)

    @property
    def raster(self):
        """Cycles the line buffer needs to take one sample's input, one pixel per cycle."""
        return self.in_pixels

    @property
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
                                 device.clock_mhz * 1e6, dram_gbps(device) * 1e9 / 8))
    return tuple(result)


@dataclass(frozen=True)
class Shape:
    """Engine shape of one slice: P x b tiles, u x v passes per pixel."""

    P: int
    b: int
    u: int
    v: int


@dataclass
class Slice:
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
    def in_channels(self):
        return self.in_range[1] - self.in_range[0]

    @property
    def out_channels(self):
        return self.out_range[1] - self.out_range[0]

    @property
    def weight_words(self):
        return self.in_channels * self.out_channels * self.plan.kernel ** 2

    @property
    def row_words(self):
        return self.in_channels * self.plan.kernel ** 2

    @property
    def useful_macs(self):
        """FP + EB + PG multiply-accumulates of one sample on this slice."""
        return self.plan.engines * self.weight_words * self.plan.out_pixels

    def compute_cycles(self):
        return slice_cycles(self.plan, self.shape)


def slice_multipliers(plan, shape, family):
    return plan.engines * tile_multipliers(plan.kernel, family) * shape.P * shape.b


def slice_cycles(plan, shape):
    passes = shape.u * shape.v
    fp = max(plan.out_pixels * passes, plan.raster)
    eb = plan.in_pixels * passes if plan.needs_eb else 0
    return max(fp, eb)  # PG takes the same cycles as FP


def dram_bytes(plan, units):
    return units * plan.weights_per_unit * FC_DRAM_BYTES_PER_WEIGHT


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


@dataclass
class _LayerChoice:
    """Per-layer engine parameters shared by all its slices at one period."""

    p_full: int      # tiles along the full dimension (P for ICP, b for OCP)
    w_full: int      # passes along the full dimension


class Partitioner:
    """The fine phase for one network on one chain (see module docstring)."""

    def __init__(self, plans, node_budgets, *, fp_stale, family_of, link_latency_cycles,
                 local_weights=False):
        self.local_weights = local_weights
        self.plans = plans
        self.nodes = node_budgets
        self.fp_stale = fp_stale
        self.family_of = family_of
        self.latency = link_latency_cycles
        self.starts = [0]
        for p in plans:
            self.starts.append(self.starts[-1] + p.units)
        self.total = self.starts[-1]
        self.min_clock = min(b.clock_hz for b in node_budgets)
        self._check_tiles()

    # ---- per-layer and per-slice sizing at a period tau (seconds) ----

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

    def choose(self, tau):
        """Shared engine parameter of every layer at period tau, or None if tau is too short."""
        biggest = max(b.multipliers for b in self.nodes)
        dram = any(b.device.dram_gb > 0 for b in self.nodes)
        choices = []
        for p in self.plans:
            cycles = math.floor(tau * self.min_clock / (FC_SPEEDUP if p.kind == "fc" and dram else 1))
            q = min(cycles // p.pass_pixels, p.full * p.units)  # more passes than MACs are moot
            if cycles < p.raster or q < 1:
                return None
            w = np.arange(1, min(p.full, q) + 1)
            p_full = -(-p.full // w)
            vmax = np.minimum(q // w, p.units)
            cost = p_full / vmax
            ok = p.engines * p.kernel ** 2 * p_full <= biggest
            if not ok.any():
                return None
            cost = np.where(ok, cost, np.inf)
            best = np.flatnonzero(cost <= cost.min() * (1 + 1e-12))
            i = best[np.argmin(p_full[best])]  # ties: fewest tiles, least folding
            choices.append(_LayerChoice(int(p_full[i]), int(w[i])))
        return choices

    def shape(self, plan, choice, units, node, tau):
        """Engine shape of ``units`` units of ``plan`` on ``node``, or None if it cannot run."""
        speedup = FC_SPEEDUP if self.offchip(plan, node) else 1
        cycles = math.floor(tau * self.nodes[node].clock_hz / speedup)
        if cycles < plan.raster:
            return None
        vmax = cycles // plan.pass_pixels // choice.w_full
        if vmax < 1:
            return None
        tiles = -(-units // min(units, vmax))
        per = -(-units // tiles)
        if plan.mode == "icp":
            P = choice.p_full
            return Shape(P=P, b=tiles, u=-(-plan.full // P), v=per)
        b = choice.p_full
        return Shape(P=tiles, b=b, u=per, v=-(-plan.full // b))

    def offchip(self, plan, node):
        return plan.kind == "fc" and self.nodes[node].device.dram_gb > 0

    def _cost(self, plan, choice, units, node, tau, first, last):
        """(multipliers, fixed memory blocks, fits DRAM) of a candidate slice, or None."""
        shape = self.shape(plan, choice, units, node, tau)
        if shape is None:
            return None
        mult = slice_multipliers(plan, shape, self.family_of(node))
        offchip = self.offchip(plan, node)
        if offchip:
            budget = self.nodes[node]
            if dram_bytes(plan, units) > tau * budget.dram_bytes_per_s:
                return None
        family = self.family_of(node)
        mem = balance.fixed_memory(plan, units, shape, self.fp_stale[plan.name], family,
                                   first=first, last=last, latency_cycles=self.latency)
        if self.local_weights:
            mem += balance.weight_memory_of(plan, units, shape, family, offchip)
        else:
            mem += balance.weight_floor(plan, units, shape, family, offchip)
        return mult, mem.bram_blocks

    # ---- greedy fills ----

    def _layer_at(self, g):
        return bisect_right(self.starts, g) - 1

    def _take(self, choices, node, tau, l, fixed, rem, used, forward):
        """Most units (<= rem) of layer l the node can add to ``used`` = (mult, blocks).

        The slice grows away from unit ``fixed`` (its lower end when ``forward``, else
        its upper end); it is the layer's first/last slice when it reaches that end of
        the layer. Returns (units, cost) or (0, None)."""
        plan, choice, budget = self.plans[l], choices[l], self.nodes[node]
        start, end = self.starts[l], self.starts[l + 1]

        def cost(n):
            lo = fixed if forward else fixed - n
            return self._cost(plan, choice, n, node, tau, first=lo == start, last=lo + n == end)

        def fits(n):
            c = cost(n)
            return c is not None and used[0] + c[0] <= budget.multipliers and \
                used[1] + c[1] <= budget.blocks

        if fits(rem):
            return rem, cost(rem)
        lo, hi = 0, rem  # fits(lo) or lo == 0; not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return (lo, cost(lo)) if lo else (0, None)

    def fill(self, choices, node, g, tau):
        """Largest g' such that units [g, g') fit on ``node`` at period tau."""
        used = (0, 0)
        while g < self.total:
            l = self._layer_at(g)
            rem = self.starts[l + 1] - g
            n, c = self._take(choices, node, tau, l, g, rem, used, True)
            if n == 0:
                break
            used = (used[0] + c[0], used[1] + c[1])
            g += n
            if n < rem:
                break
        return g

    def fill_back(self, choices, node, g, tau):
        """Smallest g' such that units [g', g) fit on ``node`` at period tau."""
        used = (0, 0)
        while g > 0:
            l = self._layer_at(g - 1)
            rem = g - self.starts[l]
            n, c = self._take(choices, node, tau, l, g, rem, used, False)
            if n == 0:
                break
            used = (used[0] + c[0], used[1] + c[1])
            g -= n
            if n < rem:
                break
        return g

    def feasible(self, tau):
        choices = self.choose(tau)
        if choices is None:
            return None
        g = 0
        for node in range(len(self.nodes)):
            g = self.fill(choices, node, g, tau)
            if g == self.total:
                return choices
        return None

    # ---- search ----

    def lower_bound(self):
        work = sum(p.macs for p in self.plans)
        ideal = work / sum(b.capacity for b in self.nodes)
        fastest = max(b.clock_hz for b in self.nodes)
        return max(ideal, max(p.raster for p in self.plans) / fastest)

    def min_period(self):
        lo = self.lower_bound()
        if self.feasible(lo):
            return lo
        hi = lo * 2
        for _ in range(80):
            if self.feasible(hi):
                break
            lo, hi = hi, hi * 2
        else:
            self._explain_infeasible(hi)
        while hi / lo > 1 + 1e-7:
            mid = math.sqrt(lo * hi)
            if self.feasible(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def _explain_infeasible(self, tau):
        """Raise a SpecError naming the layer, node and numbers that block any mapping."""
        choices = self.choose(tau)
        g = 0
        for node in range(len(self.nodes)):
            g = self.fill(choices, node, g, tau)
        l = self._layer_at(g)
        plan, budget = self.plans[l], self.nodes[-1]
        one = self._cost(plan, choices[l], 1, len(self.nodes) - 1, tau, False, False)
        where = f"device {budget.device.name}"
        if one is None and self.offchip(plan, len(self.nodes) - 1):
            raise SpecError(f"layer '{plan.name}' streams its weights from DRAM, and the DRAM of "
                            f"{where} is too slow for even one channel at any pipeline period")
        if one is not None and one[1] > budget.blocks:
            raise SpecError(
                f"layer '{plan.name}' needs {one[1]} blocks of 18 Kb for a single "
                f"{'input' if plan.mode == 'icp' else 'output'} channel (activations of "
                f"{self.fp_stale[plan.name]} samples in flight, line buffers, partial sums), but "
                f"{where} offers {budget.blocks} usable blocks")
        raise SpecError(
            f"cluster too small: the {len(self.nodes)} node(s) hold the network only up to unit {g - self.starts[l]} "
            f"of {plan.units} of layer '{plan.name}' at any pipeline period")

    def cuts(self, tau, choices):
        """Node boundaries at period tau: coarse proportional cuts, moved only as far
        as feasibility requires. Returns n+1 unit positions."""
        n = len(self.nodes)
        # earliest[d]: the smallest start of node d from which nodes d..n-1 hold the rest
        earliest = [0] * (n + 1)
        earliest[n] = self.total
        for node in range(n - 1, -1, -1):
            earliest[node] = self.fill_back(choices, node, earliest[node + 1], tau)
        target = self.proportional_cuts()
        cuts = [0]
        for node in range(n - 1):
            start = cuts[-1]
            upper = self.fill(choices, node, start, tau)
            lower = max(earliest[node + 1], start)
            cuts.append(min(max(target[node + 1], lower), upper))
        cuts.append(self.total)
        return cuts

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

    def slices(self, tau, choices, cuts):
        """The slices of the partition given by ``cuts``, each sized for period tau."""
        result = []
        for node in range(len(self.nodes)):
            g, end = cuts[node], cuts[node + 1]
            while g < end:
                l = self._layer_at(g)
                hi = min(end, self.starts[l + 1])
                plan = self.plans[l]
                lo_unit, hi_unit = g - self.starts[l], hi - self.starts[l]
                shape = self.shape(plan, choices[l], hi_unit - lo_unit, node, tau)
                result.append(Slice(plan, node, lo_unit, hi_unit, shape, self.offchip(plan, node),
                                    multipliers=slice_multipliers(plan, shape, self.family_of(node))))
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
    slices: list                   # Slice objects in chain order
    coarse: tuple
    choices: list = field(default_factory=list)


def partition(plans, node_budgets, *, fp_stale, family_of, link_latency_cycles, local_weights=False):
    """The fine phase; ``local_weights`` makes every node hold all its weights itself
    (no balancing), otherwise only their width is reserved (see module docstring)."""
    part = Partitioner(plans, node_budgets, fp_stale=fp_stale, family_of=family_of,
                       link_latency_cycles=link_latency_cycles, local_weights=local_weights)
    tau = part.min_period()
    choices = part.feasible(tau)
    cuts = part.cuts(tau, choices)
    return Partition(tau, part.slices(tau, choices, cuts), coarse(plans, node_budgets), choices)
