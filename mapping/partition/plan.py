"""Layer plans: the weighted layers of a network, each with its SFU and its ICP/OCP
choice (paper sections 3.2, 3.4).

Only convolution and fully connected ("weighted") layers carry work; ReLU and
max-pool run in the special function unit (SFU) of the node that finishes a
layer's output channels, flatten is a re-ordering. A weighted layer is cut into
*units*: its input channels under ICP, its output channels under OCP.

ICP/OCP rule: ICP, unless the layer has fewer than :data:`OCP_BELOW_IN_CHANNELS`
input channels and more output than input channels (image inputs: grey or RGB,
AlexNet's and VGG's conv1), where ICP could not spread the layer over more than
one to three nodes; those layers use OCP. A fully connected layer after a flatten is always
ICP, its units the channels of the map it flattens (:attr:`LayerPlan.unit_inputs`).

Wide vectors: a fully connected layer of more than ``vector_words`` outputs followed by
another weighted layer hands its output vector on as the pixels of a (C, 1, N) map
(nodeconfig.vector_map, :attr:`LayerPlan.out_map`), which the next layer takes as a map it
flattens; such a layer is ICP, its output errors travel a group of P a beat (no stream word
holds the whole vector: hw/node/slice_unit.py). EB windows of more than ``window_words``
taps (O x K x K) travel a chunk of output channels at a time (:attr:`LayerPlan.eb_chunk`).

Grouped convolution (``groups`` G > 1, AlexNet's two towers): a unit pairs only with the
channels of its own group on the other side (an ICP unit, an input channel, with its
group's OC / G outputs; an OCP unit with its group's IC / G inputs), so every unit carries
the same work and the layer is cut into units as any other. A slice never crosses a group
boundary: where a node's units reach into the next group, the partitioner makes them two
slices, one per group (mapping/partition/cost.py), so every slice is an ordinary
convolution over its channel range and its group's channels on the other side
(:meth:`LayerPlan.partner_range`), with its own engines. Why: the memory, engine, link and
update models, the NodeConfig contract and the generator's engines all describe one dense
block of weights per slice; a slice across two groups would be two blocks with no weights
between them (half its engine steps and weight memory would hold zeros, or it would need
an engine that walks two weight blocks). Cuts stay free, so work still spreads over the
nodes in proportion to their capacity; the price is a second set of (smaller) engines on
the at most G - 1 nodes that hold a group boundary.
"""

from dataclasses import dataclass
from functools import cached_property

from ..errors import SpecError
from ..line_walk import line_buffer_cycles
from ..nodeconfig import VECTOR_WORDS, WINDOW_WORDS, Pool, eb_chunk, map_pixels, vector_map

OCP_BELOW_IN_CHANNELS = 4


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
    groups: int = 1       # grouped convolution: G groups of channels (module docstring)
    out_map: tuple | None = None  # fc: the (C, 1, N) map its output vector travels as (module docstring)
    eb_chunk: int = 0     # EB's windows a chunk of this many output channels at a time (module docstring)

    @cached_property
    def engines(self):
        return 3 if self.needs_eb else 2

    @cached_property
    def unit_inputs(self):
        """Inputs per unit: 1, but H*W for an ICP fully connected layer after a flatten, whose
        units are the channels of the (C, H, W) map it flattens: a slice takes whole channels,
        so its input is a pixel stream of them (nodeconfig.map_pixels)."""
        return map_pixels(self.flatten_from)

    @cached_property
    def units(self):
        return self.in_shape[0] // self.unit_inputs if self.mode == "icp" else self.out_shape[0]

    def input_range(self, lo, hi):
        """The inputs of ICP units [lo, hi): ``unit_inputs`` each."""
        return lo * self.unit_inputs, hi * self.unit_inputs

    @cached_property
    def full(self):
        """Channels every slice handles in full: outputs under ICP, inputs under OCP."""
        return self.out_shape[0] if self.mode == "icp" else self.in_shape[0]

    @cached_property
    def group_full(self):
        """Channels on the full side every unit pairs with: those of its group (``full`` / G)."""
        return self.full // self.groups

    @cached_property
    def group_units(self):
        """Units of one group."""
        return self.units // self.groups

    @cached_property
    def weights(self):
        """The layer's weights: OC x IC / G x K x K."""
        return self.out_shape[0] * self.in_shape[0] * self.kernel ** 2 // self.groups

    def group_of(self, unit):
        return unit // self.group_units

    def partner_range(self, unit):
        """The channels on the full side (outputs under ICP, inputs under OCP) a slice whose
        units start at ``unit`` pairs with: all of them, or those of its group."""
        g = self.group_of(unit)
        return g * self.group_full, (g + 1) * self.group_full

    def group_parts(self, lo, hi):
        """Units [lo, hi) cut at group boundaries: the (lo, hi) of each slice they make."""
        parts = []
        while lo < hi:
            end = min(hi, (self.group_of(lo) + 1) * self.group_units)
            parts.append((lo, end))
            lo = end
        return parts

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
        return self.group_full * self.kernel * self.kernel * self.unit_inputs


def plan_layers(network, vector_words=VECTOR_WORDS, window_words=WINDOW_WORDS):
    """The weighted layers of a (trainable) network with their SFU and ICP/OCP choice; output
    vectors of more than ``vector_words`` words travel as maps, EB windows of more than
    ``window_words`` in chunks (module docstring)."""
    network.check_trainable()
    for name, value in (("vector_words", vector_words), ("window_words", window_words)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be a positive integer, not {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    plans, first, flattened = [], True, None
    layers = list(network)
    weighted = [i for i, info in enumerate(layers) if info.has_weights]
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
        out_map = vector_map(c_out, vector_words) if kind == "fc" and i != weighted[-1] else None
        # A layer after a flatten is ICP: it takes the map's pixels (hw/memory/fc_store.py); so
        # is one that hands on a map.
        small = c_in < OCP_BELOW_IN_CHANNELS and c_out > c_in
        mode = "ocp" if small and not (kind == "fc" and flattened is not None) and out_map is None else "icp"
        layer = info.layer
        plans.append(LayerPlan(
            index=len(plans), position=info.position, name=info.name, kind=kind, mode=mode,
            in_shape=info.in_shape, out_shape=info.out_shape, sfu_shape=sfu_shape,
            kernel=layer.kernel if kind == "conv" else 1,
            stride=layer.stride if kind == "conv" else 1,
            padding=layer.padding if kind == "conv" else 0,
            bias=layer.bias, relu=relu, pool=pool, needs_eb=not first, macs=info.macs,
            flatten_from=flattened if kind == "fc" else None, groups=layer.groups if kind == "conv" else 1,
            out_map=out_map,
            eb_chunk=0 if first or out_map else eb_chunk(c_out // (layer.groups if kind == "conv" else 1),
                                                         layer.kernel if kind == "conv" else 1, window_words)))
        first = False
        following = layers[i + 1:next((j for j in range(i + 1, len(layers)) if layers[j].has_weights),
                                      len(layers))]
        flattened = out_map or (sfu_shape if any(a.type == "flatten" for a in following) else None)
    return tuple(plans)

