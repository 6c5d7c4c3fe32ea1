"""The contract between mapping/ and hw/: a Mapping holds one NodeConfig per node.

Everything the hardware generator needs for one node is here, and nothing it
does not: the layer slices the node computes (with their full geometry, so hw/
never looks at the network), the weight blocks it hosts for other nodes, the
fixed-point formats and training constants, and the mapping's resource and
cycle estimates that ``python -m hw.build`` compares with synthesis.

Conventions
-----------
- Channel ranges are half-open ``(lo, hi)`` in the layer's global numbering.
- A fully connected layer is a 1x1 convolution on a 1x1 map whose input
  channels are the flattened (C, H, W) activations in row-major order.
- ``mode`` is "icp" (the slice owns input channels ``in_range`` and produces
  partial sums of every output channel) or "ocp" (it owns output channels
  ``out_range`` and reads every input channel).
- ``first``/``last`` are the slice's position among the nodes of its layer in
  chain order: for ICP the last node adds the final partial sums and runs the
  SFU; for OCP the first node finishes the backward reduction of EB partials.
- ``fp_stale`` is the number of samples at the start of each mini-batch whose FP
  on this slice still uses the previous weights (DESIGN.md section 7): FP of
  sample s uses weight version max(0, (s - fp_stale) // batch); EB always uses
  version s // batch. The golden model takes the same numbers.
- Weight balancing: a slice's ``remote_weights`` and its host's ``hosted`` hold the
  same WeightBlocks. Each carries ``owner_slice``, the owner's slice cut to the
  block's output channels, so the host can lay out, stream and update those rows
  exactly as the owner's LPRAM would (same engines, weight versions and rounding
  indices) from its own NodeConfig alone. A host more than one link away from its
  owner sends the rows and receives their gradients through the nodes in between:
  each of those lists the block in ``relays``.
"""

from dataclasses import dataclass, field, asdict, replace
import json

from .numerics import Formats

MODES = ("icp", "ocp")


@dataclass(frozen=True)
class Engine:
    """An array of ``ces`` convolution engines, each of ``tiles`` K x K MAC tiles."""

    ces: int
    tiles: int
    kernel: int

    @property
    def multipliers(self):
        return self.ces * self.tiles * self.kernel * self.kernel


@dataclass(frozen=True)
class Pool:
    kernel: int
    stride: int
    padding: int = 0


@dataclass(frozen=True)
class WeightBlock:
    """Rows (output channels ``out_range``) of a slice's weights kept on ``host`` node."""

    owner: int        # node whose slice uses the weights
    host: int         # node whose BPRAM stores them
    layer: str
    in_range: tuple
    out_range: tuple
    words: int
    # The owner's LayerSlice cut to ``out_range`` (its remote_weights empty); None
    # until the mapper has built the slices.
    owner_slice: "LayerSlice | None" = None


class ChannelRanges:
    """Channel counts of anything with ``in_range``, ``out_range`` and ``kernel``."""

    @property
    def in_channels(self):
        return self.in_range[1] - self.in_range[0]

    @property
    def out_channels(self):
        return self.out_range[1] - self.out_range[0]

    @property
    def weight_words(self):
        return self.in_channels * self.out_channels * self.kernel * self.kernel


@dataclass(frozen=True)
class LayerSlice(ChannelRanges):
    layer: str
    position: int          # index of the layer in the network (tensor ids use it)
    kind: str              # "conv" or "fc"
    mode: str              # "icp" or "ocp"
    in_shape: tuple        # full layer input (C, H, W)
    out_shape: tuple       # full conv/fc output before the SFU (C, H, W)
    kernel: int
    stride: int
    padding: int
    bias: bool
    relu: bool
    pool: Pool | None
    in_range: tuple
    out_range: tuple
    first: bool
    last: bool
    needs_eb: bool         # False for the network's first weighted layer
    fp: Engine
    eb: Engine
    pg: Engine
    act_ram_words: int     # input activations kept from FP until PG consumes them
    line_buffer_words: int
    pab_words: int         # partial sums waiting for the previous node's stream
    lgb_words: int
    weights_offchip: bool  # fully connected weights in the node's DRAM (paper 6.3.1)
    remote_weights: tuple = ()  # WeightBlocks of this slice kept on other nodes
    flatten_from: tuple | None = None  # fc: the (C, H, W) activations its input flattens
    fp_stale: int = 0
    cycles_per_sample: int = 0


    @property
    def owns_biases(self):
        """The slice that finishes output channels keeps their biases (SFU, bias LGB)."""
        return self.bias and (self.mode == "ocp" or self.last)

    @property
    def multipliers(self):
        return self.fp.multipliers + self.eb.multipliers + self.pg.multipliers


@dataclass(frozen=True)
class Resources:
    dsp: int = 0
    bram_blocks: int = 0
    bram_bits: int = 0
    lut: int = 0
    ff: int = 0


@dataclass(frozen=True)
class Training:
    batch: int
    lr: float
    lr_constant: int       # round(lr / batch * 2**lr_frac)
    bias_lr_constant: int


@dataclass(frozen=True)
class NodeConfig:
    index: int
    device: str
    family: str            # "ecp5", "xc7", "zynqmp", "virtexuplus", ...
    clock_mhz: float
    slices: tuple
    hosted: tuple          # WeightBlocks this node stores for others (BPRAM)
    formats: Formats
    training: Training
    estimate: Resources
    cycles_per_sample: int
    link_bytes_forward: int   # bytes per sample sent to the successor
    link_bytes_backward: int  # bytes per sample sent to the predecessor
    chain_length: int = 0     # nodes in the mapping; the last one applies the loss
    relays: tuple = ()        # WeightBlocks whose rows and gradients pass through this node

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["slices"] = tuple(_slice_from_dict(s) for s in d["slices"])
        d["hosted"] = tuple(_block_from_dict(b) for b in d["hosted"])
        d["relays"] = tuple(_block_from_dict(b) for b in d.get("relays", ()))
        d["formats"] = Formats(**d["formats"])
        d["training"] = Training(**d["training"])
        d["estimate"] = Resources(**d["estimate"])
        return cls(**d)


def _block_from_dict(d):
    owner_slice = d.get("owner_slice")
    return WeightBlock(**{**d, "in_range": tuple(d["in_range"]), "out_range": tuple(d["out_range"]),
                          "owner_slice": None if owner_slice is None else _slice_from_dict(owner_slice)})


def _slice_from_dict(d):
    d = dict(d)
    for key in ("in_shape", "out_shape", "in_range", "out_range"):
        d[key] = tuple(d[key])
    for key in ("fp", "eb", "pg"):
        d[key] = Engine(**d[key])
    d["pool"] = Pool(**d["pool"]) if d["pool"] is not None else None
    d["remote_weights"] = tuple(_block_from_dict(b) for b in d["remote_weights"])
    if d.get("flatten_from") is not None:
        d["flatten_from"] = tuple(d["flatten_from"])
    return LayerSlice(**d)


@dataclass(frozen=True)
class Mapping:
    network: str           # zoo name or spec file the mapping was made from
    cluster: str           # cluster spec string or file
    nodes: tuple           # NodeConfigs in chain order
    summary: dict = field(default_factory=dict)  # performance-model figures

    def __post_init__(self):
        # Every node knows the chain's length (the last node applies the loss).
        object.__setattr__(self, "nodes", tuple(replace(n, chain_length=len(self.nodes))
                                                for n in self.nodes))

    def node(self, index):
        from .errors import SpecError

        if not 0 <= index < len(self.nodes):
            raise SpecError(f"node {index} is not in the mapping: it has nodes 0..{len(self.nodes) - 1}")
        return self.nodes[index]

    def to_json(self, indent=1):
        return json.dumps({"network": self.network, "cluster": self.cluster,
                           "nodes": [n.to_dict() for n in self.nodes], "summary": self.summary},
                          indent=indent)

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        return cls(d["network"], d["cluster"], tuple(NodeConfig.from_dict(n) for n in d["nodes"]),
                   d.get("summary", {}))
