"""The memories the hardware generator builds for a node, as width x depth.

This mirrors hw/ memory by memory (sim/test_memories.py checks it against every
memory of the elaborated hardware), and every hardware memory carries the
``ram_style`` that :func:`mapping.resources.ram_style` gives its depth, so the
block RAM count below is what Yosys produces. It covers the slices hw/ builds:
engines of one shape (folded or not), weights on chip or, fully connected at
mini-batch 1, in DRAM (:func:`dram_weights_problem`), fully connected rows kept
on other nodes (``mapper.GENERATOR_OPTIONS``; :func:`remote_rows_problem`).
The generator's mappings (``buildable_balance``) are planned with these memories
(``balance.ExactMemory``, ``Partitioner._memory``), so each of their nodes fits its
block RAM as built; the paper-scale mappings with the coarser model of
mapping/balance.py, which also covers what hw/ does not build (weights in DRAM at
mini-batch above 1, convolution rows kept on another node).
"""

from dataclasses import dataclass, replace
import math

from .nodeconfig import sfu_shape
from .numerics import ACC_BITS, WORD_BITS, rounder_latency
from .resources import MemoryCost, bram_blocks, lutram_luts, register_bits

# Word-granular writes (LPRAM, bias RAM) give every 16-bit word its own 18-bit
# column of a block RAM: two 9-bit byte enables.
GRANULAR_WORD_BITS = 18
LABEL_FIFO_DEPTH = 8
PAB_MIN_DEPTH = 3  # hw/memory/fifo.py passes one beat per cycle from depth 3
LABEL_BITS = 16
RELAY_DEPTH = PAB_MIN_DEPTH  # a relayed weight or gradient stream: one beat per cycle


@dataclass(frozen=True)
class Memory:
    name: str
    width: int       # bits
    depth: int       # words
    dual_read: bool = False    # two ports read whole words (true dual port)
    word_writes: bool = False  # written one 16-bit word at a time

    def blocks(self, family):
        width = self.width // WORD_BITS * GRANULAR_WORD_BITS if self.word_writes else self.width
        return bram_blocks(width, self.depth, family, self.dual_read)

    def lutram_luts(self, family):
        """LUTs of the memory if it is distributed RAM: one copy per read port."""
        return lutram_luts(self.width, self.depth, family) * (2 if self.dual_read else 1)


def buildable(s):
    """Whether hw/ generates slice ``s`` (see hw/slice_unit.check_buildable)."""
    return (s.pg == s.fp and (not s.needs_eb or (s.eb.ces, s.eb.tiles) == (s.fp.tiles, s.fp.ces))
            and s.fp.tiles <= s.in_channels
            and remote_rows_problem(s.remote_weights, s) is None)


def groups_problem(groups, mode):
    """Why the generator cannot build a ``mode`` convolution of ``groups`` groups, or None
    (docs/design.md, "Grouped convolution"): it builds grouped ICP layers, not OCP ones (an
    image's few input channels, which AlexNet and VGG do not group)."""
    if groups == 1 or mode == "icp":
        return None
    return (f"grouped convolution (groups={groups}) under OCP is not built by the hardware generator "
            f"(python -m mapping maps it without --for-hardware)")


def group_lanes_problem(s):
    """Why the generator cannot build grouped slice ``s``'s partial sums, or None: their beats of P
    lanes must not straddle two groups (P divides OC / G), as the SFU takes them."""
    if s.groups == 1 or (s.out_shape[0] // s.groups) % s.fp.ces == 0:
        return None
    return (f"its engines' {s.fp.ces} partial-sum lanes do not divide a group's {s.out_shape[0] // s.groups} "
            f"output channels")


def pool_problem(pool, height, width):
    """Why the SFU (hw/node/sfu.py) cannot max-pool a ``height`` x ``width`` conv output with
    ``pool``, or None: it pools windows inside the map (no padding) that tile it or overlap
    (kernel >= stride), not windows with gaps between them."""
    if pool is None:
        return None
    if pool.padding != 0:
        return f"max-pool padding {pool.padding} is not supported by the generator's SFU (only padding 0)"
    if pool.kernel < pool.stride:
        return (f"max-pool stride {pool.stride} is not supported with kernel {pool.kernel} by the "
                f"generator's SFU (only stride <= kernel)")
    if pool.kernel > min(height, width):
        return f"max-pool kernel {pool.kernel} is larger than the {height} x {width} conv output"
    return None


# Amaranth's netlist numbers a value's bits below 2**16 (a 4,096-channel stream word of 16-bit
# words fails its elaboration with an assertion); a slice's widest values are its memories'
# rows and stream words (the FIFOs below carry the streams) and PG's beat of P*b*K*K products.
WIDEST_VALUE_BITS = (1 << 16) - 1
# What the generator streams in chunks where one word would pass that limit.
CHUNKED = "the generator streams only fully connected outputs and EB windows in chunks"


def pixel_word_problem(in_channels, out_channels):
    """Why hw/ cannot carry a layer's pixels (``in_channels`` activations forward,
    ``out_channels`` errors backward) in one stream word each, as it does, or None: a word of
    4,096 or more 16-bit channels passes Amaranth's value limit, whatever the cut (an ICP
    layer's first slice takes the whole input, every slice of it the whole output's errors)."""
    channels = max(in_channels, out_channels)
    if channels * WORD_BITS <= WIDEST_VALUE_BITS:
        return None
    what = "input" if in_channels >= out_channels else "output"
    return (f"its {what} of {channels:,} channels would travel as one stream word of {channels * WORD_BITS:,} "
            f"bits, beyond the {WIDEST_VALUE_BITS:,} bits of an Amaranth value ({CHUNKED})")


def widest_value(s, grad_bits=ACC_BITS):
    """(bits, what) of the widest value hw/ would build for slice ``s``."""
    words = s.fp.ces * s.fp.tiles * s.kernel * s.kernel
    return max([(m.width, m.name) for m in slice_memories(s, grad_bits)]
               + [(words * 2 * WORD_BITS, "gradient beat")])


def dram_weights_problem(s, batch):
    """Why hw/ cannot keep slice ``s``'s weights in DRAM at mini-batch ``batch``, or None (none
    kept there). It builds fully connected slices at mini-batch 1, the update stopping the
    engines, every row of the slice in DRAM (hw/memory/dram_weights.py)."""
    if not s.weights_offchip:
        return None
    if s.kind != "fc":
        return f"the {s.kind} slice keeps weights in DRAM; the generator keeps only fully connected ones there"
    if batch != 1:
        return (f"the slice keeps weights in DRAM at mini-batch {batch}; the generator builds that at "
                f"mini-batch 1 (the update of B > 1 samples needs their stored vectors, not built yet)")
    if s.overlapped_update:
        return "the slice keeps weights in DRAM with the overlapped update, which the generator does not combine"
    if s.remote_weights:
        return "the slice keeps weights in DRAM and rows on other nodes; the generator builds one or the other"
    return None


def bias_steps(s):
    """(groups, passes): the bias beats per output pixel of slice ``s``, which owns biases, in
    that order: the PG engine's steps, or hw/engines/pg_engine.BiasTerms' one per row of
    ``s.bias_banks`` channels (``LayerSlice.biases_beyond_rows``)."""
    if s.biases_beyond_rows:
        return -(-s.sfu_channels // s.bias_banks), 1
    return -(-s.out_channels // s.fp.ces), -(-s.in_channels // s.fp.tiles)


def pg_error_range(s):
    """The conv-output errors (a range of :attr:`LayerSlice.sums_channels`) PG's branch takes:
    its own channels, or every one where they make its bias beats (``LayerSlice.biases_beyond_rows``)."""
    if s.biases_beyond_rows or s.out_map is not None:  # every channel, or a group a beat
        return (0, s.error_beat_channels)
    return (s.sums_channels - s.out_channels, s.sums_channels)


def fc_weights_queue(s):
    """(name, width in bits, depth in beats, beats per sample) of the DRAM queue that holds
    slice ``s``'s weights (``weights_offchip``): its LPRAM rows, G*v addresses of P*b*K*K
    words, each read and written once per sample (hw/memory/dram_weights.py)."""
    groups, passes = -(-s.out_channels // s.fp.ces), -(-s.in_channels // s.fp.tiles)
    rows = groups * passes
    return "fc_weights", s.fp.ces * s.fp.tiles * s.kernel * s.kernel * WORD_BITS, rows, rows


def generator_problem(s, grad_bits=ACC_BITS, batch=1):
    """Why hw/ cannot generate slice ``s`` at mini-batch ``batch``, or None: weights in DRAM it
    does not build (:func:`dram_weights_problem`), remote rows it does not
    stream, a max-pool its SFU does not build, engines of another shape (:func:`buildable`),
    a value wider than Amaranth's (:data:`WIDEST_VALUE_BITS`)."""
    problem = dram_weights_problem(s, batch)
    if problem:
        return f"layer '{s.layer}': {problem}"
    problem = remote_rows_problem(s.remote_weights, s)
    if problem:
        return problem
    problem = (groups_problem(s.groups, s.mode) or group_lanes_problem(s)
               or pool_problem(s.pool, *s.out_shape[1:]))
    if problem:
        return f"layer '{s.layer}': {problem}"
    if not buildable(s):
        return (f"layer '{s.layer}' ({s.mode} slice, input channels {s.in_range[0]}..{s.in_range[1] - 1}): "
                f"engines FP {s.fp.ces} x {s.fp.tiles}, EB {s.eb.ces} x {s.eb.tiles}, PG {s.pg.ces} x "
                f"{s.pg.tiles} tiles; the generator builds FP = PG = P x b and EB = b x P with b at most "
                f"{s.in_channels}")
    bits, what = widest_value(s, grad_bits)
    if bits > WIDEST_VALUE_BITS:
        return (f"layer '{s.layer}' ({s.mode} slice, input channels {s.in_range[0]}..{s.in_range[1] - 1}): its "
                f"{what} would be {bits:,} bits wide, beyond the {WIDEST_VALUE_BITS:,} bits of an Amaranth value "
                f"({CHUNKED})")
    return None


def remote_rows_problem(blocks, owner=None):
    """Why hw/ cannot stream the weight rows ``blocks`` of one owner slice from their hosts
    (hw/balance/weight_stream.py), or None. The generator streams fully connected rows only (a
    convolution row used from another node would need a weight-stationary engine), each
    host's rows one range (through the nodes in between: ``NodeConfig.relays``), the
    ranges together the top of the slice's output channels, each starting at an engine
    group; the last two are checked where the ``owner`` slice is known."""
    if not blocks:
        return None
    blocks = sorted(blocks, key=lambda b: b.out_range)
    first, cut = blocks[0], blocks[0].owner_slice
    where = f"layer '{cut.layer}' on node {first.owner}"
    hint = "; map with mapper.GENERATOR_OPTIONS (python -m mapping --for-hardware)"
    if cut.kind != "fc":
        return (f"{where} keeps weight rows on node {first.host}: the generator streams only fully "
                f"connected rows from other nodes (a convolution row would need a weight-stationary "
                f"engine){hint}")
    if any(a.out_range[1] != b.out_range[0] for a, b in zip(blocks, blocks[1:])):
        return f"{where}: its remote rows {[b.out_range for b in blocks]} are not one range{hint}"
    ranges = host_ranges(blocks)
    if len(ranges) != len({b.host for b in blocks}):
        return (f"{where}: its remote rows {[(b.out_range, b.host) for b in blocks]} are not one range "
                f"per host{hint}")
    if owner is not None:
        lo, hi = owner.out_range
        cuts = [r[0] for r in ranges]
        if ranges[-1][1] != hi or any((c - lo) % owner.fp.ces for c in cuts):
            return (f"{where}: its remote rows {cuts[0]}..{ranges[-1][1] - 1} (hosts from rows {cuts}) "
                    f"are not whole groups of {owner.fp.ces} engine rows at the top of its output "
                    f"channels {lo}..{hi - 1}{hint}")
    return None


def host_ranges(blocks):
    """(first row, end row, host) of each run of ``blocks`` (in row order) on one host."""
    runs = []
    for b in sorted(blocks, key=lambda b: b.out_range):
        if runs and runs[-1][2] == b.host and runs[-1][1] == b.out_range[0]:
            runs[-1] = (runs[-1][0], b.out_range[1], b.host)
        else:
            runs.append((*b.out_range, b.host))
    return runs


def merge_blocks(blocks):
    """The WeightBlocks of one owner slice on one host, one range of rows (as
    remote_rows_problem admits), as one block whose owner_slice is cut to all of them."""
    blocks = sorted(blocks, key=lambda b: b.out_range)
    rows = (blocks[0].out_range[0], blocks[-1].out_range[1])
    return replace(blocks[0], out_range=rows, words=sum(b.words for b in blocks),
                   owner_slice=replace(blocks[0].owner_slice, out_range=rows))


def owner_groups(blocks):
    """WeightBlocks grouped per owner slice and host, in chain order."""
    groups = {}
    for block in blocks:
        groups.setdefault((block.owner, block.layer, block.host), []).append(block)
    return [group for _, group in sorted(groups.items())]


def hosted_groups(config):
    """The blocks a NodeConfig hosts, grouped per owner slice, in chain order."""
    return owner_groups(config.hosted)


def relayed_groups(config):
    """The blocks whose streams pass through a NodeConfig, grouped per owner slice and host."""
    return owner_groups(config.relays)


def remote_groups(s):
    """The blocks of slice ``s``'s remote rows, grouped per host, in row order."""
    return sorted(owner_groups(s.remote_weights), key=lambda g: min(b.out_range for b in g))


def balance_stream_bits(cut):
    """Bits of one beat of each stream between a host and the owner of rows ``cut`` (the
    owner's slice cut to them): ``fp``/``eb`` carry one weight address (P rows of
    b x K x K words), ``grad`` an address and the P x b x K x K exact 32-bit products
    (hw/bpram_host.balance_streams); no ``eb`` for a layer without EB."""
    ces, row_words = cut.fp.ces, cut.fp.tiles * cut.kernel * cut.kernel
    rows = math.ceil(cut.out_channels / ces) * passes(cut)
    beat = ces * row_words * WORD_BITS
    bits = {"fp": beat, "eb": beat, "grad": (rows - 1).bit_length() + ces * row_words * 2 * WORD_BITS}
    if not cut.needs_eb:
        del bits["eb"]
    return bits


def local_rows(s):
    """Output channels of slice ``s`` whose weights its own LPRAM holds."""
    if not s.remote_weights:
        return s.out_channels
    return min(b.out_range[0] for b in s.remote_weights) - s.out_range[0]


def passes(s):
    """Passes per window of a slice's engines: its input channels folded over its tiles."""
    return math.ceil(s.in_channels / s.fp.tiles)


def engine_cycles_per_window(s):
    """Cycles an engine spends on one window: output-channel groups x passes."""
    return math.ceil(s.out_channels / s.fp.ces) * passes(s)


def _fifo(name, width, depth):
    return [Memory(name, width, depth)]


# A queue kept in the node's DRAM (LayerSlice.act_storage "dram", hw/memory/dram_fifo.py)
# keeps on chip only a FIFO of beats on their way to the DRAM and one of beats read ahead
# from it: enough to cover the DRAM's read latency at one beat per cycle.
DRAM_STAGING_BEATS = 32


def _queue(name, width, depth, storage):
    """The on-chip memories of a queue of ``depth`` beats of ``width`` bits kept in ``storage``."""
    if storage == "dram":
        return [Memory(f"{name}.to_dram", width, DRAM_STAGING_BEATS),
                Memory(f"{name}.from_dram", width, DRAM_STAGING_BEATS)]
    return _fifo(name, width, depth)


def dram_queues(s):
    """(name, width in bits, depth in beats, beats per sample) of each queue slice ``s`` keeps
    in DRAM: the Act-RAM and, where the slice finishes its outputs with a mask to keep, the
    SFU's masks; none with ``act_storage`` "chip"."""
    if s.act_storage != "dram":
        return []
    _, h, w = s.in_shape
    channels, pixels = s.map_channels(s.in_channels), h * w * s.map_pixels  # the map's, after a flatten
    queues = [("act_ram", channels * WORD_BITS, s.act_ram_words // channels, pixels)]
    if s.mode == "ocp" or s.last:
        mask_bits = sfu_mask_bits(s.pool.kernel if s.pool is not None else 1, s.relu)[1]
        channels, beats = error_beats(s)
        if mask_bits:
            queues.append(("sfu.masks", channels * mask_bits, sfu_samples_in_flight(s) * beats, beats))
    return queues


def dram_bits_per_sample(s):
    """Bits slice ``s`` writes to its DRAM queues per sample; it reads as many back."""
    return sum(width * beats for _, width, _, beats in dram_queues(s))


# The engines' pipelines (hw/engines): multipliers registered in and out, then an adder tree
# of one register per level. The FP and unfolded EB engines never stall; what their consumer
# does not take waits in a buffer of latency + 1 beats (hw.arith.pipeline.CreditedOutput).
MULTIPLIER_LATENCY = 2


def tree_levels(terms):
    """Register levels of an adder tree over ``terms`` values (at least one)."""
    return max(1, (terms - 1).bit_length())


def fp_latency(taps, passes):
    """The FP engine's cycles from issuing a group's last pass to its partial sums: the weight
    read, the multipliers, the tree over ``taps`` = b*K*K products, the accumulator if folded."""
    return 1 + MULTIPLIER_LATENCY + tree_levels(taps) + (passes > 1)


def eb_latency(taps):
    """The EB engine's cycles from a window's last step to its errors: the weight read, the
    multipliers, the tree over ``taps`` = P*K*K products, the accumulator."""
    return 2 + MULTIPLIER_LATENCY + tree_levels(taps)


def _engine_buffers(s):
    """The FP and EB engines' output buffers (CreditedOutput); a folded EB stalls instead."""
    kk = s.kernel * s.kernel
    mems = [Memory("fp.output_buffer", s.fp.ces * ACC_BITS, fp_latency(s.fp.tiles * kk, passes(s)) + 1)]
    if s.needs_eb and s.map_pixels > 1:  # a beat of b sums per pass (EBEngine pass_errors)
        mems.append(Memory("eb.output_buffer", s.fp.tiles * ACC_BITS, eb_latency(s.fp.ces * kk) + 1))
    elif s.needs_eb and passes(s) == 1:
        mems.append(Memory("eb.output_buffer", s.in_channels * ACC_BITS, eb_latency(s.fp.ces * kk) + 1))
    return mems


# Samples an FC corner turn keeps (hw/memory/fc_store.py): one written while one is read.
FC_STORE_SLOTS = 2
# Above this many flattened inputs a slice's corner turns keep their samples in one memory of
# 2v rows, written or read a channel a cycle (hw/memory/fc_store.py, DeepFcWindowStore and
# DeepFcErrorStore): a memory per pass is then distributed RAM two rows deep, a LUT per bit on
# Xilinx (525 k LUTs on VGG-16's node 13). Only where that side keeps up with the engines,
# whose G x v steps a sample are at least the S inputs' cycles when b <= G.
DEEP_FC_STORE_INPUTS = 1024


def deep_fc_stores(s):
    """Whether slice ``s`` (a fully connected layer after a flatten) builds the deep corner turns."""
    return s.in_channels > DEEP_FC_STORE_INPUTS and s.fp.tiles <= math.ceil(s.out_channels / s.fp.ces)


def deep_vector_stores(s):
    """Whether the last slice of a layer whose output vector travels as a map (``out_map``) turns
    it with the deep stores: above the same size (their rate, some O cycles a sample, is far
    below the engines' G x v steps at that size)."""
    return s.out_shape[0] > DEEP_FC_STORE_INPUTS


def _fc_store(name, tiles, count, deep, *, word_writes):
    """The memories of a corner turn of ``count`` passes of ``tiles`` words: a slot per sample,
    in one deep memory (``word_writes``: written a word at a time) or one per pass."""
    if deep:
        return [Memory(f"{name}.passes", tiles * WORD_BITS, FC_STORE_SLOTS * count, word_writes=word_writes)]
    return [Memory(f"{name}.pass_{i}", tiles * WORD_BITS, FC_STORE_SLOTS) for i in range(count)]


def error_beats(s):
    """(channels, beats) of one sample of slice ``s``'s conv-output errors at its SFU and mask
    FIFO: a pixel of its channels per pooled output pixel, or a group of P per beat where the
    output vector travels as a map (``out_map``)."""
    if s.out_map is not None:
        return s.fp.ces, -(-s.sfu_channels // s.fp.ces)
    _, ph, pw = sfu_shape(s)
    return s.sfu_channels, ph * pw


def slice_memories(s, grad_bits=ACC_BITS):
    """Memories of one LayerSlice whose gradient sums are ``grad_bits`` wide."""
    kernel, own_in, own_out, ces = s.kernel, s.in_channels, s.out_channels, s.fp.ces
    groups = math.ceil(own_out / ces)
    c_in, _, width = s.in_shape
    ow = s.out_shape[2]
    words = own_in * kernel * kernel
    # After a flatten, the slice takes its map's pixels: its channels, those from its first on.
    arriving = s.map_channels(c_in - s.in_range[0] if s.mode == "icp" else c_in)
    mems = _fifo("act_slack", arriving * WORD_BITS, activation_slack(s)) + _engine_buffers(s)
    own_pixel = s.map_channels(own_in)
    mems += _queue("act_ram", own_pixel * WORD_BITS, s.act_ram_words // own_pixel, s.act_storage)
    for role in ("fp", "pg"):
        if s.map_pixels > 1:
            mems += _fc_store(f"{role}_store", s.fp.tiles, passes(s), deep_fc_stores(s), word_writes=True)
        else:
            mems += _fifo(f"{role}_windows", words * WORD_BITS, window_slack(s, role))
    if s.needs_eb and s.map_pixels > 1:
        mems += _fc_store("eb_store", s.fp.tiles, passes(s), deep_fc_stores(s), word_writes=False)
    if s.needs_eb and s.out_map is not None:  # hw/memory/fc_store.ErrorReplay
        mems.append(Memory("eb_replay", ces * WORD_BITS, FC_STORE_SLOTS * groups))
    elif s.needs_eb:  # a line buffer and a FIFO of windows, or one of each per chunk (hw/memory/eb_windows.py)
        chunks = s.eb_chunks or ((0, own_out),)
        for k, (lo, hi) in enumerate(chunks):
            name = f"eb_windows{k}" if len(chunks) > 1 else "eb_windows"
            mems += _fifo(name, (hi - lo) * kernel * kernel * WORD_BITS, window_slack(s, "eb"))
            if kernel > 1:
                rows = math.ceil((kernel - 1) / s.stride)
                mems += [Memory(f"{name.replace('windows', 'lb')}.row{j}", (hi - lo) * WORD_BITS, ow)
                         for j in range(rows)]
    if kernel > 1:
        for role in ("fp_lb", "pg_lb"):
            mems += [Memory(f"{role}.row{j}", own_in * WORD_BITS, width) for j in range(kernel - 1)]
    if s.weights_offchip:  # the rows circulate through DRAM behind two staging FIFOs
        _, width, depth, _ = fc_weights_queue(s)
        mems += _queue("dram_weights", width, depth, "dram")
    elif local_rows(s):
        mems += _weight_memories("lpram", "lgb", s, local_rows(s), grad_bits)
    if s.owns_biases:
        mems += _weight_memories("bias_ram", "bias_lgb", s, None, grad_bits)
    if s.mode == "icp" and not s.first:
        mems += _fifo("pab", ces * ACC_BITS, max(PAB_MIN_DEPTH, math.ceil(s.pab_words / ces)))
    if s.mode == "ocp" and s.needs_eb and not s.last:
        mems += _fifo("eb_pab", c_in * ACC_BITS, max(PAB_MIN_DEPTH, s.pab_words // c_in))
    lo, hi = pg_error_range(s)
    if s.needs_eb:
        mems += _fifo("pg_errors", (hi - lo) * WORD_BITS, pg_error_slack(s))
    if s.biases_beyond_rows:
        mems += _fifo("bias_errors", (hi - lo) * WORD_BITS, PAB_MIN_DEPTH)
    if s.mode == "ocp" or s.last:
        mems += _sfu_memories(s, sfu_samples_in_flight(s))
    return mems


def _weight_memories(ram, gradients, s, rows, grad_bits):
    """LPRAM and LGB (or BPRAM and BGB) of ``rows`` output channels of slice ``s``'s layout,
    or with ``rows`` None its bias RAM and bias LGB. With ``s.overlapped_update`` the engines
    read one of two copies while the walk writes the other and reads a third (hw/memory/
    param_ram.VersionedParamRam), and PG adds into one gradient sum while the walk reads the
    other (hw/memory/grad_buffer.py)."""
    if rows is None:
        width, depth = s.bias_banks, math.ceil(s.sfu_channels / s.bias_banks)
    else:  # an address: one pass of a group
        width, depth = s.fp.ces * s.fp.tiles * s.kernel * s.kernel, math.ceil(rows / s.fp.ces) * passes(s)
    if not s.overlapped_update:
        return [Memory(ram, width * WORD_BITS, depth, dual_read=True, word_writes=True),
                Memory(gradients, width * grad_bits, depth)]
    return ([Memory(f"{ram}.copy{n}", width * WORD_BITS, depth, dual_read=True, word_writes=True) for n in (0, 1)]
            + [Memory(f"{ram}.walk", width * WORD_BITS, depth, word_writes=True)]
            + [Memory(f"{gradients}.sums{n}", width * grad_bits, depth) for n in (0, 1)])


def sfu_mask_bits(pool_kernel, relu):
    """(pool code bits, mask bits) the SFU keeps per kept output and channel: the winner's
    window position and, with ReLU, whether the winner is > 0 (hw/node/sfu.py); without a pool
    (``pool_kernel`` 1) the ReLU bit of every output."""
    code_bits = (pool_kernel * pool_kernel - 1).bit_length()
    return code_bits, code_bits + relu


# The SFU's rounder never stalls (hw/node/sfu.py): its output buffer holds the longest
# rounder latency + 1 beats of P words, whatever the formats' shift.
SFU_ROUNDER_BUFFER = rounder_latency(1) + 1


def sfu_pool_rows(pool):
    """Pooled rows the SFU builds at once, each in a forward and a backward row memory: one
    where the windows tile the map, ceil(kernel / stride) where they overlap (hw/node/sfu.py,
    OverlappingPoolSFU); none without a pool."""
    if pool is None or pool.kernel == 1:
        return 0
    return -(-pool.kernel // pool.stride)


def _sfu_memories(s, samples_in_flight):
    k = s.pool.kernel if s.pool is not None else 1
    code_bits, mask_bits = sfu_mask_bits(k, s.relu)
    _, _, pw = sfu_shape(s)
    channels, beats = error_beats(s)
    mems = [Memory("sfu.rounder.output_buffer", s.fp.ces * WORD_BITS, SFU_ROUNDER_BUFFER)]
    if mask_bits:
        mems += _queue("sfu.masks", channels * mask_bits, samples_in_flight * beats, s.act_storage)
    if s.out_map is not None:  # the corner turns between the SFU's beats and the map's pixels
        deep = deep_vector_stores(s)
        mems += _fc_store("out_store", s.fp.ces, beats, deep, word_writes=False)
        mems += _fc_store("err_store", s.fp.ces, beats, deep, word_writes=True)
    rows = sfu_pool_rows(s.pool)
    for j in range(rows):
        suffix = str(j) if rows > 1 else ""
        mems.append(Memory(f"sfu.band{suffix}", channels * (WORD_BITS + code_bits), pw))
        mems.append(Memory(f"sfu.replay{suffix}", channels * (WORD_BITS + mask_bits), pw))
    if rows:
        mems += _fifo("sfu_errors", channels * WORD_BITS, sfu_error_slack(s))
    return mems


def sfu_error_slack(s):
    """Pooled-output errors buffered in front of a pooling SFU's backward input: it takes a
    pooled row's errors during the first conv row of their band and none while it replays
    them for the other rows of their windows (hw/node/sfu.py), so without them the EB engine
    that produces those errors stalls whenever its output lands in that window. One pooled
    row, None without a pool (no replay)."""
    if not sfu_pool_rows(s.pool):
        return None
    return max(PAB_MIN_DEPTH, sfu_shape(s)[2])


def activation_slack(s):
    """Input pixels buffered ahead of a slice's line buffer: two rows (hw/node/slice_unit.py)."""
    return max(PAB_MIN_DEPTH, 2 * s.in_shape[2])


def window_slack(s, role):
    """Windows buffered between a line buffer and its engine: enough for the engine to keep
    working while the line buffer takes the rows a sample needs before its first window
    ((K-1-p) input rows, one window per G x passes engine cycles)."""
    width = s.out_shape[2] if role == "eb" else s.in_shape[2]
    startup = max(0, s.kernel - 1 - s.padding) * width + s.kernel
    return max(PAB_MIN_DEPTH, math.ceil(startup / engine_cycles_per_window(s)) + 2)


def pg_error_slack(s):
    """Conv-output error pixels PG's branch buffers so EB's line buffer can run a whole
    window height (K rows) ahead of PG (hw/node/slice_unit.py); where the errors come a group a
    beat (``out_map``), a sample of beats, so EB's replay takes a whole sample while PG works
    through the one before."""
    if s.out_map is not None:
        return -(-s.out_channels // s.fp.ces) + 1
    return s.kernel * s.out_shape[2] + 1


def sfu_samples_in_flight(s):
    """Samples the SFU keeps masks for: those whose FP ran before their errors return, as
    many as the Act-RAM holds, and two more for the SFU's own latency."""
    return s.samples_held + 2


def hosted_memories(owner, rows, grad_bits=ACC_BITS):
    """BPRAM and BGB of ``rows`` output channels of the ``owner`` slice kept on its host:
    laid out as the owner's LPRAM and LGB (hw/balance/hosted_rows.py)."""
    return _weight_memories("bpram", "bgb", owner, rows, grad_bits)


def inventory(slices, hosted, relayed=(), grad_bits=ACC_BITS):
    """Memories of a node computing ``slices``, hosting, for each (owner slice, rows) of
    ``hosted``, that many rows of the owner's weights, and relaying the streams of the
    rows ``relayed`` (owner slices cut to them). The relay FIFOs, RELAY_DEPTH deep, are
    distributed RAM on every family: planning leaves them out of the block RAM."""
    mems = [Memory("labels", LABEL_BITS, LABEL_FIFO_DEPTH)]
    for s in slices:
        mems += slice_memories(s, grad_bits)
    for owner, rows in hosted:
        mems += hosted_memories(owner, rows, grad_bits)
    for cut in relayed:
        for name, bits in balance_stream_bits(cut).items():
            mems += _fifo(f"relay_{name}", bits, RELAY_DEPTH)
    return mems


def node_memories(config):
    cuts = [merge_blocks(blocks).owner_slice for blocks in hosted_groups(config)]
    relayed = [merge_blocks(blocks).owner_slice for blocks in relayed_groups(config)]
    return inventory(config.slices, [(cut, cut.out_channels) for cut in cuts], relayed, config.formats.grad_bits)


def cost(mems, family):
    """Block RAM, distributed-RAM LUTs, payload bits and register bits of the memories ``mems``."""
    return MemoryCost(sum(m.blocks(family) for m in mems), sum(m.lutram_luts(family) for m in mems),
                      sum(m.width * m.depth for m in mems), sum(register_bits(m.width, m.depth) for m in mems))


def node_bram_blocks(config):
    return cost(node_memories(config), config.family).bram_blocks


def node_lutram_luts(config):
    return cost(node_memories(config), config.family).lut
