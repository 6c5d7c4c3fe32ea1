"""Refusal messages: a network the chain cannot hold is refused with a SpecError that
names the layer, the channel, the device and the numbers that block it."""

import math

from .. import balance
from ..devices import BRAM_BLOCK_BITS
from ..errors import MemoryRefusal, SpecError
from ..numerics import WORD_BITS
from ..resources import ram_style, tile_multipliers
from .fill import GreedyFills


class Refusals(GreedyFills):
    """The checks and refusals of the fine phase."""

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

    def _check_units(self):
        """Refuse up front a layer whose single channel overflows the largest node at any
        period: its Act-RAM and, on the node that finishes the layer, its SFU masks (none
        where a node keeps them in DRAM: a channel may go there)."""
        if any(self.act_dram):
            return
        node = max(range(len(self.nodes)), key=lambda d: self.nodes[d].blocks)
        budget, family = self.nodes[node], self.families[node]
        for plan in self.plans:
            stale, (_, h, w) = self.samples_held[plan.name], plan.in_shape
            act = (plan.unit_inputs if plan.mode == "icp" else plan.group_full) * h * w * stale  # OCP: its group's inputs
            masks = stale * balance.mask_bits(plan, plan.out_shape[0] if plan.mode == "icp" else 1)
            floor = sum(math.ceil(bits / BRAM_BLOCK_BITS) for bits, depth in
                        ((act * WORD_BITS, stale * h * w), (masks, masks // WORD_BITS))
                        if ram_style(depth, family) == "block")
            if floor > budget.blocks:
                unit = plan.units - 1 if plan.mode == "icp" else 0
                self._refuse_unit(plan, unit, f"at least {floor}", budget, "")

    def _refuse_unit(self, plan, unit, blocks, budget, others):
        """Raise: ``unit`` of ``plan`` alone needs ``blocks`` blocks, more than ``budget`` has."""
        stale, (_, h, w) = self.samples_held[plan.name], plan.in_shape
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
        raise MemoryRefusal(
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
            uses = [what for what, used in (("streams its weights from DRAM", self.offchip(plan, node)),
                                            ("keeps its activations in DRAM", self.act_storage(node) == "dram"))
                    if used]
            raise SpecError(f"{self.describe()}: layer '{plan.name}' {' and '.join(uses)}, and the DRAM of "
                            f"{budget.device.name} is too slow for even one channel")
        if one is not None and one[1] > budget.blocks:
            self._refuse_unit(plan, unit, f"{one[1]}", budget, ", line buffers, partial sums")
        how = self._weights_held()
        channel = f"{'input' if plan.mode == 'icp' else 'output'} channel {unit}"
        raise MemoryRefusal(
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
