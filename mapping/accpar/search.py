"""AccPar's partitioning search (section 5) and the baselines it is measured against.

One hierarchy level splits a group of accelerators into two halves and gives
every weighted layer a partition type by layer-wise dynamic programming
(eq. 9), with residual blocks searched path by path between the fork's and the
join's states (section 5.2). Each half then partitions its part of every
tensor the same way, recursively, down to single accelerators (the
hierarchical partitioning of 2^h accelerators; any count splits into
floor/ceil halves). A half is priced as one accelerator with its members'
summed FLOPS but the network bandwidth b_i of one of them: eq. 7 prices a
transfer at the bandwidth of the accelerator that reads it, and the paper's
figures are reproduced that way (spreading the tensor over all the half's links
instead lifts every speedup over DP about 1.5-2x; docs/accpar_mtrain.md).

Time of one mini-batch (the cost every strategy is scored with, whatever it
optimised): at a leaf, its share of Table 6's FLOPs over its FLOPS; at a
level, each half's Table 4 and 5 traffic over its bandwidth plus its subtree's
time, the slower half deciding.

Strategies differ in the types allowed, the objective of the DP and the ratio:

- ``accpar``: Types I, II, III; computation + communication; the ratio of
  eq. 10, iterated to a fixed point (the costs of Table 5 depend on it).
- ``hypar``: Types I and II; communication only; equal shares per accelerator.
  HyPar searches linear chains only (AccPar section 1), so layers inside
  multi-path blocks keep Type-I (data parallelism).
- ``owt``: convolutions Type-I, fully connected layers Type-II (model
  parallelism as AccPar section 3.5 reads it); equal shares.
- ``dp``: every layer Type-I; equal shares.
"""

from dataclasses import dataclass, field

from .costs import IN_LAYOUT, LAYOUTS, OUT_LAYOUT, TYPES, conversion_elements, intra_elements, total_flop
from .graph import Block

STRATEGIES = ("accpar", "hypar", "owt", "dp")
RATIO_ITERATIONS = 6


@dataclass(frozen=True)
class Accelerator:
    name: str
    flops: float            # per second
    bytes_per_s: float      # network bandwidth


@dataclass(frozen=True)
class Side:
    flops: float
    bytes_per_s: float
    share: float


def allowed_types(strategy, layer, in_block=False):
    if strategy == "accpar":
        return TYPES
    if strategy == "hypar":
        return ("I",) if in_block else ("I", "II")
    if strategy == "owt":
        return ("I",) if layer.kind == "conv" else ("II",)
    return ("I",)


def join_layouts(strategy):
    return LAYOUTS if strategy == "accpar" else ("B",)


class Level:
    """The layer-wise DP of one hierarchy level between two sides."""

    def __init__(self, sides, strategy, element_bytes):
        self.sides = sides
        self.strategy = strategy
        self.bytes = element_bytes
        self.with_compute = strategy == "accpar"

    def _per_side(self, elements_of_side, flop=0.0):
        """Seconds each side spends; ``elements_of_side(own, other)`` is what it reads."""
        first, second = self.sides
        out = []
        for own, other in ((first, second), (second, first)):
            seconds = elements_of_side(own.share, other.share) * self.bytes / own.bytes_per_s
            out.append(seconds + own.share * flop / own.flops)
        return out

    def layer_seconds(self, layer, partition_type, source, with_compute=None):
        """Each side's seconds for ``layer`` as ``partition_type`` after a ``source`` layout
        (None: the network's input); with the computation where the objective has it."""
        with_compute = self.with_compute if with_compute is None else with_compute

        def reads(own, other):
            amount = intra_elements(layer, partition_type)
            if source is not None:
                amount += conversion_elements(source, IN_LAYOUT[partition_type], layer.in_features,
                                              own, other)
            return amount
        return self._per_side(reads, total_flop(layer) if with_compute else 0.0)

    def join_seconds(self, source, target, block):
        return self._per_side(lambda own, other: conversion_elements(source, target, block.out_features,
                                                                     own, other))

    def _chain(self, layers, starts, in_block=False):
        """DP over a chain of layers from {source layout: (cost, choices)}; returns the same by output layout."""
        states = starts
        for layer in layers:
            new = {}
            for t in allowed_types(self.strategy, layer, in_block):
                best = None
                for source, (cost, choices) in states.items():
                    total = cost + max(self.layer_seconds(layer, t, source))
                    if best is None or total < best[0]:
                        best = (total, choices + ((layer.name, t),))
                new[OUT_LAYOUT[t]] = best
            states = new
        return states

    def _block(self, block, states):
        new = {}
        for join in join_layouts(self.strategy):
            best = None
            for source, (cost, choices) in states.items():
                total, picked = cost, choices
                for path in block.paths:
                    ends = self._chain(path, {source: (0.0, ())}, in_block=True)
                    end, (path_cost, path_choices) = min(
                        ends.items(), key=lambda kv: kv[1][0] + max(self.join_seconds(kv[0], join, block)))
                    total += path_cost + max(self.join_seconds(end, join, block))
                    picked += path_choices
                if best is None or total < best[0]:
                    best = (total, picked + ((block.name, join),))
            new[join] = best
        return new

    def solve(self, items):
        """{layer or block name: type or join layout} minimising the level's objective."""
        states = {None: (0.0, ())}
        for item in items:
            states = self._block(item, states) if isinstance(item, Block) else self._chain([item], states)
        return dict(min(states.values(), key=lambda v: v[0])[1])

    def comm_seconds(self, items, choice):
        """Each side's communication time at this level under ``choice``."""
        totals = [0.0, 0.0]

        def add(pair):
            totals[0] += pair[0]
            totals[1] += pair[1]

        def chain(layers, source):
            for layer in layers:
                t = choice[layer.name]
                add(self.layer_seconds(layer, t, source, with_compute=False))
                source = OUT_LAYOUT[t]
            return source

        source = None
        for item in items:
            if isinstance(item, Block):
                join = choice[item.name]
                for path in item.paths:
                    end = chain(path, source)
                    add(self.join_seconds(end, join, item))
                source = join
            else:
                source = chain([item], source)
        return totals


def split_items(items, choice, share):
    out = []
    for item in items:
        if isinstance(item, Block):
            paths = tuple(tuple(layer.split(choice[layer.name], share) for layer in path)
                          for path in item.paths)
            out.append(Block(item.name, paths, item.batch, item.channels, item.area)
                       .split(choice[item.name], share))
        else:
            out.append(item.split(choice[item.name], share))
    return tuple(out)


@dataclass
class Plan:
    """A partitioned subtree: its time, this level's choices and its two halves (None at a leaf)."""

    devices: tuple
    items: tuple
    seconds: float
    compute_seconds: float = 0.0          # at a leaf
    choice: dict = field(default_factory=dict)
    share: float = 1.0                    # the first half's ratio
    comm_seconds: tuple = ()              # this level, per half
    comm_bytes: float = 0.0               # this level, both directions
    halves: tuple = ()

    def leaves(self):
        if not self.halves:
            return [self]
        return self.halves[0].leaves() + self.halves[1].leaves()

    def levels(self):
        """Choices level by level along the first half (the top level first)."""
        plan, out = self, []
        while plan.halves:
            out.append(plan.choice)
            plan = plan.halves[0]
        return out

    def total_comm_bytes(self):
        if not self.halves:
            return 0.0
        return self.comm_bytes + sum(h.total_comm_bytes() for h in self.halves)


def _leaf(devices, items):
    flop = sum(total_flop(layer) for item in items
               for layer in (item.layers() if isinstance(item, Block) else [item]))
    seconds = flop / devices[0].flops
    return Plan(devices, items, seconds, compute_seconds=seconds)


def partition(items, devices, strategy, element_bytes, cache=None):
    """The :class:`Plan` of ``strategy`` for ``items`` on ``devices`` (a tuple of Accelerator)."""
    cache = {} if cache is None else cache
    key = (tuple(d.name for d in devices), items)
    if key in cache:
        return cache[key]
    if len(devices) == 1:
        plan = _leaf(devices, items)
    else:
        half = len(devices) // 2
        groups = devices[:half], devices[half:]
        flops = [sum(d.flops for d in g) for g in groups]
        bandwidth = [min(d.bytes_per_s for d in g) for g in groups]
        if strategy == "accpar":
            share = flops[0] / sum(flops)
        else:
            share = half / len(devices)
        plan = None
        for _ in range(RATIO_ITERATIONS if strategy == "accpar" else 1):
            trial = _level(items, groups, flops, bandwidth, share, strategy, element_bytes, cache)
            if plan is None or trial.seconds < plan.seconds:
                plan = trial
            times = [t + h.seconds for t, h in zip(trial.comm_seconds, trial.halves)]
            if groups[0] == groups[1] and share == 0.5 or min(times) <= 0:
                break
            # eq. 10: alpha X_i = beta X_j with X the time per unit of ratio
            per_unit = times[0] / share, times[1] / (1 - share)
            share = per_unit[1] / sum(per_unit)
    cache[key] = plan
    return plan


def _level(items, groups, flops, bandwidth, share, strategy, element_bytes, cache):
    sides = (Side(flops[0], bandwidth[0], share), Side(flops[1], bandwidth[1], 1 - share))
    level = Level(sides, strategy, element_bytes)
    choice = level.solve(items)
    comm = level.comm_seconds(items, choice)
    halves = tuple(partition(split_items(items, choice, s), g, strategy, element_bytes, cache)
                   for g, s in zip(groups, (share, 1 - share)))
    seconds = max(c + h.seconds for c, h in zip(comm, halves))
    comm_bytes = sum(c * side.bytes_per_s for c, side in zip(comm, sides))
    return Plan(groups[0] + groups[1], items, seconds, choice=choice, share=share,
                comm_seconds=tuple(comm), comm_bytes=comm_bytes, halves=halves)
