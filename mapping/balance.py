"""On-chip memory of a node and weight (parameter) balancing, paper eq. 12 and Fig. 6.

Memories of a slice (16-bit words unless said; widths are what one cycle reads)
------------------------------------------------------------------------------
The model below (:class:`CoarseMemory`) prices the paper-scale mappings, and covers
what the hardware generator does not build. The generator's mappings
(``buildable_balance``) are priced with the memories hw/ builds instead, memory by
memory (:class:`ExactMemory`, mapping/memories.py): it also keeps window FIFOs,
activation and error slack, a wider and shallower LGB, one BPRAM and BGB per hosted
range laid out as the owner's LPRAM and LGB, and so on; :func:`layer_slice` builds
the slice hw/ builds from the partitioner's.

Non-movable, sized by the partitioner:

- Act-RAM: the slice's input activations from FP until PG consumes them, for the
  samples it holds (FP of sample s + held may start only after PG of sample s is
  done): its ``fp_stale`` samples in flight, or the previous layer's if larger
  (``mapping.mapper.samples_held``): ``held * S * H * W`` words, ``b`` channels wide
  (OCP slices keep all input channels: the duplication the paper mentions).
- line buffers: ``(K-1)`` rows of the padded input for FP and again for PG
  (``(K-1) * (W+2p) * S`` words each, plus the K-pixel window registers), and for EB
  ``(K-1)`` rows of the zero-dilated padded error map of the slice's output channels
  (``(K-1) * (W+2p+K-1) * O`` words).
- PAB: ICP slices after the first receive the previous node's 48-bit partial sums
  of every output channel; they wait at most one output row plus the link latency:
  ``OC * (OW + latency / cycles-per-pixel)`` words. OCP slices before the last hold
  the next node's 48-bit EB partial sums the same way (input channels, input row).
- SFU masks, on the node that finishes an output channel: per pooled output the
  argmax index and one ReLU bit (the winner's: the others' never pass an error),
  per conv output without a pool its ReLU bit, for the samples the Act-RAM holds.
- biases (16 bit) and their 48-bit gradient accumulators, on the SFU node.
- grouped layers (mapping/partition/plan.py): a slice lies in one group, and its engines,
  weights, line buffers and Act-RAM are those of the ordinary convolution of its channels
  with its group's channels on the other side (OC / G rows under ICP); the partial sums
  in the PAB and the SFU of an ICP layer's last slice still cover every output channel.
- FC slices with weights in DRAM: the input and output-error vectors of the
  mini-batch (``B * (S + O)`` words, ``b`` and ``P`` wide), from which the weight
  gradient is formed once per mini-batch (mapping/perf.py, FC dataflow).

Activations in DRAM (``LayerSlice.act_storage`` "dram", on a device with DRAM;
``mapper.map_network``'s ``act_storage`` chooses the slices): the Act-RAM and the SFU
masks are queues in the node's DRAM, and of each only two staging FIFOs of
:data:`mapping.memories.DRAM_STAGING_BEATS` words of its width stay on chip (one
filling towards the DRAM, one read ahead from it), in both models
(:func:`fixed_buffers`; mapping/memories.py for the generator's). ``act_ram_words``
stays the queue's depth: it is what the DRAM holds (``mapper.dram_bytes_held``, checked
against the device's ``dram_gb``). Every word written is read back once: the traffic
(:func:`dram_bits_per_sample`, twice) shares the node's DRAM with its FC weights and
bounds its cycles per sample (mapping/perf.py).

Movable (weights):

- LPRAM: the slice's weights, one row of ``P`` output channels x ``b`` input
  channels x K x K words per address (``P * b * K * K`` words wide,
  ``ceil(rows / P) * v`` deep), read every cycle by FP and by EB through the two
  ports (so at most 18 bits per port and block);
- LGB: their 48-bit gradient sums. PG accumulates a strip of up to :data:`PG_STRIP`
  consecutive output pixels of one weight group in the DSP accumulators before it adds
  them to the LGB, so the LGB is 1/strip as wide as the PG engine and as much deeper (the
  strip that fills the blocks best, :func:`lgb_cost`);
- rows kept on another node (BPRAM, below) are used weight-stationary: each
  streamed row meets every pixel of the sample in Act-RAM, and the slice keeps
  their 48-bit partial sums for the whole sample, ``rows * OH * OW`` words.

Hosted: the BPRAM of a node holds other nodes' rows (16-bit, streamed in
order, so one narrow deep memory) and the BGB their 48-bit gradient sums.

Weight balancing
----------------
Where a node's memory exceeds its budget, whole output-channel rows of its
slices (the rows that free most memory first) move to the nearest node with room
(upstream first on a tie). Every sample the host streams them to the owner
(16-bit words over each link in between; conv rows once, FC rows once for FP and
once for EB) and the owner sends their per-sample gradients back (48-bit words),
see :mod:`mapping.perf`.

The hardware generator builds balancing in one form only (``buildable=True``,
``mapper.GENERATOR_OPTIONS``): rows of fully connected slices (conv rows used
weight-stationary need an engine mode it does not build), on the nearest node with
room (the nodes in between relay the streams), each host's rows of a slice one range
(a slice moves on to another host once its current one is full), and the rows left local a
whole number of engine groups of ``P`` output channels (each move is rounded up
to that, or cut to fewer groups where the host has no room). Where that cannot
relieve a node, the mapping is refused, saying why.
"""

from dataclasses import dataclass
from functools import lru_cache
import math

from . import memories, resources
from .errors import MemoryRefusal
from .memories import sfu_mask_bits
from .nodeconfig import Engine, LayerSlice, WeightBlock
from .numerics import ACC_BITS, WORD_BITS
from .resources import MemoryCost

# The partitioner prices the same few memory shapes tens of thousands of times.
memory_cost = lru_cache(maxsize=1 << 16)(resources.memory_cost)

# Output pixels PG sums in its DSP accumulators per LGB read-modify-write.
PG_STRIP = 16
# Depth one block row covers: memories no deeper than this cost their width (bandwidth),
# whatever their rows; beyond it, capacity (see weight_floor).
BLOCK_DEPTH = 512

# Link core latency per hop (serialisation, framing, CRC, PHY), in node cycles.
LINK_LATENCY_CYCLES = 128


def mask_bits(plan, out_channels):
    """SFU mask bits of one sample for ``out_channels`` output channels: per pooled output
    (conv output without a pool) the hardware's :func:`mapping.memories.sfu_mask_bits`."""
    _, ph, pw = plan.sfu_shape
    return out_channels * ph * pw * sfu_mask_bits(plan.pool.kernel if plan.pool else 1, plan.relu)[1]


@dataclass(frozen=True)
class FixedWords:
    """Buffer depths (in words) the NodeConfig reports, and their memory cost."""

    act_ram: int
    line_buffer: int
    pab: int
    cost: MemoryCost
    overlapped_update: bool = False  # LayerSlice.overlapped_update: more copies of the weights


def _queue_cost(width, depth, family, storage):
    """On-chip cost of a queue of ``depth`` words of ``width`` bits kept in ``storage``: in
    DRAM only its two staging FIFOs of :data:`mapping.memories.DRAM_STAGING_BEATS` words stay
    on chip (memories._queue)."""
    if storage == "dram":
        return memory_cost(width, memories.DRAM_STAGING_BEATS, family, count=2)
    return memory_cost(width, depth, family)


def fixed_buffers(plan, units, shape, samples, family, *, first, last, latency_cycles,
                  gradient_batch=0, grad_bits=ACC_BITS, act_storage="chip"):
    """The non-movable buffers of a slice of ``units`` units holding ``samples`` samples, its
    Act-RAM and SFU masks kept in ``act_storage`` (LayerSlice.act_storage)."""
    c_in, h, w = plan.in_shape
    oc, oh, ow = plan.out_shape
    k, p = plan.kernel, plan.padding
    icp = plan.mode == "icp"
    # A slice pairs with its group's channels on the full side (all of them ungrouped); the
    # SFU of an ICP layer's last slice finishes every output channel.
    s_in = units * plan.unit_inputs if icp else plan.group_full
    o_out = plan.group_full if icp else units
    o_sfu = oc if icp else units
    passes = shape.u * shape.v
    cost = MemoryCost()

    act_words = samples * s_in * h * w
    cost += _queue_cost(shape.b * WORD_BITS, samples * h * w * shape.v, family, act_storage)

    lb_words = 0
    if k > 1:
        row = w + 2 * p
        lb_words += 2 * ((k - 1) * row + k) * s_in
        cost += memory_cost(shape.b * WORD_BITS, row * shape.v, family, count=2 * (k - 1))
        if plan.needs_eb:
            erow = w + 2 * p + k - 1
            lb_words += ((k - 1) * erow + k) * o_out
            cost += memory_cost(shape.P * WORD_BITS, erow * shape.u, family, count=k - 1)

    pab_words = 0
    if icp and not first:
        lag = math.ceil(latency_cycles / passes)
        pab_words = oc * (ow + lag)  # the partial sums of every output channel stream through
        cost += memory_cost(shape.P * ACC_BITS, (ow + lag) * math.ceil(oc / shape.P), family)
    elif not icp and not last and plan.needs_eb:
        lag = math.ceil(latency_cycles / passes)
        pab_words = s_in * (w + lag)
        cost += memory_cost(shape.b * ACC_BITS, (w + lag) * shape.v, family)

    if gradient_batch:  # FC weights in DRAM: the mini-batch's vectors form the gradient
        cost += memory_cost(shape.b * WORD_BITS, gradient_batch * shape.v, family) + \
            memory_cost(shape.P * WORD_BITS, gradient_batch * shape.u, family)

    if last or not icp:  # this node runs the SFU of its output channels
        masks = samples * mask_bits(plan, o_sfu)
        if masks:  # none without ReLU or pool
            cost += _queue_cost(WORD_BITS, math.ceil(masks / WORD_BITS), family, act_storage)
        if plan.bias:
            cost += memory_cost(WORD_BITS, o_sfu, family) + memory_cost(grad_bits, o_sfu, family)
    return FixedWords(act_words, lb_words, pab_words, cost)


def _weight_cost(sl_plan, shape, rows, family, grad_bits, remote_rows=0, depth_cap=None):
    k2 = sl_plan.kernel ** 2
    depth = math.ceil(rows / shape.P) * shape.v
    if depth_cap is not None:
        depth = min(depth, depth_cap)
    width = shape.P * shape.b * k2
    cost = memory_cost(width * WORD_BITS, depth, family, dual_read=True) + lgb_cost(width, depth, family, grad_bits)
    if remote_rows:
        cost += memory_cost(ACC_BITS, remote_rows * sl_plan.out_pixels, family)
    return cost


@lru_cache(maxsize=1 << 14)
def lgb_cost(width, depth, family, grad_bits):
    """The LGB of an LPRAM of ``width``-word rows, ``depth`` deep: ``grad_bits`` sums, 1/s as
    wide and s times as deep for the strip of s output pixels PG sums per read-modify-write, s
    up to :data:`PG_STRIP`, chosen for the fewest blocks (a strip that divides the row leaves
    no sum of a block row unused: a row of 72 words in strips of 16 would take 5 sums of the
    widest 80 bits where 4.5 are used)."""
    strips = [s for s in range(PG_STRIP // 2, PG_STRIP + 1) if width % s == 0] + [PG_STRIP]
    return min((memory_cost(math.ceil(width / s) * grad_bits, depth * s, family) for s in strips),
               key=lambda cost: (cost.bram_blocks, cost.lut))


def weight_memory(sl, family, grad_bits=ACC_BITS):
    """LPRAM + LGB (sums of ``grad_bits``) of the slice's local rows, and the partial sums
    of its remote rows."""
    if sl.offchip:
        return MemoryCost()
    local = sl.out_channels - sl.remote_rows
    return _weight_cost(sl.plan, sl.shape, local, family, grad_bits, sl.remote_rows)


def weight_memory_of(plan, units, shape, family, offchip, grad_bits=ACC_BITS):
    """LPRAM + LGB of a prospective slice holding all its rows."""
    if offchip:
        return MemoryCost()
    rows = plan.group_full if plan.mode == "icp" else units
    return _weight_cost(plan, shape, rows, family, grad_bits)


def weight_floor(plan, units, shape, family, offchip, grad_bits=ACC_BITS):
    """The part of LPRAM + LGB no balancing can remove while one row stays local:
    their width (read bandwidth), one block deep."""
    if offchip:
        return MemoryCost()
    rows = plan.group_full if plan.mode == "icp" else units
    return _weight_cost(plan, shape, rows, family, grad_bits, depth_cap=BLOCK_DEPTH // PG_STRIP)


def hosted_memory(words, family, grad_bits=ACC_BITS):
    return memory_cost(WORD_BITS, words, family) + memory_cost(grad_bits, words, family)


def layer_slice(sl, buffers, fp_stale=0, remote_weights=(), cycles_per_sample=0):
    """The LayerSlice of partition slice ``sl`` (the NodeConfig's, which hw/ builds): its
    engines, ``buffers`` (:func:`fixed_buffers` for the samples it holds), its
    local weights and the partial sums of its ``sl.remote_rows`` remote rows, which
    ``remote_weights`` describe."""
    p, shape = sl.plan, sl.shape
    local_rows = sl.out_channels - sl.remote_rows
    sfu_channels = sl.out_channels if p.mode == "ocp" else p.out_shape[0] if sl.last else 0
    lgb = 0 if sl.offchip else local_rows * sl.row_words + (sfu_channels if p.bias else 0)
    return LayerSlice(
        layer=p.name, position=p.position, kind=p.kind, mode=p.mode,
        in_shape=p.in_shape, out_shape=p.out_shape, kernel=p.kernel, stride=p.stride,
        padding=p.padding, bias=p.bias, relu=p.relu, pool=p.pool,
        in_range=sl.in_range, out_range=sl.out_range, first=sl.first, last=sl.last,
        needs_eb=p.needs_eb,
        fp=Engine(shape.P, shape.b, p.kernel),
        eb=Engine(shape.b, shape.P, p.kernel) if p.needs_eb else Engine(0, 0, p.kernel),
        pg=Engine(shape.P, shape.b, p.kernel),
        act_ram_words=buffers.act_ram, line_buffer_words=buffers.line_buffer,
        pab_words=buffers.pab + sl.remote_rows * p.out_pixels,
        lgb_words=lgb, weights_offchip=sl.offchip, remote_weights=remote_weights,
        flatten_from=p.flatten_from, out_map=p.out_map, eb_chunk=p.eb_chunk, fp_stale=fp_stale, cycles_per_sample=cycles_per_sample,
        overlapped_update=buffers.overlapped_update, act_storage=sl.act_storage, groups=p.groups)


def dram_bits_per_sample(sl):
    """Bits partition slice ``sl`` writes to its DRAM queues per sample, as many read back
    (:func:`mapping.memories.dram_bits_per_sample` of its LayerSlice): they depend on the
    queues' widths and beats per sample, not on their depths, so its buffers are left empty."""
    if sl.act_storage != "dram":
        return 0
    return memories.dram_bits_per_sample(layer_slice(sl, FixedWords(0, 0, 0, MemoryCost())))


def planned_slice(sl, buffers):
    """:func:`layer_slice` with its remote rows, the top ``sl.remote_rows`` output channels
    (as the generator keeps them), as one block on a host not yet known: a slice's memories
    depend on how many rows it keeps, not on where the others live."""
    hi = sl.out_range[1]
    remote = (WeightBlock(owner=sl.node, host=None, layer=sl.plan.name, in_range=sl.in_range,
                          out_range=(hi - sl.remote_rows, hi), words=sl.remote_rows * sl.row_words),)
    return layer_slice(sl, buffers, remote_weights=remote if sl.remote_rows else ())


def exact_slice_memory(sl, buffers, family, grad_bits=ACC_BITS):
    """The memories hw/ builds for partition slice ``sl`` (mapping/memories.py): they depend
    on the samples its buffers hold, not on its ``fp_stale``."""
    return memories.cost(memories.slice_memories(planned_slice(sl, buffers), grad_bits), family)


class CoarseMemory:
    """Node memory as this module's docstring models it, from each slice's
    :func:`fixed_buffers` (``buffers[id(slice)]``): what the paper-scale figures are
    planned with; gradient sums of ``grad_bits``."""

    def __init__(self, buffers, family_of, grad_bits=ACC_BITS):
        self.buffers, self.family_of, self.grad_bits = buffers, family_of, grad_bits

    def node(self, slices, node, hosted):
        """Memory of ``node`` computing its ``slices`` and hosting, for each (owner slice,
        rows) of ``hosted``, that many rows of the owner's weights."""
        family = self.family_of(node)
        total = hosted_memory(sum(rows * sl.row_words for sl, rows in hosted), family, self.grad_bits)
        for sl in slices:
            if sl.node == node:
                total += self.buffers[id(sl)].cost + weight_memory(sl, family, self.grad_bits)
        return total


class ExactMemory:
    """Node memory as hw/ builds it, memory by memory (mapping/memories.py), from each
    slice's buffer depths (``buffers[id(slice)]``): what the generator's mappings are
    planned with; gradient sums of ``grad_bits``."""

    def __init__(self, buffers, family_of, grad_bits=ACC_BITS):
        self.buffers, self.family_of, self.grad_bits = buffers, family_of, grad_bits

    def node(self, slices, node, hosted):
        def planned(sl):
            return planned_slice(sl, self.buffers[id(sl)])

        mems = memories.inventory([planned(sl) for sl in slices if sl.node == node],
                                  [(planned(sl), rows) for sl, rows in hosted], grad_bits=self.grad_bits)
        return memories.cost(mems, self.family_of(node))


def _smallest_r(ok, limit):
    """Smallest r in 0..limit with ok(r), for ok monotone increasing in r and ok(limit)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def largest(ok, limit):
    """Largest n in 0..limit with ok(n), for ok monotone decreasing in n and ok(0) (bisection)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _moves(sl, group):
    """The row counts one move may take from ``sl``: those that leave its local rows a
    whole number of ``group``-row engine groups (any count for ``group`` 1), ascending."""
    local = sl.out_channels - sl.remote_rows
    return range((local - 1) % group + 1, local + 1, group)


def _group(sl, buildable):
    """Rows a move keeps together: the generator's engines read the local rows as whole
    groups of P output channels, so its remote rows start at a group boundary."""
    return sl.shape.P if buildable else 1


def balance(slices, node_budgets, memory, describe, *, buildable=False):
    """Move weight rows off nodes over budget. Returns the WeightBlocks (chain order) and,
    per node, the rows it hosts: {id(owner slice): (owner slice, rows)}.

    ``memory`` prices a node (:class:`CoarseMemory` or :class:`ExactMemory`);
    ``describe()`` gives the refusal's context (network, cluster). ``buildable``: move
    only what the hardware generator builds (module docstring, Weight balancing)."""
    n = len(node_budgets)
    hosted = [{} for _ in range(n)]
    blocks = []
    hosts_of = {}  # id(slice) -> the nodes its remote rows live on, the current one last

    def usage(node, rows_of=None):
        """Blocks of ``node`` hosting ``rows_of`` (default: what it hosts)."""
        rows = hosted[node] if rows_of is None else rows_of
        return memory.node(slices, node, rows.values()).bram_blocks

    def room(host, sl, rows):
        """Whether ``host`` can store ``rows`` more rows of ``sl`` and their gradient sums."""
        return usage(host, _with_rows(hosted[host], sl, rows)) <= node_budgets[host].blocks

    for owner in range(n):
        budget = node_budgets[owner].blocks
        while usage(owner) > budget:
            now = usage(owner)
            ranked = _ranked(slices, owner, now, usage)
            if not ranked:
                _refuse(slices, node_budgets, owner, now, describe, grad_bits=memory.grad_bits)
            if buildable:
                sl, host = _buildable_move(ranked, owner, n, room, hosts_of) or \
                    _refuse_unbuildable(ranked, node_budgets, owner, now, describe)
            else:
                sl = ranked[0]
                host = _nearest_host(owner, n, lambda h: room(h, sl, 1))
                if host is None:
                    _refuse(slices, node_budgets, owner, now, describe, homeless=sl, grad_bits=memory.grad_bits)
            moves = _moves(sl, _group(sl, buildable))
            # the host chosen has room for moves[0]
            can = largest(lambda i: room(host, sl, moves[i]), len(moves) - 1)

            def relieved(i):
                sl.remote_rows += moves[i]
                ok = usage(owner) <= budget
                sl.remote_rows -= moves[i]
                return ok

            move = moves[_smallest_r(relieved, can) if relieved(can) else can]
            hi = sl.out_range[1] - sl.remote_rows
            block = WeightBlock(owner=owner, host=host, layer=sl.plan.name, in_range=sl.in_range,
                                out_range=(hi - move, hi), words=move * sl.row_words)
            sl.remote_rows += move
            hosted[host] = _with_rows(hosted[host], sl, move)
            if hosts_of.setdefault(id(sl), [host])[-1] != host:
                hosts_of[id(sl)].append(host)
            blocks.append(block)
    return blocks, hosted


def _with_rows(hosted, sl, rows):
    """``hosted`` ({id(owner slice): (owner slice, rows)}) with ``rows`` more rows of ``sl``."""
    more = dict(hosted)
    more[id(sl)] = (sl, hosted.get(id(sl), (sl, 0))[1] + rows)
    return more


def _ranked(slices, owner, now, usage):
    """The owner's slices whose rows free memory when used from another node, those that
    free most blocks per row first."""
    gains = []
    for s in slices:
        if s.node == owner and not s.offchip and s.out_channels > s.remote_rows:
            rows = s.out_channels - s.remote_rows
            s.remote_rows += rows
            freed = now - usage(owner)
            s.remote_rows -= rows
            if freed > 0:
                gains.append((freed / rows, s))
    # stable: among equal gains the first slice, as max() picks
    return [s for _, s in sorted(gains, key=lambda g: -g[0])]


def _nearest_host(owner, n, has_room):
    """Nearest node to ``owner`` for which ``has_room``, upstream first on a tie."""
    for distance in range(1, n):
        for host in (owner - distance, owner + distance):
            if 0 <= host < n and has_room(host):
                return host
    return None


def _buildable_move(ranked, owner, n, room, hosts_of):
    """(slice, host) of the first fully connected slice in ``ranked`` whose smallest move
    fits where the generator allows its rows: on the node that took its last remote rows,
    else on the nearest node with room that holds none of them yet (each host's rows one
    range). None if there is none."""
    for sl in ranked:
        if sl.plan.kind != "fc":
            continue
        rows = _moves(sl, _group(sl, True))[0]
        used = hosts_of.get(id(sl), [])
        if used and room(used[-1], sl, rows):
            host = used[-1]
        else:
            host = _nearest_host(owner, n, lambda h: h not in used and room(h, sl, rows))
        if host is not None:
            return sl, host
    return None


def _refuse(slices, node_budgets, owner, used, describe, homeless=None, grad_bits=ACC_BITS):
    """Refuse a node over budget: no host has room for a row of ``homeless`` (its weights and
    their ``grad_bits`` gradient sums), or (None) moving rows away would not free memory."""
    head = _head(node_budgets, owner, used, describe)
    if homeless is not None:
        raise MemoryRefusal(
            f"{head}, and no other node has room for one more weight row of its layer "
            f"'{homeless.plan.name}' ({homeless.row_words:,} 16-bit weights and their {grad_bits}-bit "
            f"gradient sums)")
    mine = [s for s in slices if s.node == owner and not s.offchip]
    movable = [s for s in mine if s.out_channels > s.remote_rows]
    if not movable:
        sums = sum(s.remote_rows * s.plan.out_pixels for s in mine)
        raise MemoryRefusal(f"{head}, and every weight row it could move already lives on other nodes: "
                            f"their {sums:,} 48-bit partial sums and its activation and line buffers "
                            f"exceed the budget")
    sl = max(movable, key=lambda s: s.weight_words)
    lo, hi = sl.in_range
    _, oh, ow = sl.plan.out_shape
    raise MemoryRefusal(
        f"{head}, and moving weight rows to other nodes frees nothing: a row of layer "
        f"'{sl.plan.name}' (input channels {lo}:{hi}, {sl.row_words:,} weights) used from another "
        f"node needs {oh * ow:,} 48-bit partial sums of its {oh}x{ow} outputs here")


def _head(node_budgets, owner, used, describe):
    budget = node_budgets[owner]
    return (f"{describe()}: node {owner} ({budget.device.name}) needs {used} blocks of 18 Kb but has "
            f"{budget.blocks} usable")


def _refuse_unbuildable(ranked, node_budgets, owner, used, describe):
    """Refuse a node over budget whose rows could move, but not as the generator builds:
    say why for the first fully connected candidate, or for the best (conv) one."""
    fc = [s for s in ranked if s.plan.kind == "fc"]
    if not fc:
        reason = (f"the rows that would free memory are of conv layer '{ranked[0].plan.name}', which "
                  f"would have to be used weight-stationary from another node, an engine mode the "
                  f"generator does not build")
    else:
        sl = fc[0]
        rows = _moves(sl, _group(sl, True))[0]
        groups = (f"; the rows left local must be whole engine groups of {sl.shape.P}"
                  if sl.shape.P > 1 else "")
        reason = (f"no other node has room for {'one more row' if rows == 1 else f'{rows} more rows'} of "
                  f"layer '{sl.plan.name}' ({rows * sl.row_words:,} 16-bit weights and their 48-bit "
                  f"gradient sums{groups})")
    raise MemoryRefusal(f"{_head(node_budgets, owner, used, describe)}, and the hardware generator balances "
                        f"weights only as rows of fully connected layers: {reason}")


def activation_bits(plans):
    """Lower bound of the non-movable memory: one sample of every conv layer's input."""
    return sum(math.prod(p.in_shape) * WORD_BITS for p in plans if p.kind == "conv")


def check_total(plans, node_budgets, describe, offchip_fc, grad_bits=ACC_BITS, act_dram=False):
    """Refuse up front when the weights cannot fit the cluster's on-chip RAM at all, with
    :func:`activation_bits` on chip, or none where the activations may live in DRAM
    (``act_dram``: a slice keeps on chip only their staging FIFOs, and a lower bound must
    not count what any node might keep off chip)."""
    usable = sum(b.blocks for b in node_budgets) * 18 * 1024
    weights = sum(p.weights for p in plans if not (p.kind == "fc" and offchip_fc))
    conv = sum(p.weights for p in plans if p.kind == "conv")
    fixed_bits = 0 if act_dram else activation_bits(plans)
    need = weights * (WORD_BITS + grad_bits) + fixed_bits
    if need <= usable:
        return
    devices = sorted({b.device.name for b in node_budgets})
    largest = max(plans, key=lambda p: p.weights if not (p.kind == "fc" and offchip_fc) else 0)
    alone = (f"; its conv weights alone ({conv * WORD_BITS / 1e6:.1f} Mbit) exceed it"
             if conv * WORD_BITS > usable else "")
    fixed = "activations in DRAM" if act_dram else f"{fixed_bits / 1e6:.1f} Mbit of activations and buffers"
    raise MemoryRefusal(
        f"{describe()} does not fit even with weight balancing: it needs {need / 1e6:.1f} Mbit on chip "
        f"({weights * WORD_BITS / 1e6:.1f} Mbit of 16-bit weights, {weights * grad_bits / 1e6:.1f} Mbit "
        f"of {grad_bits}-bit gradient buffers, {fixed}) but "
        f"{len(node_budgets)} x {'/'.join(devices)} offer {usable / 1e6:.1f} Mbit usable{alone} "
        f"(largest layer: '{largest.name}', {largest.weights:,} "
        f"weights)")
