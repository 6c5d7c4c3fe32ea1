"""``map_network``: network + cluster -> Mapping (one NodeConfig per node).

Steps: plan the weighted layers and refuse what the hardware cannot compute
exactly (:func:`check_accumulators`) or hold (:func:`mapping.balance.check_total`);
partition (mapping/partition/) and balance weights (mapping/balance.py); derive
the samples in flight of every slice from the timing model (mapping/perf.py) and
repeat until the Act-RAM the partitioner reserved covers them; fill the
NodeConfigs, check that each node's DRAM holds what the mapping keeps there
(:func:`dram_bytes_held`), and the performance summary. Where the Act-RAMs and SFU
masks live, on chip or in the node's DRAM, is :func:`map_storage`'s ``act_storage``; whether the
weight update stops the engines, :func:`map_network`'s ``update``.

Estimated resources of a node (``NodeConfig.estimate``): ``dsp`` = its
multipliers (one per 16 x 16 product); ``bram_blocks`` = 18 Kb blocks of every
memory through :func:`mapping.resources.bram_blocks`, ``bram_bits`` their
payload; ``lut``/``ff`` from :func:`mapping.resources.logic_estimate` plus the
LUTs of distributed RAM and the flip-flops of memories one word deep (a node's link
cores are not in them). The memories are those of mapping/balance.py's model,
or with ``buildable_balance`` (the generator's mappings) those hw/ builds,
memory by memory (mapping/memories.py), which the mapping is then planned with:
every node of such a mapping fits its block RAM as built.
"""

from dataclasses import replace
from functools import partial
import math

from . import balance, memories, perf, resources
from .errors import MemoryRefusal, SpecError
from .nodeconfig import ACT_STORAGES, VECTOR_WORDS, WINDOW_WORDS, Mapping, NodeConfig, Resources, Training, update_lane_counts
from .numerics import ACC_BITS, WORD_BITS, Formats, acc_bits_needed, lr_constant
from .partition import budgets, partition, plan_layers
from .resources import logic_estimate, tile_multipliers

DSP_FRACTION = 0.9   # the rest: weight-update multipliers (48 x 16 bit), timing closure
BRAM_FRACTION = 0.9  # the rest: link FIFOs, stream skew buffers, routing
LOGIC_FRACTION = 0.8  # of the LUTs, at most, once the weight update is widened (routing, timing)
# A weight update that costs a node at most this share of its cycles per sample is not widened:
# a lane is about 500 LUTs of noise hashing and rounding (resources.UPDATE_LANE_LUT), and a
# VGG-16 slice's 72 lanes (about 35,000 LUTs) took its walk to 0.25% of its sample period.
UPDATE_SHARE = 0.01
# Training defaults: plain SGD, one sample per update.
BATCH = 1
LEARNING_RATE = 0.01
MAX_STALE_ROUNDS = 8
BALANCE_RETRIES = 3  # longer periods tried where balancing finds no room (x1.25 each)


def _max_terms():
    """Most products whose worst-case exact sum fits the accumulators."""
    lo, hi = 1, 1 << ACC_BITS
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if acc_bits_needed(mid) <= ACC_BITS else (lo, mid - 1)
    return lo


def check_accumulators(plans, batch, grad_bits=ACC_BITS):
    """Refuse a layer whose worst-case exact sum could exceed the ACC_BITS accumulators.

    FP sums IC/G*K*K products (and the bias), EB OC/G*K*K (G the groups), and a weight's
    gradient accumulator in the LGB sums batch*OH*OW products over the mini-batch when it is
    exact (``grad_bits`` = ACC_BITS; narrower sums saturate, numerics.accumulate)."""
    limit = _max_terms()
    for p in plans:
        sums = (("FP", p.in_shape[0] // p.groups * p.kernel ** 2 + (1 if p.bias else 0)),
                ("EB", p.out_shape[0] // p.groups * p.kernel ** 2 if p.needs_eb else 0),
                ("weight-gradient", batch * p.out_pixels if grad_bits == ACC_BITS else 0))
        for what, terms in sums:
            if terms > limit:
                hint = ""
                if what == "weight-gradient":
                    fits = limit // p.out_pixels
                    hint = f"; the largest batch it admits is {fits}" if fits else ""
                raise SpecError(
                    f"layer '{p.name}': its {what} sums add up to {terms:,} products of two 16-bit "
                    f"words, which need {acc_bits_needed(terms)} bits in the worst case, more than "
                    f"the {ACC_BITS}-bit accumulators{hint}")


# Options for a mapping hw/ can generate: fully connected weights on chip, or in DRAM where
# they do not fit at mini-batch 1 (hw/memory/dram_weights.py), weights balanced only in the
# form it builds (mapping/balance.py).
GENERATOR_OPTIONS = {"fc_weights": "auto", "buildable_balance": True, "update": "auto"}


# Where map_network keeps the slices' Act-RAMs and SFU masks (LayerSlice.act_storage).
ACT_STORAGE_POLICIES = (*ACT_STORAGES, "auto")
# How map_network's weight update runs: stopping the engines, overlapped with them
# (LayerSlice.overlapped_update), or whichever of the two runs the generated chain faster.
UPDATE_POLICIES = ("stop", "overlapped", "auto")
# The overlapped update keeps three copies of the weights and trains a sample staler: "auto"
# takes it only where the chain, the update's walks counted, runs at least this much faster.
OVERLAPPED_MIN_GAIN = 1.01


def map_network(network, cluster, *, update="stop", **options):
    """Map the training of ``network`` onto ``cluster`` with the weight update ``update`` says
    (one of UPDATE_POLICIES): "stop" stops the engines for each update's walk, "overlapped"
    runs it beside them (docs/weight_versions.md), "auto" maps both and keeps the overlapped
    one where the chain then runs at least OVERLAPPED_MIN_GAIN times as many samples per
    second, the walks counted (``samples_per_s_with_updates``), else the stopping one. Only
    the generator's mappings (``buildable_balance``) count the walks, so elsewhere "auto" is
    "stop". Further arguments: :func:`map_storage`'s."""
    return _with_update(map_storage, network, cluster, update, options)


def _with_update(mapper, network, cluster, update, options):
    """``mapper(network, cluster, overlapped_update=..., **options)`` as ``update`` says
    (:func:`map_network`)."""
    if not isinstance(update, str):
        raise TypeError(f"update must be one of {', '.join(UPDATE_POLICIES)}, not {update!r}")
    if update not in UPDATE_POLICIES:
        raise SpecError(f"update must be one of {', '.join(UPDATE_POLICIES)}, not {update!r}")
    if update != "auto" or not options.get("buildable_balance"):
        return mapper(network, cluster, overlapped_update=update == "overlapped", **options)
    stopping = mapper(network, cluster, overlapped_update=False, **options)
    try:
        overlapped = mapper(network, cluster, overlapped_update=True, **options)
    except SpecError:
        return stopping  # three copies of the weights do not fit, or the generator does not build it
    rate = "samples_per_s_with_updates"
    return overlapped if overlapped.summary[rate] >= OVERLAPPED_MIN_GAIN * stopping.summary[rate] else stopping


def map_storage(network, cluster, *, act_storage="auto", fc_weights="dram", **options):
    """Map the training of ``network`` onto ``cluster`` (see module docstring), the Act-RAMs
    and SFU masks of the slices kept where ``act_storage`` says (LayerSlice.act_storage):

    - "chip": in block RAM on every node;
    - "dram": in the node's DRAM, behind two small staging FIFOs, on every node whose device
      has DRAM (a device without keeps them on chip);
    - "auto": on chip where the mapping fits so; where it is refused for on-chip memory
      (:class:`mapping.errors.MemoryRefusal`) and a device has DRAM, mapped again as "dram".

    ``fc_weights`` says the same of fully connected weights (LayerSlice.weights_offchip):
    "dram" streams them from the DRAM of every device that has one (the paper's classifier
    nodes, perf.py "FC dataflow"), "chip" keeps them on chip, "auto" keeps them on chip
    where that maps and is tried before the activations move ("auto" both: weights on chip
    and activations in DRAM, then weights in DRAM and activations on chip, then both).

    "auto" moves every slice on a device with DRAM, not only those whose queues are large:
    one rule per chain, as for fully connected weights in DRAM. A per-slice threshold (say,
    queues over a share of the block RAM) would make a slice's memory drop as it grows past
    it, against the bisection over a slice's units that the partitioner's fills rely on
    (mapping/partition/fill.py), and which slices cross it would depend on the cuts it is
    meant to help decide. The DRAM traffic this adds is priced (each node's cycles per
    sample, mapping/perf.py) and small beside the DRAM's bandwidth on the paper's boards
    (docs/paper_comparison.md); the cost not priced here is a DRAM controller on every such
    node. ``options``: :func:`_map_network`'s."""
    for name, policy in (("act_storage", act_storage), ("fc_weights", fc_weights)):
        if not isinstance(policy, str):
            raise TypeError(f"{name} must be one of {', '.join(ACT_STORAGE_POLICIES)}, not {policy!r}")
        if policy not in ACT_STORAGE_POLICIES:
            raise SpecError(f"{name} must be one of {', '.join(ACT_STORAGE_POLICIES)}, not {policy!r}")
    if fc_weights == "auto" and options.get("buildable_balance") and (
            options.get("batch", BATCH) > 1 or options.get("overlapped_update")):
        fc_weights = "chip"  # what the generator builds in DRAM: mini-batch 1, the update stopping the engines
    # (fc weights in DRAM, activations in DRAM), in the order tried.
    tries = [(fc, act) for fc in ((False, True) if fc_weights == "auto" else (fc_weights == "dram",))
             for act in ((False, True) if act_storage == "auto" else (act_storage == "dram",))]
    if not any(device.dram_gb > 0 for device in cluster.devices):
        tries = tries[:1]
    refusal = None
    for offchip_fc, act_dram in tries:
        try:
            return _map_network(network, cluster, act_dram=act_dram, offchip_fc=offchip_fc, **options)
        except MemoryRefusal as error:
            if refusal is None:
                refusal = error
            last = error
        except SpecError as error:
            if refusal is None:
                raise
            last = error
    if str(last) == str(refusal):
        raise last
    moved = [what for what, policy in (("fully connected weights", fc_weights), ("activations", act_storage))
             if policy == "auto"]
    raise type(last)(f"{last} (with {' and '.join(moved)} in DRAM, tried as on-chip ones were refused "
                     f"too)") from None


def _map_network(network, cluster, *, act_dram, batch=BATCH, lr=LEARNING_RATE, formats=None,
                 dsp_fraction=DSP_FRACTION, bram_fraction=BRAM_FRACTION, max_multipliers=None, network_name=None,
                 fold_inputs=True, offchip_fc, buildable_balance=False, overlapped_update=False,
                 vector_words=VECTOR_WORDS, window_words=WINDOW_WORDS):
    """Map the training of ``network`` onto ``cluster``; ``act_dram``: the Act-RAMs and SFU
    masks of the slices on devices with DRAM live there.

    ``fold_inputs=False``: no engine folds input channels over several cycles (one
    tile per input channel), the engines the hardware generator builds;
    ``offchip_fc``: fully connected weights in the DRAM of every device that has one (the
    generator builds that at mini-batch 1, hw/memory/dram_weights.py); ``buildable_balance=True``: weight
    balancing moves only what the generator builds, rows of fully connected slices,
    all of a slice's to one node (:func:`mapping.balance.balance`); ``overlapped_update=True``:
    the weight update does not stop the engines (LayerSlice.overlapped_update: more weight
    copies, each layer one sample staler, EB one sample behind; docs/weight_versions.md);
    ``vector_words``: the widest output vector a fully connected layer hands on as one stream
    word, wider ones travel as maps (LayerSlice.out_map, mapping/partition/plan.py); ``window_words``:
    the widest EB window one stream word carries, wider ones travel in chunks of output
    channels (LayerSlice.eb_chunk)."""
    formats = formats or Formats()
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise SpecError(f"batch must be a positive integer, got {batch!r}")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not (math.isfinite(lr) and lr > 0):
        raise SpecError(f"lr must be a positive finite number, got {lr!r}")
    for name, fraction in (("dsp_fraction", dsp_fraction), ("bram_fraction", bram_fraction)):
        if not 0 < fraction <= 1:
            raise SpecError(f"{name} must be above 0 and at most 1, got {fraction!r}")
    if max_multipliers is not None and (not isinstance(max_multipliers, int) or max_multipliers < 1):
        raise SpecError(f"max_multipliers must be a positive integer, got {max_multipliers!r}")
    for name, value in (("vector_words", vector_words), ("window_words", window_words)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name} must be a positive integer, got {value!r}")
    try:
        training = Training(batch, lr, lr_constant(lr, batch, formats), lr_constant(lr, batch, formats))
    except ValueError as error:
        raise SpecError(str(error)) from None
    plans = plan_layers(network, vector_words, window_words)
    grad_bits = formats.grad_bits
    check_accumulators(plans, batch, grad_bits)
    node_budgets = budgets(cluster, dsp_fraction=dsp_fraction, bram_fraction=bram_fraction,
                           max_multipliers=max_multipliers)
    name = network_name or network.name

    def describe():
        return f"network '{name}' on cluster '{cluster.spec}'"

    def family_of(node):
        return node_budgets[node].device.family

    if buildable_balance and offchip_fc and any(b.device.dram_gb > 0 for b in node_budgets) and (
            batch > 1 or overlapped_update):
        raise SpecError(f"{describe()}: the hardware generator keeps fully connected weights in DRAM at "
                        f"mini-batch 1 without the overlapped update, not at mini-batch {batch}"
                        f"{' with it' if overlapped_update else ''}: keep them on chip (fc_weights 'chip')")
    if buildable_balance:
        _check_generator_layers(plans, describe)
    balance.check_total(plans, node_budgets, describe,
                        offchip_fc=offchip_fc and node_budgets[-1].device.dram_gb > 0, grad_bits=grad_bits,
                        act_dram=act_dram and any(b.device.dram_gb > 0 for b in node_budgets))

    def settle(local_weights):
        return _settle(plans, node_budgets, family_of, describe, batch, local_weights=local_weights,
                       fold_inputs=fold_inputs, offchip_fc=offchip_fc, buildable_balance=buildable_balance,
                       overlapped=overlapped_update, grad_bits=grad_bits, act_dram=act_dram)

    try:
        part, slices, blocks, hosted, stale = settle(local_weights=False)
    except SpecError as balanced:
        # Where balancing cannot place the weights, try keeping each on its own node; if
        # that fails too, the balancing attempt's reason (node, layer, numbers) is the
        # one to report: it is the mapping the user asked for.
        try:
            part, slices, blocks, hosted, stale = settle(local_weights=True)
        except SpecError:
            raise balanced from None
    stale_of_layer = {sl.plan.name: stale[id(sl)] for sl in slices}
    memory = _memory(slices, samples_held(plans, stale_of_layer), family_of, batch, buildable_balance,
                     overlapped_update, grad_bits)
    estimates = []
    for node, budget in enumerate(node_budgets):
        # with fewer samples in flight than balancing assumed, no memory is deeper
        mem = memory.node(slices, node, hosted[node].values())
        if mem.bram_blocks > budget.blocks:
            raise RuntimeError(f"{describe()}: node {node} needs {mem.bram_blocks} blocks after "
                               f"balancing, over its {budget.blocks}")  # balance guarantees this
        mine = [sl for sl in slices if sl.node == node]
        hosted_ranges = len({(b.owner, b.layer) for b in blocks if b.host == node})
        # each hosted range's BGB updates its BPRAM with the same multipliers as an LGB
        mult = sum(_multipliers(sl, family_of(node)) for sl in mine) + \
            hosted_ranges * resources.update_multipliers(False)
        lut, ff = logic_estimate(len(mine), sum(sl.plan.needs_eb for sl in mine), mult, mem.lut,
                                 family_of(node))
        ff += mem.ff + sum(resources.skid_ff((sl.in_range[1] - sl.in_range[0]) // sl.plan.unit_inputs,
                                             sl.plan.mode == "icp" and sl.plan.needs_eb and not sl.last)
                           for sl in mine)
        links = resources.link_cores(node, len(node_budgets))
        with_links = lut + resources.link_core_luts(node, len(node_budgets), family_of(node))
        if with_links > budget.device.lut:
            raise SpecError(f"{describe()}: node {node} ({budget.device.name}) needs about {with_links:,} "
                            f"LUTs ({len(mine)} layer slices, {mult} multipliers, distributed RAM and "
                            f"{links} link core{'s' * (links != 1)}), more than its {budget.device.lut:,}")
        estimates.append(Resources(dsp=mult, bram_blocks=mem.bram_blocks, bram_bits=mem.bits,
                                   lut=lut, ff=ff))

    summary = perf.evaluate(plans, slices, blocks, node_budgets, estimates, cluster.link_gbps, batch, grad_bits,
                            formats.psum_bits)
    nodes = _node_configs(plans, slices, blocks, memory.buffers, stale, node_budgets, estimates, summary,
                          formats, training)
    nodes = [_with_update_lanes(node, budget.device, max_multipliers, len(nodes))
             for node, budget in zip(nodes, node_budgets)]
    _check_dram(nodes, node_budgets, describe)
    result = _summary_dict(summary, part, node_budgets)
    if buildable_balance:
        _check_inventory(nodes, describe)
        _check_generated(nodes, describe)
        # The generated nodes stop their engines for the weight update's walk, or with
        # overlapped_update for the part of it past a sample period (docs/node_dataflow.md,
        # "Weight updates"); the samples/s above do not count it.
        result["samples_per_s_with_updates"] = min(
            [summary["link_samples_per_s"]] + [budget.clock_hz / node.cycles_per_sample_with_updates
                                               for node, budget in zip(nodes, node_budgets)])
    return Mapping(name, cluster.spec, tuple(nodes), result)


def narrow_grad_bits(batch):
    """The gradient sums' width where exact ones do not fit a cluster's memory or links: the
    narrowest that trained within a point of float aligned SGD on every seed measured
    (docs/numerics.md, "Gradient sums: width by evidence"): 16 bits at mini-batch 1; at 16,
    16-bit sums fell 1.4 points short on one seed of three and 24-bit ones did not."""
    return 16 if batch == 1 else 24


def grad_bits_warning(grad_bits, batch):
    """A warning for gradient sums narrower than the evidence supports at ``batch``, or None."""
    if grad_bits >= narrow_grad_bits(batch):
        return None
    return (f"{grad_bits}-bit gradient sums trained 1.4 points below float aligned SGD on one seed of three "
            f"at mini-batch 16 (docs/numerics.md); at mini-batch {batch} the evidence supports "
            f"{narrow_grad_bits(batch)} bits or more")


def map_with_default_gradient_sums(network, cluster, *, update="stop", **options):
    """:func:`map_network` with the gradient sums' default width: exact (ACC_BITS) where the
    cluster has the memory and the links for them, else :func:`narrow_grad_bits`: where exact
    sums are refused, or leave the chain link bound and narrow ones map at a higher rate. The
    Mapping's formats record the width chosen; ``formats.grad_bits`` is taken as the exact
    default (other fields are kept). With ``update`` "auto" the two updates are compared each
    at its own default width."""
    return _with_update(_map_with_default_gradient_sums, network, cluster, update, options)


def _map_with_default_gradient_sums(network, cluster, *, formats=None, batch=BATCH, **options):
    formats = formats or Formats()
    options["batch"] = batch
    narrow = replace(formats, grad_bits=narrow_grad_bits(batch), grad_frac=None, bias_grad_frac=None)
    try:
        exact = map_storage(network, cluster, formats=formats, **options)
    except SpecError as refusal:
        try:
            return map_storage(network, cluster, formats=narrow, **options)
        except SpecError as narrow_refusal:
            if str(narrow_refusal) == str(refusal):
                raise
            raise SpecError(f"{narrow_refusal} (with {narrow.grad_bits}-bit gradient sums, tried as exact "
                            f"{ACC_BITS}-bit ones were refused too)") from None
    if exact.summary["limited_by"] != "link bandwidth":
        return exact
    faster = map_storage(network, cluster, formats=narrow, **options)
    return faster if faster.summary["samples_per_s"] > exact.summary["samples_per_s"] else exact


# The partial sums' width where exact ones leave a chain link bound (numerics, "Partial sums";
# docs/numerics.md: VGG-16 on 85 VC709s at 150 Gb/s goes from link bound to compute bound).
NARROW_PSUM_BITS = 32


def with_default_partial_sums(mapper, network, cluster, **options):
    """``mapper(network, cluster, **options)`` with the partial sums' default width: exact
    (``formats.psum_bits``, other fields kept) unless that mapping is link bound and one with
    NARROW_PSUM_BITS maps at a higher rate."""
    exact = mapper(network, cluster, **options)
    if exact.summary["limited_by"] != "link bandwidth":
        return exact
    formats = exact.nodes[0].formats
    narrow = mapper(network, cluster, **{**options, "formats": replace(formats, psum_bits=NARROW_PSUM_BITS)})
    return narrow if narrow.summary["samples_per_s"] > exact.summary["samples_per_s"] else exact


def mapper_for_widths(grad_bits, psum_bits):
    """The mapper (``map_network``'s signature, picklable) the command-line tools use for the
    ``--grad-bits`` and ``--psum-bits`` given: each width not given (None) at its default
    (:func:`map_with_default_gradient_sums`, :func:`with_default_partial_sums`); the formats
    passed carry the ones given."""
    mapper = map_with_default_gradient_sums if grad_bits is None else map_network
    return partial(with_default_partial_sums, mapper) if psum_bits is None else mapper


def dram_bytes_held(config):
    """(activation bytes, weight bytes) NodeConfig ``config`` keeps in its DRAM: every DRAM
    queue, as deep as it is built (memories.dram_queues), and its fully connected weights off
    chip, 16 bits each (their gradients never go to DRAM: mapping/perf.py, FC dataflow)."""
    acts = sum(width * depth for s in config.slices for _, width, depth, _ in memories.dram_queues(s))
    weights = sum(s.weight_words * WORD_BITS for s in config.slices if s.weights_offchip)
    return acts / 8, weights / 8


def _check_dram(nodes, node_budgets, describe):
    """Refuse a node whose DRAM cannot hold what the mapping keeps there (a GB is 10^9 bytes)."""
    for node, budget in zip(nodes, node_budgets):
        acts, weights = dram_bytes_held(node)
        device = budget.device
        if acts + weights > device.dram_gb * 1e9:
            raise SpecError(f"{describe()}: node {node.index} ({device.name}) needs {acts + weights:,.0f} bytes of "
                            f"DRAM ({acts:,.0f} for the activations and masks of the samples in flight, "
                            f"{weights:,.0f} for fully connected weights) but has {device.dram_gb * 1e9:,.0f}")


def _check_generator_layers(plans, describe):
    """Refuse up front a layer the generator does not build: a grouped OCP convolution, a max-pool
    its SFU does not build, pixels too wide for one stream word."""
    for plan in plans:
        problem = (memories.groups_problem(plan.groups, plan.mode)
                   or memories.pool_problem(plan.pool, *plan.out_shape[1:])
                   or memories.pixel_word_problem(plan.in_shape[0] // plan.unit_inputs,
                                                  (plan.out_map or plan.out_shape)[0]))
        if problem:
            raise SpecError(f"{describe()}: layer '{plan.name}': {problem}")


def _check_generated(nodes, describe):
    """Refuse a mapping hw/ would refuse to build (mapping/memories.generator_problem): what
    ``python -m mapping --for-hardware`` writes, ``python -m hw.build`` builds."""
    for node in nodes:
        for s in node.slices:
            problem = memories.generator_problem(s, node.formats.grad_bits, node.training.batch)
            if problem:
                raise SpecError(f"{describe()}: node {node.index}: {problem}")


def _check_inventory(nodes, describe):
    """Each node's block RAM as hw/ builds it (mapping/memories.py) is what the node was
    planned and held to its budget with (balance.ExactMemory): both come from one
    construction of its slices, so a difference is a bug."""
    for node in nodes:
        built = memories.node_bram_blocks(node)
        if built != node.estimate.bram_blocks:
            raise RuntimeError(f"{describe()}: node {node.index} was planned with "
                               f"{node.estimate.bram_blocks} blocks of 18 Kb, but hw/ builds {built}")


def _multipliers(sl, family):
    """Engine and update multipliers of a slice as the generator builds it."""
    plan = sl.plan
    engines = plan.engines * tile_multipliers(plan.kernel, family) * sl.shape.P * sl.shape.b
    owns_biases = plan.bias and (plan.mode == "ocp" or sl.last)
    return engines + resources.update_multipliers(owns_biases)


def _settle(plans, node_budgets, family_of, describe, batch, *, local_weights, fold_inputs,
            offchip_fc, buildable_balance, overlapped, grad_bits=ACC_BITS, act_dram=False):
    """Partition and balance until the samples in flight the Act-RAMs were sized for
    cover those the resulting timing needs.

    The partitioner reserves only part of each weight memory whose rows may move
    (Partitioner._memory; with ``buildable_balance`` those of fully connected layers); where balancing
    then finds no room for the rest, a longer period (smaller engines, narrower
    memories, work spread closer to the coarse proportions) is tried, up to
    BALANCE_RETRIES times; if none balances, the first refusal is raised."""
    estimate = {p.name: 2 for p in plans}
    period, refusals = 0, []
    for _ in range(MAX_STALE_ROUNDS + BALANCE_RETRIES):
        # buffers only grow from round to round, so the last period bounds the next
        try:
            part = partition(plans, node_budgets, samples_held=samples_held(plans, estimate), at_least=period,
                             describe=describe,
                             batch=batch, link_latency_cycles=balance.LINK_LATENCY_CYCLES,
                             local_weights=local_weights, buildable_balance=buildable_balance,
                             fold_inputs=fold_inputs, offchip_fc=offchip_fc, overlapped_update=overlapped,
                             grad_bits=grad_bits, act_dram=act_dram)
        except SpecError:
            if refusals:  # no longer period partitions: balancing was what failed
                raise refusals[0] from None
            raise
        period = part.period
        slices = part.slices
        memory = _memory(slices, samples_held(plans, estimate), family_of, batch, buildable_balance, overlapped,
                         grad_bits)
        try:
            blocks, hosted = balance.balance(slices, node_budgets, memory, describe,
                                             buildable=buildable_balance)
        except SpecError as error:
            refusals.append(error)
            if len(refusals) > BALANCE_RETRIES:
                raise refusals[0] from None  # the one at the shortest period
            period += period // 4
            continue
        stale = perf.fp_stale(plans, slices, node_budgets, perf.period(slices, node_budgets, batch), batch,
                              overlapped)
        grown = {sl.plan.name: stale[id(sl)] for sl in slices if stale[id(sl)] > estimate[sl.plan.name]}
        if not grown:
            return part, slices, blocks, hosted, stale
        for name, value in grown.items():
            estimate[name] = max(estimate[name], value)
    raise RuntimeError(f"{describe()}: samples in flight did not settle after "
                       f"{MAX_STALE_ROUNDS} rounds: {estimate}")


def _memory(slices, held, family_of, batch, exact, overlapped=False, grad_bits=ACC_BITS):
    """The model a mapping's node memory is priced with, the buffers of each slice sized for
    the samples its layer holds (``held``, by layer name): with ``exact`` (the generator's
    mappings) the memories hw/ builds, else the coarse model of mapping/balance.py, with
    gradient sums of ``grad_bits``."""
    buffers = {id(sl): replace(_buffers(sl, held[sl.plan.name], family_of, batch, grad_bits),
                               overlapped_update=overlapped)
               for sl in slices}
    if exact:
        return balance.ExactMemory(buffers, family_of, grad_bits)
    return balance.CoarseMemory(buffers, family_of, grad_bits)


def samples_held(plans, stale_of_layer):
    """Samples each layer's Act-RAM and SFU masks hold from FP until its errors return (by
    layer name): its own ``fp_stale``, or the previous layer's where that is larger. That
    layer's update waits until its FP has run its ``fp_stale`` samples ahead of its PG, and
    this layer's FP must take those samples first (docs/weight_versions.md, "No circular
    wait")."""
    return {p.name: max(stale_of_layer[p.name], stale_of_layer[plans[l - 1].name] if l else 0)
            for l, p in enumerate(plans)}


def _buffers(sl, samples, family_of, batch, grad_bits=ACC_BITS):
    return balance.fixed_buffers(sl.plan, sl.units, sl.shape, samples, family_of(sl.node),
                                 first=sl.first, last=sl.last,
                                 latency_cycles=balance.LINK_LATENCY_CYCLES,
                                 gradient_batch=batch if sl.offchip else 0, grad_bits=grad_bits,
                                 act_storage=sl.act_storage)


def _node_configs(plans, slices, blocks, buffers, stale, node_budgets, estimates, summary, formats,
                  training):
    nodes = []
    fwd, bwd = summary["link_bytes_forward"], summary["link_bytes_backward"]
    n = len(node_budgets)
    for node, budget in enumerate(node_budgets):
        layer_slices = []
        for sl in (s for s in slices if s.node == node):
            # remote_weights filled below, once every slice exists
            cycles = perf.cycles(sl, budget, training.batch)
            layer_slices.append(balance.layer_slice(sl, buffers[id(sl)], stale[id(sl)],
                                                    cycles_per_sample=cycles))
        nodes.append(NodeConfig(
            index=node, device=budget.device.name, family=budget.device.family,
            clock_mhz=budget.device.clock_mhz, slices=tuple(layer_slices),
            hosted=(), formats=formats, training=training,
            estimate=estimates[node], cycles_per_sample=summary["nodes"][node].cycles,
            link_bytes_forward=int(fwd[node]) if node < n - 1 else 0,
            link_bytes_backward=int(bwd[node - 1]) if node > 0 else 0))
    return _with_blocks(nodes, blocks)


def _with_blocks(nodes, blocks):
    """Each WeightBlock, carrying its owner's slice cut to its rows, on its owner's slice
    (``remote_weights``), on its host (``hosted``) and on the nodes in between (``relays``)."""
    # a node holds two slices of a grouped layer where its channels cross a group boundary
    slice_of = {(node.index, s.layer, s.in_range): s for node in nodes for s in node.slices}
    blocks = [replace(b, owner_slice=replace(slice_of[b.owner, b.layer, b.in_range], out_range=b.out_range))
              for b in blocks]

    def between(b, node):
        return min(b.host, b.owner) < node < max(b.host, b.owner)

    return [replace(node, hosted=tuple(b for b in blocks if b.host == node.index),
                    relays=tuple(b for b in blocks if between(b, node.index)),
                    slices=tuple(replace(s, remote_weights=tuple(b for b in blocks if b.owner == node.index
                                                                 and (b.layer, b.in_range) == (s.layer, s.in_range)))
                                 for s in node.slices))
            for node in nodes]


def _with_update_lanes(node, device, max_multipliers, nodes):
    """Widen the weight update of the slice with the node's longest walk, a lane count at a
    time (``nodeconfig.update_lane_counts``), while that shortens the walk, the walk still
    costs the node more than UPDATE_SHARE of its cycles per sample, and the device (or
    ``max_multipliers``) has the multipliers and the LUTs (LOGIC_FRACTION, the node's link
    cores counted) for it: the engines wait out the walk once per mini-batch. The bias walks
    and the hosted rows' BGBs (one lane) are a floor no weight lane lowers."""
    shift, f = node.formats.weight_update_shift, node.formats
    multipliers = device.dsp if max_multipliers is None else min(device.dsp, max_multipliers)
    luts = LOGIC_FRACTION * device.lut - resources.link_core_luts(node.index, nodes, node.family)
    floor = max([s.bias_update_cycles(f.bias_update_shift) for s in node.slices]
                + [b.owner_slice.update_cycles(shift) for b in node.hosted], default=0)
    slices, estimate = list(node.slices), node.estimate
    while slices:
        walks = [s.update_cycles(shift) for s in slices]
        k = max(range(len(slices)), key=walks.__getitem__)
        s = slices[k]
        so_far = replace(node, slices=tuple(slices))
        if so_far.cycles_per_sample_with_updates <= so_far.cycles_per_sample * (1 + UPDATE_SHARE):
            break
        # lazily: a large layer has hundreds of lane counts, and the next one usually shortens the walk
        wider = (replace(s, update_lanes=n) for n in update_lane_counts(s.fp.ces, s.fp.tiles * s.kernel ** 2)
                 if n > s.update_lanes)
        wider = next((w for w in wider if w.update_cycles(shift) < walks[k]), None)
        if walks[k] <= floor or wider is None:
            break
        lut, ff, dsp = resources.update_lane_logic(wider.update_lanes - s.update_lanes, node.family)
        grown = replace(estimate, dsp=estimate.dsp + dsp, lut=estimate.lut + lut, ff=estimate.ff + ff)
        if grown.dsp > multipliers or grown.lut > luts:
            break
        slices[k], estimate = wider, grown
    return replace(node, slices=tuple(slices), estimate=estimate)


def _summary_dict(summary, part, node_budgets):
    """The JSON-friendly performance figures stored in Mapping.summary."""
    result = {k: v for k, v in summary.items() if k != "nodes"}
    result["per_node"] = [vars(p) | {} for p in summary["nodes"]]
    result["coarse_groups"] = [list(map(list, g)) for g in part.coarse]
    result["sized_period_s"] = part.tau
    result["usable_multipliers"] = [b.multipliers for b in node_budgets]
    result["usable_blocks"] = [b.blocks for b in node_budgets]
    if math.isinf(result["link_samples_per_s"]):
        result["link_samples_per_s"] = None
    return result
