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
- ``groups`` G > 1 is a grouped convolution (mapping/tensor_ops.py): every slice lies in
  one group, and its other range is that group's channels, not all of them: an ICP
  slice's ``out_range`` is its group's OC / G output channels (the partial sums of the
  other groups pass it by on the stream), an OCP slice's ``in_range`` its group's IC / G
  input channels. Its weights are the ordinary ``out_channels x in_channels x K x K``
  block of those ranges; the SFU of an ICP layer's last slice finishes all its
  ``out_shape[0]`` output channels (``sfu_channels``). The partial sums an ICP slice
  passes on cover every group up to its own (``sums_channels``: group 0's alone between
  group 0's slices), and the output errors going back the same. The generator builds
  grouped ICP layers whose engines' P divides OC / G (memories.groups_problem,
  memories.group_lanes_problem).
- ``first``/``last`` are the slice's position among the nodes of its layer in
  chain order: for ICP the last node adds the final partial sums and runs the
  SFU; for OCP the first node finishes the backward reduction of EB partials.
- ``fp_stale`` is the number of samples at the start of each mini-batch whose FP
  on this slice still uses the previous weights (docs/weight_versions.md): FP of
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

from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass, replace
from fractions import Fraction
import json
import math
from types import UnionType
from typing import Union, get_args, get_origin, get_type_hints

from .devices import FAMILIES, get_device
from .errors import SpecError
from .numerics import Formats, rounder_latency

# Version of the JSON layout below; loading refuses any other (docs/nodeconfig.md).
SCHEMA_VERSION = 2
MODES = ("icp", "ocp")
KINDS = ("conv", "fc")


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
    in_range: tuple[int, int]
    out_range: tuple[int, int]
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


ACT_STORAGES = ("chip", "dram")  # LayerSlice.act_storage


def map_pixels(flatten_from):
    """Pixels of the (C, H, W) map a fully connected layer flattens (``flatten_from``), 1 without
    one: its input arrives, and its input errors leave, as pixel streams of that map's channels
    (hw/memory/fc_store.py)."""
    return flatten_from[1] * flatten_from[2] if flatten_from is not None else 1


# The widest output vector a fully connected layer hands on to the next one as one stream word;
# a wider one travels as the pixels of a map (:func:`vector_map`). One word of 4,096 16-bit
# words passes Amaranth's value limit; 1,024 keeps the FIFOs such a word passes through out of
# distributed RAM's worst (a LUT per bit on Xilinx).
VECTOR_WORDS = 1024


# The widest EB window, in words, one stream word carries: a window of O x K x K error taps of
# 4,096 words and more passes Amaranth's value limit (VGG's conv4/conv5: 4,608), and goes a
# chunk of ``LayerSlice.eb_chunk`` output channels at a time instead.
WINDOW_WORDS = 4095


def eb_chunk(out_channels, kernel, widest=WINDOW_WORDS):
    """The output channels of a chunk of a layer's EB windows (``LayerSlice.eb_chunk``): 0 where a
    window of every channel's K x K taps is at most ``widest`` words, else as many as fit."""
    if out_channels * kernel * kernel <= widest:
        return 0
    return max(1, widest // (kernel * kernel))


def vector_map(words, widest=VECTOR_WORDS):
    """The (C, 1, N) map a fully connected layer's output vector of ``words`` outputs travels
    as (``LayerSlice.out_map``): N the fewest pixels of at most ``widest`` channels that
    divide it, output ``f`` being channel ``f // N`` of pixel ``f % N`` (the flatten's order,
    so the next layer takes it as a map it flattens); None where one word holds it."""
    if words <= widest:
        return None
    pixels = next(n for n in range(2, words + 1) if words % n == 0 and words // n <= widest)
    return (words // pixels, 1, pixels)


@dataclass(frozen=True)
class LayerSlice(ChannelRanges):
    layer: str
    position: int          # index of the layer in the network (tensor ids use it)
    kind: str              # "conv" or "fc"
    mode: str              # "icp" or "ocp"
    in_shape: tuple[int, int, int]   # full layer input (C, H, W)
    out_shape: tuple[int, int, int]  # full conv/fc output before the SFU (C, H, W)
    kernel: int
    stride: int
    padding: int
    bias: bool
    relu: bool
    pool: Pool | None
    in_range: tuple[int, int]
    out_range: tuple[int, int]
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
    remote_weights: tuple[WeightBlock, ...] = ()  # this slice's rows kept on other nodes
    flatten_from: tuple[int, int, int] | None = None  # fc: the (C, H, W) activations its input flattens
    out_map: tuple[int, int, int] | None = None  # fc: the (C, 1, N) map its outputs travel as (vector_map)
    eb_chunk: int = 0  # EB's windows a chunk of this many output channels at a time (0: whole; eb_chunk())
    fp_stale: int = 0
    cycles_per_sample: int = 0
    update_lanes: int = 1  # weight words the update rounds per cycle (update_chunk)
    # The update that does not stop the engines (docs/weight_versions.md): two copies of the
    # weights for the engines and one for the walk, two gradient sums; EB one sample behind.
    overlapped_update: bool = False
    # Where the samples in flight wait: "chip" keeps the Act-RAM and the SFU's mask FIFO in
    # block RAM; "dram" keeps them in the node's DRAM behind small on-chip staging FIFOs
    # (hw/memory/dram_fifo.py), for the first layers of VGG and AlexNet, whose activations
    # for the samples in flight outgrow a device's block RAM (docs/nodeconfig.md).
    act_storage: str = "chip"
    groups: int = 1        # grouped convolution: its channels in G groups (module docstring)

    @property
    def map_pixels(self):
        """:func:`map_pixels` of the slice's ``flatten_from``."""
        return map_pixels(self.flatten_from)

    def map_channels(self, inputs):
        """The channels of the map that ``inputs`` flattened inputs hold (inputs itself without a
        flatten): a slice's own (:attr:`in_channels`), those arriving from its predecessor."""
        return inputs // self.map_pixels

    @property
    def owns_biases(self):
        """The slice that finishes output channels keeps their biases (SFU, bias LGB)."""
        return self.bias and (self.mode == "ocp" or self.last)

    @property
    def sfu_channels(self):
        """Output channels the slice's SFU finishes: its own (OCP), every one of the layer
        (an ICP layer's last slice) or none."""
        return self.out_channels if self.mode == "ocp" else self.out_shape[0] if self.last else 0

    @property
    def sfu_range(self):
        """The output channels :attr:`sfu_channels` counts: the slice's own (OCP), every one of
        the layer (an ICP layer's last slice), or none (an empty range at 0)."""
        if self.mode == "ocp":
            return self.out_range
        return (0, self.sfu_channels)

    @property
    def biases_beyond_rows(self):
        """Whether the slice owns biases of channels its weight rows do not cover (the last slice
        of a grouped ICP layer): hw/engines/pg_engine.BiasTerms makes its bias beats from the
        errors of every channel, not its PG engine."""
        return self.owns_biases and self.sfu_channels != self.out_channels

    @property
    def bias_banks(self):
        """Banks of the slice's bias RAM and of its bias gradient beats: its engines' P, or with
        :attr:`biases_beyond_rows` P x G, so that the beats of every group's biases take no more
        cycles per pixel than PG's of one group's."""
        return self.fp.ces * (self.groups if self.biases_beyond_rows else 1)

    @property
    def sums_channels(self):
        """Output channels of the partial sums leaving the slice's FP path, from channel 0 up:
        under ICP those of every group up to its own (all of them ungrouped), under OCP its own."""
        return self.out_range[1] if self.mode == "icp" else self.out_channels

    @property
    def upstream_sums_channels(self):
        """ICP: output channels of the partial sums arriving from the layer's previous slice
        (:attr:`sums_channels` of it), 0 on the first: those of the slice's own group too unless
        its group starts here."""
        if self.mode != "icp" or self.first:
            return 0
        starts_group = self.in_range[0] % (self.in_shape[0] // self.groups) == 0
        return self.out_range[0] if starts_group else self.out_range[1]

    @property
    def eb_chunks(self):
        """The ranges of the slice's own output channels (counted from its first) whose EB windows
        travel apart (``eb_chunk``), or None where one window holds them all."""
        if not self.needs_eb or not self.eb_chunk or self.out_channels <= self.eb_chunk:
            return None
        return tuple((lo, min(lo + self.eb_chunk, self.out_channels))
                     for lo in range(0, self.out_channels, self.eb_chunk))

    @property
    def error_beat_channels(self):
        """Channels of a beat of the conv-output errors the slice's PG and EB take (and, ICP, hand
        back to the layer's previous slice): :attr:`sums_channels`, or a group of the engines' P
        where the output vector travels as a map (``out_map``: G beats a sample)."""
        return self.fp.ces if self.out_map is not None else self.sums_channels

    @property
    def upstream_error_beat_channels(self):
        """ICP: channels of a beat of the conv-output errors arriving from the layer's next slice
        for its previous one (:attr:`error_beat_channels` of that one), 0 on the first."""
        if self.out_map is not None and not self.first:
            return self.fp.ces
        return self.upstream_sums_channels

    @property
    def group_in_range(self):
        """The slice's input channels counted from its group's first: its columns in the layer's
        (OC, IC / G, K, K) weights (``in_range`` itself ungrouped)."""
        per_group = self.in_shape[0] // self.groups
        start = self.in_range[0] - self.in_range[0] % per_group
        return (self.in_range[0] - start, self.in_range[1] - start)

    @property
    def multipliers(self):
        return self.fp.multipliers + self.eb.multipliers + self.pg.multipliers

    @property
    def samples_held(self):
        """Whole samples of the slice's input its Act-RAM holds from FP until PG takes them."""
        return self.act_ram_words // (self.in_channels * self.in_shape[1] * self.in_shape[2])

    @property
    def local_out_channels(self):
        """Output channels whose weights the slice's own LPRAM keeps (the rest are hosted)."""
        return self.out_channels - sum(b.out_range[1] - b.out_range[0] for b in self.remote_weights)

    def update_cycles(self, weight_update_shift):
        """Cycles of the weight update's walk over the slice's local rows, during which its
        engines wait unless ``overlapped_update`` (hw/memory/grad_buffer.py): one cycle per chunk of ``update_lanes`` words
        (:func:`update_chunk`), padding skipped, then the read of the first address and the
        pipeline (the multipliers and the rounder). None for weights in DRAM, which the rows'
        pass updates as it streams them (hw/memory/dram_weights.py)."""
        local = self.local_out_channels
        if local == 0 or self.weights_offchip:
            return 0
        banks, tiles, kk = self.fp.ces, self.fp.tiles, self.kernel ** 2
        per_bank, per_word = update_chunk(self.update_lanes, banks, tiles * kk)
        groups, passes = math.ceil(local / banks), math.ceil(self.in_channels / tiles)
        last_banks, last_words = local - (groups - 1) * banks, (self.in_channels - (passes - 1) * tiles) * kk
        bank_chunks = (groups - 1) * math.ceil(banks / per_bank) + math.ceil(last_banks / per_bank)
        word_chunks = (passes - 1) * math.ceil(tiles * kk / per_word) + math.ceil(last_words / per_word)
        return bank_chunks * word_chunks + UPDATE_PIPELINE + rounder_latency(weight_update_shift)

    def bias_update_cycles(self, bias_update_shift):
        """The bias update's walk (one lane): a word per bias, then the pipeline; 0 without
        biases. Unless ``overlapped_update`` (where the walk has a copy of its own) the bias
        RAM's port B is shared by the walk's reads and writes, a cycle per address more."""
        if not self.owns_biases:
            return 0
        reads = 0 if self.overlapped_update else math.ceil(self.sfu_channels / self.bias_banks)
        return self.sfu_channels + reads + UPDATE_PIPELINE + rounder_latency(bias_update_shift)


# The update walk's cycles besides its chunks: the strobe, the first read, the operand
# register, the multipliers.
UPDATE_PIPELINE = 5
# From an overlapped walk's last word to the next walk's strobe (hw.memory.update_gate.
# OverlappedGate): the done count, the swap's condition and pulse, the swap count, the next
# walk's condition and strobe, each a register.
OVERLAPPED_SWAP_CYCLES = 6


def update_chunk(lanes, banks, words):
    """(banks, words) of one chunk of the weight update (hw/memory/grad_buffer.py): ``lanes``
    consecutive words of one bank row below a row's ``words``, or whole rows of ``lanes //
    words`` banks; ValueError for another count (:func:`update_lane_counts` lists them)."""
    if lanes not in update_lane_counts(banks, words):
        raise ValueError(f"update_lanes = {lanes} is not one of {update_lane_counts(banks, words)} for "
                         f"rows of {banks} banks x {words} words")
    return (lanes // words, words) if lanes >= words else (1, lanes)


def update_lane_counts(banks, words):
    """The lane counts a weight update over ``banks`` x ``words`` rows can have."""
    return sorted(set(range(1, words + 1)) | {n * words for n in range(1, banks + 1)})


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
    slices: tuple[LayerSlice, ...]
    hosted: tuple[WeightBlock, ...]  # rows this node stores for others (BPRAM)
    formats: Formats
    training: Training
    estimate: Resources
    cycles_per_sample: int
    link_bytes_forward: int   # bytes per sample sent to the successor
    link_bytes_backward: int  # bytes per sample sent to the predecessor
    chain_length: int = 0     # nodes in the mapping; the last one applies the loss
    relays: tuple[WeightBlock, ...] = ()  # blocks whose rows and gradients pass through this node

    @property
    def update_cycles(self):
        """The longest update walk on the node: its slices' weights and biases (and the BGBs' of
        the rows it hosts) run side by side, and no sample enters while one is walking."""
        f = self.formats
        return max([s.update_cycles(f.weight_update_shift) for s in self.slices]
                   + [s.bias_update_cycles(f.bias_update_shift) for s in self.slices]
                   + [b.owner_slice.update_cycles(f.weight_update_shift) for b in self.hosted
                      if b.owner_slice is not None], default=0)

    @property
    def dram_bits_per_cycle(self):
        """The bits the node's DRAM moves per node cycle, reads and writes together, as the
        mapping prices its traffic (the device's ``dram_gbps`` at ``clock_mhz``; a simulated
        DRAM is given the same, hw/memory/dram_model.simulated_drams); None without DRAM."""
        gbps = get_device(self.device).dram_gbps
        return Fraction(gbps * 1000 / self.clock_mhz).limit_denominator(1 << 10) if gbps else None

    @property
    def overlapped_update(self):
        """The node's slices update without stopping their engines (LayerSlice.overlapped_update)."""
        return any(s.overlapped_update for s in self.slices)

    @property
    def cycles_per_sample_with_updates(self):
        """``cycles_per_sample`` plus the node's update walk once per mini-batch. An overlapped
        walk stops the engines only for the part of it longer than a sample period (EB's
        sample on the old weights), but the walks follow one another with the swap of the
        copies between them (OVERLAPPED_SWAP_CYCLES): a mini-batch takes no less than that."""
        walk, batch, engines = self.update_cycles, self.training.batch, self.cycles_per_sample
        if not self.overlapped_update:
            return engines + walk / batch
        return max(engines + max(0, walk - engines) / batch, (walk + OVERLAPPED_SWAP_CYCLES) / batch)

    def to_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class Mapping:
    network: str           # zoo name or spec file the mapping was made from
    cluster: str           # cluster spec string or file
    nodes: tuple[NodeConfig, ...]  # in chain order
    summary: dict = field(default_factory=dict)  # performance-model figures

    def __post_init__(self):
        # Every node knows the chain's length (the last node applies the loss).
        object.__setattr__(self, "nodes", tuple(replace(n, chain_length=len(self.nodes))
                                                for n in self.nodes))

    def node(self, index):
        if not 0 <= index < len(self.nodes):
            raise SpecError(f"node {index} is not in the mapping: it has nodes 0..{len(self.nodes) - 1}")
        return self.nodes[index]

    def fp_stale(self):
        """{layer: fp_stale} of every weighted layer, as its slices carry it (golden.train's fp_stale)."""
        stale = {}
        for node in self.nodes:
            for s in node.slices:
                if stale.setdefault(s.layer, s.fp_stale) != s.fp_stale:
                    raise SpecError(f"layer {s.layer}: slices disagree on fp_stale")
        return stale

    def eb_stale(self):
        """golden.train's eb_stale: 1 where the update does not stop the engines (every slice's
        ``overlapped_update``, docs/weight_versions.md), else 0."""
        modes = {s.overlapped_update for node in self.nodes for s in node.slices}
        if len(modes) > 1:
            raise SpecError("slices disagree on overlapped_update")
        return int(True in modes)

    def to_json(self, indent=1):
        return json.dumps({"schema_version": SCHEMA_VERSION, "network": self.network, "cluster": self.cluster,
                           "nodes": [n.to_dict() for n in self.nodes], "summary": self.summary},
                          indent=indent)

    @classmethod
    def from_json(cls, text):
        """The Mapping a JSON text describes, checked against the contract (docs/nodeconfig.md);
        SpecError naming the first field that breaks it."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as error:
            raise SpecError(f"not valid JSON ({error})") from None
        if not isinstance(d, dict):
            raise SpecError(f"expected a JSON object with a mapping's fields, got {_show(d)}")
        if "nodes" not in d and "layers" in d:
            raise SpecError("this is a network description, not a mapping (python -m mapping "
                            "--for-hardware writes one)")
        version = d.pop("schema_version", None)
        if version != SCHEMA_VERSION:
            raise SpecError(f"schema_version: {_show(version)}, but this version of the project reads "
                            f"mappings of schema_version {SCHEMA_VERSION} (map the network again with "
                            f"python -m mapping)")
        mapping = _parse(cls, d, "")
        check_mapping(mapping)
        return mapping


def _show(value):
    """``value`` as JSON, cut short for a one-line message."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse(hint, value, where):
    """``value`` (parsed JSON) as the type ``hint`` of a contract field at path ``where``."""
    if get_origin(hint) in (UnionType, Union):
        if value is None and type(None) in get_args(hint):
            return None
        (hint,) = [a for a in get_args(hint) if a is not type(None)]
    if is_dataclass(hint):
        return _parse_fields(hint, value, where)
    if get_origin(hint) is tuple:
        args = get_args(hint)
        items = [args[0]] * len(value) if isinstance(value, list) and args[1:] == (...,) else args
        if not isinstance(value, list) or len(items) != len(value):
            size = "a list" if args[1:] == (...,) else f"a list of {len(args)}"
            raise SpecError(f"{where}: expected {size}, got {_show(value)}")
        return tuple(_parse(h, v, f"{where}[{i}]") for i, (h, v) in enumerate(zip(items, value)))
    name, ok = _SCALARS[hint]
    if not ok(value):
        raise SpecError(f"{where}: expected {name}, got {_show(value)}")
    return value


_SCALARS = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a finite number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)),
    str: ("a string", lambda v: isinstance(v, str)),
    dict: ("an object", lambda v: isinstance(v, dict)),
}


def _parse_fields(cls, value, where):
    if not isinstance(value, dict):
        raise SpecError(f"{where or 'mapping'}: expected an object, got {_show(value)}")
    at = f"{where}." if where else ""
    hints = get_type_hints(cls)
    unknown = [key for key in value if key not in hints]
    if unknown:
        raise SpecError(f"{at}{unknown[0]}: not a field of {cls.__name__}")
    missing = [f.name for f in fields(cls)
               if f.name not in value and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise SpecError(f"{at}{missing[0]}: missing")
    try:
        return cls(**{key: _parse(hints[key], v, f"{at}{key}") for key, v in value.items()})
    except SpecError:
        raise
    except ValueError as error:  # a dataclass's own check (Formats), which names the dataclass
        raise SpecError(f"{where}: {str(error).removeprefix(where.rpartition('.')[2] + ': ')}") from None


def check_mapping(mapping):
    """Refuse (SpecError naming the field) a Mapping whose fields disagree with each other or
    name what does not exist: devices, families, modes, layer geometry, the channel ranges
    of each layer's slices along the chain, weight blocks (docs/nodeconfig.md)."""
    layers = {}  # layer name -> (path, slice) of its first slice
    update_mode = None  # (path, slice) of the chain's first slice
    for i, node in enumerate(mapping.nodes):
        where = f"nodes[{i}]"
        if node.index != i:
            raise SpecError(f"{where}.index: {node.index}, but the node is number {i} of the chain")
        try:
            device = get_device(node.device)
        except SpecError as error:
            raise SpecError(f"{where}.device: {error}") from None
        if node.family not in FAMILIES:
            raise SpecError(f"{where}.family: '{node.family}' is not a device family "
                            f"(known: {', '.join(FAMILIES)})")
        if node.family != device.family:
            raise SpecError(f"{where}.family: '{node.family}', but {device.name} is '{device.family}'")
        if not node.clock_mhz > 0:
            raise SpecError(f"{where}.clock_mhz: {node.clock_mhz} must be positive")
        if node.training.batch < 1 or not node.training.lr > 0:
            raise SpecError(f"{where}.training: batch {node.training.batch} must be at least 1 and lr "
                            f"{node.training.lr} positive")
        for j, s in enumerate(node.slices):
            check_slice(s, f"{where}.slices[{j}]")
            if s.act_storage == "dram" and device.dram_gb == 0:
                raise SpecError(f"{where}.slices[{j}].act_storage: \"dram\", but {device.name} has no DRAM")
            first_path, first = update_mode = update_mode or (f"{where}.slices[{j}]", s)
            if s.overlapped_update != first.overlapped_update:  # one weight-version rule per chain
                raise SpecError(f"{where}.slices[{j}].overlapped_update: {_show(s.overlapped_update)}, but "
                                f"{first_path} has {_show(first.overlapped_update)}: the update stops the "
                                f"engines everywhere or nowhere")
            path, seen = layers.setdefault(s.layer, (f"{where}.slices[{j}]", s))
            for key in _LAYER_FIELDS:
                if getattr(s, key) != getattr(seen, key):
                    raise SpecError(f"{where}.slices[{j}].{key}: {_show(_json(getattr(s, key)))}, but "
                                    f"{path} of layer '{s.layer}' has {_show(_json(getattr(seen, key)))}")
        for key in ("hosted", "relays"):
            for j, block in enumerate(getattr(node, key)):
                _check_block(block, f"{where}.{key}[{j}]", len(mapping.nodes), i if key == "hosted" else None)
        for j, s in enumerate(node.slices):
            for k, block in enumerate(s.remote_weights):
                _check_block(block, f"{where}.slices[{j}].remote_weights[{k}]", len(mapping.nodes), None)
                if block.owner != i:
                    raise SpecError(f"{where}.slices[{j}].remote_weights[{k}].owner: {block.owner}, but "
                                    f"the slice is on node {i}")
    _check_coverage(mapping)
    _check_layer_chain(layers)
    _check_act_rams(mapping)


# What every slice of one layer agrees on.
_LAYER_FIELDS = ("position", "kind", "mode", "in_shape", "out_shape", "kernel", "stride", "padding", "bias",
                 "relu", "pool", "needs_eb", "flatten_from", "out_map", "eb_chunk", "groups")


def _json(value):
    return asdict(value) if is_dataclass(value) else value


def conv_output(size, kernel, stride, padding):
    """Output length of a convolution or pooling window walk over ``size`` inputs."""
    return (size + 2 * padding - kernel) // stride + 1


def sfu_shape(s):
    """The (C, H, W) a slice's layer hands on after its SFU (ReLU, max-pool): its ``out_map``
    where its output vector travels as a map."""
    if s.out_map is not None:
        return s.out_map
    c, h, w = s.out_shape
    if s.pool is None:
        return s.out_shape
    return (c, *(conv_output(n, s.pool.kernel, s.pool.stride, s.pool.padding) for n in (h, w)))


def check_slice(s, where, cut=False):
    """Refuse a LayerSlice whose fields disagree with each other (SpecError naming the field);
    ``cut``: an owner slice cut to the output channels of a WeightBlock."""
    if s.mode not in MODES:
        raise SpecError(f"{where}.mode: '{s.mode}' is not one of {', '.join(MODES)}")
    if s.kind not in KINDS:
        raise SpecError(f"{where}.kind: '{s.kind}' is not one of {', '.join(KINDS)}")
    for key in ("in_shape", "out_shape"):
        if min(getattr(s, key)) < 1:
            raise SpecError(f"{where}.{key}: {list(getattr(s, key))} must be positive")
    if s.kernel < 1 or s.stride < 1 or s.padding < 0:
        raise SpecError(f"{where}: kernel {s.kernel} and stride {s.stride} must be at least 1, padding "
                        f"{s.padding} at least 0")
    c, h, w = s.in_shape
    if s.kind == "fc" and (s.in_shape[1:] != (1, 1) or s.out_shape[1:] != (1, 1) or
                           (s.kernel, s.stride, s.padding) != (1, 1, 0)):
        raise SpecError(f"{where}: a fully connected slice is a 1x1 convolution on a 1x1 map, got in_shape "
                        f"{list(s.in_shape)}, out_shape {list(s.out_shape)}, kernel {s.kernel}, stride "
                        f"{s.stride}, padding {s.padding}")
    pixels = tuple(conv_output(n, s.kernel, s.stride, s.padding) for n in (h, w))
    if s.out_shape[1:] != pixels:
        raise SpecError(f"{where}: in_shape {list(s.in_shape)} with kernel {s.kernel}, stride {s.stride}, "
                        f"padding {s.padding} gives {pixels[0]} x {pixels[1]} pixels, but out_shape is "
                        f"{list(s.out_shape)}")
    for key, full in (("in_range", c), ("out_range", s.out_shape[0])):
        lo, hi = getattr(s, key)
        if not 0 <= lo < hi <= full:
            raise SpecError(f"{where}.{key}: {[lo, hi]} is not a channel range within 0..{full}")
    if s.groups < 1 or c % s.groups or s.out_shape[0] % s.groups or (s.groups > 1 and s.kind != "conv"):
        raise SpecError(f"{where}.groups: {s.groups} does not divide the conv layer's {c} input and "
                        f"{s.out_shape[0]} output channels")
    owned, full = ("out_range", s.out_shape[0]) if s.mode == "icp" else ("in_range", c)
    units, per = ("in_range", c // s.groups) if s.mode == "icp" else ("out_range", s.out_shape[0] // s.groups)
    group = getattr(s, units)[0] // per
    if s.groups > 1 and (getattr(s, units)[1] - 1) // per != group:
        raise SpecError(f"{where}.{units}: {list(getattr(s, units))} crosses a boundary of the {s.groups} "
                        f"groups of {per} channels: a slice lies in one group")
    partner = (group * full // s.groups, (group + 1) * full // s.groups)
    if not cut and getattr(s, owned) != partner:
        raise SpecError(f"{where}.{owned}: {list(getattr(s, owned))}, but a slice in mode '{s.mode}' covers "
                        + (f"all {full} channels there" if s.groups == 1 else
                           f"its group's channels there, {list(partner)}"))
    for role in ("fp", "eb", "pg"):
        engine = getattr(s, role)
        least = 0 if role == "eb" and not s.needs_eb else 1  # the first weighted layer has no EB
        if engine.kernel != s.kernel or min(engine.ces, engine.tiles) < least:
            raise SpecError(f"{where}.{role}: {engine.ces} x {engine.tiles} tiles of {engine.kernel} x "
                            f"{engine.kernel}, but the slice needs at least {least} x {least} tiles of "
                            f"{s.kernel} x {s.kernel}")
    try:
        update_chunk(s.update_lanes, s.fp.ces, s.fp.tiles * s.kernel ** 2)
    except ValueError as error:
        raise SpecError(f"{where}.{error}") from None
    for key in ("act_ram_words", "line_buffer_words", "pab_words", "lgb_words", "fp_stale", "cycles_per_sample"):
        if getattr(s, key) < 0:
            raise SpecError(f"{where}.{key}: {getattr(s, key)} must not be negative")
    if s.act_storage not in ACT_STORAGES:
        raise SpecError(f"{where}.act_storage: {s.act_storage!r} is not one of {', '.join(ACT_STORAGES)}")
    if s.flatten_from is not None and math.prod(s.flatten_from) != c:
        raise SpecError(f"{where}.flatten_from: {list(s.flatten_from)} flattens to {math.prod(s.flatten_from)} "
                        f"values, but in_shape has {c} input channels")
    if s.flatten_from is not None and (s.mode != "icp" or any(end % s.map_pixels for end in s.in_range)):
        raise SpecError(f"{where}: a fully connected layer after a flatten is an ICP layer cut between channels "
                        f"of the {'x'.join(map(str, s.flatten_from))} map (in_range ends multiples of "
                        f"{s.map_pixels}), not {s.mode.upper()} {list(s.in_range)}")
    if s.out_map is not None and (s.kind != "fc" or s.mode != "icp" or s.pool is not None or s.out_map[1] != 1
                                  or math.prod(s.out_map) != s.out_shape[0]):
        raise SpecError(f"{where}.out_map: {list(s.out_map)}, but only an ICP fully connected layer without a "
                        f"pool hands on its {s.out_shape[0]} outputs as a (C, 1, N) map of them ({s.kind}, "
                        f"{s.mode.upper()}{', pooled' if s.pool is not None else ''})")
    if s.eb_chunk < 0 or (s.eb_chunk and s.out_map is not None):
        raise SpecError(f"{where}.eb_chunk: {s.eb_chunk} must not be negative, and 0 where the output vector "
                        f"travels as a map (its EB windows come a group at a time)")
    if s.act_ram_words % s.in_channels or s.act_ram_words < s.in_channels:  # whole input pixels
        raise SpecError(f"{where}.act_ram_words: {s.act_ram_words} is not a positive multiple of the "
                        f"slice's {s.in_channels} input channels")
    if s.pool is not None and (s.pool.kernel < 1 or s.pool.stride < 1 or s.pool.padding < 0):
        raise SpecError(f"{where}.pool: kernel {s.pool.kernel} and stride {s.pool.stride} must be at least 1, "
                        f"padding {s.pool.padding} at least 0")


def _check_block(block, where, nodes, on):
    for key in ("owner", "host"):
        if not 0 <= getattr(block, key) < nodes:
            raise SpecError(f"{where}.{key}: {getattr(block, key)} is not a node of the mapping (0..{nodes - 1})")
    if on is not None and block.host != on:
        raise SpecError(f"{where}.host: {block.host}, but the block is hosted on node {on}")
    cut = block.owner_slice
    if cut is None:
        raise SpecError(f"{where}.owner_slice: missing")
    check_slice(cut, f"{where}.owner_slice", cut=True)
    if (cut.layer, cut.in_range, cut.out_range) != (block.layer, block.in_range, block.out_range) or \
            block.words != cut.weight_words:
        raise SpecError(f"{where}: layer '{block.layer}' rows {list(block.out_range)} of inputs "
                        f"{list(block.in_range)}, {block.words} words, but its owner_slice is layer "
                        f"'{cut.layer}' rows {list(cut.out_range)} of inputs {list(cut.in_range)}, "
                        f"{cut.weight_words} words")


def _check_coverage(mapping):
    """Each layer's slices, in chain order, own consecutive channel ranges from the first to
    the last channel, the first and last of them so marked."""
    owned = {}
    for i, node in enumerate(mapping.nodes):
        for j, s in enumerate(node.slices):
            owned.setdefault(s.layer, []).append((f"nodes[{i}].slices[{j}]", s))
    for layer, run in owned.items():
        s = run[0][1]
        key, full = ("in_range", s.in_shape[0]) if s.mode == "icp" else ("out_range", s.out_shape[0])
        end = 0
        for n, (where, s) in enumerate(run):
            lo, hi = getattr(s, key)
            if lo != end:
                raise SpecError(f"{where}.{key}: {[lo, hi]}, but the slices of layer '{layer}' before it "
                                f"in the chain end at channel {end}")
            if (s.first, s.last) != (n == 0, n == len(run) - 1):
                raise SpecError(f"{where}: first {str(s.first).lower()} and last {str(s.last).lower()}, but "
                                f"it is slice {n + 1} of the {len(run)} of layer '{layer}' in chain order")
            end = hi
        if end != full:
            raise SpecError(f"{run[-1][0]}.{key}: the slices of layer '{layer}' end at channel {end} of "
                            f"{full}")


def _check_act_rams(mapping):
    """Each Act-RAM holds whole samples of its slice's input (checked once the shapes are),
    at least the slice's fp_stale of them (hw/memory/update_gate.py lets FP run that far)."""
    for i, node in enumerate(mapping.nodes):
        for j, s in enumerate(node.slices):
            sample = s.in_channels * s.in_shape[1] * s.in_shape[2]
            if s.act_ram_words % sample or s.act_ram_words < max(1, s.fp_stale) * sample:
                raise SpecError(f"nodes[{i}].slices[{j}].act_ram_words: {s.act_ram_words} is not a multiple "
                                f"of the slice's input ({s.in_channels} x {s.in_shape[1]} x {s.in_shape[2]} = "
                                f"{sample} words) of at least max(1, fp_stale = {s.fp_stale}) samples")


def _check_layer_chain(layers):
    """Each layer takes what the layer before it hands on after its SFU."""
    ordered = sorted(layers.values(), key=lambda item: item[1].position)
    for (_, before), (where, s) in zip(ordered, ordered[1:]):
        given = sfu_shape(before)
        expected = (math.prod(given), 1, 1) if s.flatten_from is not None else given
        if s.flatten_from is not None and s.flatten_from != given:
            raise SpecError(f"{where}.flatten_from: {list(s.flatten_from)}, but layer '{before.layer}' "
                            f"hands on {list(given)}")
        if s.in_shape != expected:
            raise SpecError(f"{where}.in_shape: {list(s.in_shape)}, but layer '{before.layer}' hands on "
                            f"{list(given)}{' (flattened)' if s.flatten_from is not None else ''}")
