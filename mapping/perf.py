"""Performance model of a mapping: throughput, idle stages, link and memory demand, scaling.

Assumptions
-----------
- Clock: each node runs at its device's ``clock_mhz`` (mapping/devices.py says
  why for each device; 200 MHz for the VC709). Cycle counts come from the
  engine shapes (mapping/partition/cost.py): a node's engines run concurrently, so
  its cycles per sample are the maximum of its slices' FP, EB, PG cycles and of
  the transfer time of all its DRAM traffic (one DRAM per node, at the device's
  ``dram_gbps``, reads and writes sharing it): its fully connected weights in DRAM
  (FC dataflow below) and, for the slices whose activations live there
  (``act_storage`` "dram", mapping/balance.py), every bit of their Act-RAM and SFU
  mask queues written once and read back once per sample
  (:func:`mapping.partition.slice_dram_bytes`). The DRAM's latency is taken as covered
  by the staging FIFOs, not modelled; an FC stage's pass (``fc_stage``) counts the weight
  reads only.
- Pipeline: every node works on one sample per period; the period is the
  slowest node's cycles / clock, throughput = 1 / period (compute bound). Links
  cap it at ``link_gbps / (8 * bytes per sample)`` of the busiest link direction
  (link bound); the roofline is the smaller of the two.
- Operations: one MAC is 2 operations. Useful MACs per sample are the network's
  FP + EB + PG multiply-accumulates (mapping/network.py; no EB for the first
  weighted layer). GOPS = 2 x useful MACs x samples/s.
- Idle pipeline stages: ``1 - sum(useful MACs per sample) / sum(allocated
  multipliers x period cycles)`` per node and over the chain: the share of
  allocated multiplier-cycles that do no useful work (tile rounding, channel
  groups that do not fill the engines, strided rasters, nodes faster than the
  slowest). Multipliers not allocated (DSP headroom) are not counted.
- Latency: in steady state a layer streams one sample per period. Its output
  starts once the rows its first SFU output needs have arrived (the whole input
  before a fully connected layer), errors flow back the same way, each link hop
  adds :data:`mapping.balance.LINK_LATENCY_CYCLES`, and a conv layer with weights on
  another node (used weight-stationary, mapping/balance.py) adds one period (an FC
  layer waits for its whole input anyway and uses streamed rows as they arrive).
  ``D`` = time from the FP of a sample on a slice to the start of its PG;
  ``fp_stale = floor(D / period) + 1`` samples are in flight there, capped at the
  next layer's ``fp_stale + 1`` where that layer is a convolution and ``+ B`` where it
  is fully connected (docs/weight_versions.md: beyond the first the updates run in
  sequence down the chain, beyond the second the two layers' update gates would wait
  for each other); it fixes the weight version each FP uses and, with the previous
  layer's, sizes the Act-RAM.

FC dataflow (fully connected layers with weights in DRAM)
---------------------------------------------------------
The model of paper-scale classifiers, which the paper keeps on the last devices
with off-chip memory; the simulated hardware keeps its small FC layers on chip,
like convolutions. B is the mini-batch, d the slice's ``fp_stale``.

- One pass per sample period streams the slice's weights from DRAM once
  (:data:`mapping.partition.FC_READ_BYTES` = 2 bytes per weight): each weight
  tile read feeds both the FP engine (sample s) and the EB engine (sample
  s - d). Both need the same weight version, ``(s - d) // B``
  (docs/weight_versions.md; ``mapping.golden.train``), so one read serves both exactly.
- The weight gradient is not accumulated per sample. The slice keeps the input
  activations and output errors of the mini-batch's samples on chip
  (``B * (S + O)`` words, mapping/balance.py). In the pass whose EB handles the
  mini-batch's last sample, PG forms each weight's gradient once, exactly, from
  those vectors (B products summed in a 48-bit DSP accumulator: the gradient
  read-modify-write happens once per mini-batch, inside PG), the update is applied
  to the weight the pass has just read, and the pass writes the new weight back
  (:data:`mapping.partition.FC_UPDATE_BYTES` = 2 bytes per weight per mini-batch).
  No 48-bit gradient goes to DRAM. (Keeping a 48-bit accumulator in DRAM and
  read-modify-writing it once per mini-batch would add 12 bytes per weight per
  mini-batch: 16 bytes per sample at B = 1, no better than the per-sample
  dataflow, and a burst of seven passes at every mini-batch boundary.)
- So a weight costs ``2 + 2 / B`` DRAM bytes per sample on average (4 at B = 1,
  against 16 for separate FP and EB reads and a per-sample gradient
  read-modify-write), which sets the slice's cycles per sample. For B > 1 the
  update pass is longer than the others (its write, and B times the PG work);
  it delays that pass's FP and EB results by ``max(0, pass + update - period)``
  in the worst case, so an FC stage's latency (for ``fp_stale``) is one pass plus
  that delay.
- The mini-batch is bounded by the exact 48-bit accumulators
  (``mapping.mapper.check_accumulators``): VGG's 224x224 first layers admit
  B <= 2, AlexNet's 55x55 conv1 B <= 43.

Link traffic per sample (bytes) follows docs/node_dataflow.md: forward, the
bypassed input activations for later nodes of an ICP layer (16 bit), the partial
sums to the next node (48 bit, exact; in a grouped layer those of the groups reached so
far, and backward the output errors of those groups), the finished activations, OCP outputs
gathered along the layer, the label (one word), the BPRAM weights streamed to
their user (16 bit; conv rows once per sample, FC rows once for FP and once for EB,
:func:`remote_streams`); backward, the conv-output errors bypassed to earlier nodes
of the layer, the computed input errors (ICP) or the EB partial sums (OCP, 48 bit),
and the per-sample gradients of BPRAM weights (48 bit) to their host.
"""

from dataclasses import dataclass
import math

import numpy as np

from . import link_model
from .balance import LINK_LATENCY_CYCLES
from .numerics import ACC_BITS, WORD_BITS
from .partition import FC_READ_BYTES, FC_UPDATE_BYTES, slice_cycles, slice_dram_bytes
from .resources import link_core_blocks


def dram_cycles(sl, budget, batch):
    """Average DRAM cycles per sample of a slice's own DRAM traffic: FC weights off chip,
    activations in DRAM (0 with neither)."""
    traffic = slice_dram_bytes(sl, batch)
    return math.ceil(traffic / budget.dram_bytes_per_s * budget.clock_hz) if traffic else 0


def cycles(sl, budget, batch):
    """Cycles per sample of one slice: engines and, off chip, its own DRAM traffic."""
    return max(slice_cycles(sl.plan, sl.shape), dram_cycles(sl, budget, batch))


def node_cycles(slices, node_budgets, batch):
    """Cycles per sample of every node: its slowest engine, or its one DRAM serving all
    its slices' FC weights and activations."""
    engines = [0] * len(node_budgets)
    dram = [0.0] * len(node_budgets)
    for sl in slices:
        engines[sl.node] = max(engines[sl.node], slice_cycles(sl.plan, sl.shape))
        dram[sl.node] += slice_dram_bytes(sl, batch)
    return [max(e, math.ceil(d / b.dram_bytes_per_s * b.clock_hz)) if d else e
            for e, d, b in zip(engines, dram, node_budgets)]


def period(slices, node_budgets, batch):
    return max(c / b.clock_hz for c, b in zip(node_cycles(slices, node_budgets, batch), node_budgets))


def fc_stage(sl, budget, batch, tau, dram_weights):
    """Seconds from an FC slice's input to its output (FP) or from its output errors to
    its input errors (EB): one pass, plus the worst delay of the mini-batch's update.
    ``dram_weights``: the FC weights the node's DRAM serves (all its FC slices)."""
    engines = slice_cycles(sl.plan, sl.shape) / budget.clock_hz
    if not sl.offchip:
        return engines
    read = max(engines, dram_weights * FC_READ_BYTES / budget.dram_bytes_per_s)
    update = max(dram_weights * FC_UPDATE_BYTES / budget.dram_bytes_per_s, batch * engines)
    return read + max(0.0, read + update - tau)


def _by_layer(slices, count):
    groups = [[] for _ in range(count)]
    for sl in slices:
        groups[sl.plan.index].append(sl)
    return groups


def _first_rows(plan):
    """Input rows layer ``plan`` needs before its first SFU output row."""
    rows = 1 if plan.pool is None else plan.pool.kernel - plan.pool.padding
    return min(plan.in_shape[1], max(1, (rows - 1) * plan.stride + plan.kernel - plan.padding))


def _first_error_rows(plan):
    """Rows of the error map of the SFU output EB needs before its first input-error row."""
    conv_rows = plan.padding // plan.stride + 1
    pooled = conv_rows if plan.pool is None else -(-conv_rows // plan.pool.stride)
    return min(plan.sfu_shape[1], pooled)


def fp_stale(plans, slices, node_budgets, tau, batch, overlapped=False):
    """Samples in flight between FP and PG of every slice (keyed by id(slice)). ``overlapped``:
    one more everywhere, for the update that does not stop the engines: EB of a mini-batch's
    first sample still uses the old weights, and so FP of one more sample
    (docs/weight_versions.md)."""
    layers = _by_layer(slices, len(plans))
    hop = [LINK_LATENCY_CYCLES / node_budgets[n].clock_hz / tau for n in range(len(node_budgets))]
    dram_weights = [0] * len(node_budgets)
    for sl in slices:
        if sl.offchip:
            dram_weights[sl.node] += sl.units * sl.plan.weights_per_unit

    def spent(group):
        """Share of a period the slowest slice of an FC layer needs for FP (or for EB)."""
        return max(fc_stage(sl, node_budgets[sl.node], batch, tau, dram_weights[sl.node])
                   for sl in group) / tau

    fwd, bwd = [], []
    for l, (plan, group) in enumerate(zip(plans, layers)):
        a, b = group[0].node, group[-1].node
        nxt = layers[l + 1][0].node if l + 1 < len(plans) else b
        hops = (max(b, nxt) - a) * hop[a]
        if plan.kind == "fc":
            f = spent(group)
        elif l + 1 == len(plans) or plans[l + 1].kind == "fc":
            f = 1.0  # a fully connected layer (or the loss) needs the whole output
        else:
            f = _first_rows(plan) / plan.in_shape[1]
        if plan.kind == "conv" and any(sl.remote_rows for sl in group):
            # conv rows from BPRAM are applied weight-stationary, after the whole sample; an
            # FC slice waits for its whole input anyway and uses the rows as they stream in
            f += 1.0
        fwd.append(f + hops)
        if plan.kind == "fc":
            e = spent(group)
        else:
            e = _first_error_rows(plan) / plan.sfu_shape[1]
        bwd.append(e + hops)
    result, cap, after = {}, math.inf, None  # ``after``: the next layer's fp_stale, if its weights are in DRAM
    for l in reversed(range(len(layers))):
        d = sum(fwd[l:]) + sum(bwd[l + 1:])
        stale = min(math.floor(d) + 1, cap)
        dram = any(sl.offchip for sl in layers[l])
        if dram and after is not None:
            # Weights in DRAM tie each pass's FP of sample s to EB of s - k (hw/memory/
            # dram_weights.py), so EB's errors of s - k must not wait for this FP: they come from
            # the next layer's EB of s - k, which a next layer in DRAM does in the pass of its
            # FP of s - k + k_next, fed by this layer's FP of that sample: k > k_next.
            stale = max(stale, after + 1)
        after = stale if dram else None
        for sl in layers[l]:
            result[id(sl)] = stale
        # This layer's update waits for its FP to run fp_stale samples past the mini-batch,
        # and that FP feeds the next layer's, which its own gate holds at that layer's
        # fp_stale until its update. A convolution takes its input through a line buffer of
        # a few rows, so this FP gets about one sample past that hold (more, and this
        # update waits for the next one's, its PG's input backs up, and the backlog costs
        # every later mini-batch: docs/weight_versions.md, "Updates in sequence"); a fully
        # connected layer's Act-RAM takes whole samples, and up to B more (beyond that the
        # two gates would wait for each other: "No circular wait"). Where the update does not
        # stop the engines, one more before a fully connected layer: the FIFO in front of its
        # FP gate holds whole samples (a window each, at least PAB_MIN_DEPTH), and without it
        # the two layers' gates wait for each other every sample at B = 1 (docs/weight_versions.md).
        cap = stale + (1 if plans[l].kind == "conv" else batch + overlapped)
    return {key: stale + overlapped for key, stale in result.items()}


def link_traffic(plans, slices, blocks, n, grad_bits=ACC_BITS, psum_bits=ACC_BITS):
    """Words per sample on every link, as the link cores carry them: (forward i -> i+1, backward
    i+1 -> i), each a list of n-1 lists of (words, bits per word). A word is one beat of a
    node's stream (docs/node_dataflow.md): a pixel of its channels, a group of P partial sums
    (``psum_bits`` each)."""
    fwd, bwd = [[] for _ in range(max(n - 1, 0))], [[] for _ in range(max(n - 1, 0))]
    layers = _by_layer(slices, len(plans))

    def over(links, a, b, words, bits):  # links between nodes a < b
        for link in range(a, b):
            links[link].append((words, bits))

    def pixels(links, link, channels, h, w):
        if channels:
            links[link].append((h * w, channels * WORD_BITS))

    first_node = layers[0][0].node
    c0, h0, w0 = plans[0].in_shape
    over(fwd, 0, first_node, h0 * w0, c0 * WORD_BITS)  # the image, from the host at node 0
    over(fwd, 0, layers[-1][-1].node, 1, WORD_BITS)      # the label travels to the loss
    for l, (plan, group) in enumerate(zip(plans, layers)):
        c_in, h, w = plan.in_shape
        oc, oh, ow = plan.out_shape
        _, ph, pw = plan.sfu_shape
        for prev, sl in zip(group, group[1:]):
            if sl.node == prev.node:  # a grouped layer's two slices on one node
                continue
            link = sl.node - 1
            if plan.mode == "icp":
                pixels(fwd, link, c_in - sl.in_range[0], h, w)
                lanes = prev.shape.P
                # the partial sums some slice has added to so far (of every output channel
                # but in a grouped layer, where later groups' start on their first slice),
                # and the output errors the slices up to prev use
                reached = (plan.group_of(prev.lo) + 1) * plan.group_full
                fwd[link].append((-(-reached // lanes) * oh * ow, lanes * psum_bits))
                pixels(bwd, link, reached, oh, ow)
                if plan.needs_eb:
                    pixels(bwd, link, c_in - sl.in_range[0], h, w)
            else:
                pixels(fwd, link, c_in, h, w)
                pixels(fwd, link, sl.lo, ph, pw)
                pixels(bwd, link, prev.hi, ph, pw)
                if plan.needs_eb:
                    bwd[link].append((h * w, c_in * psum_bits))
        if l + 1 < len(plans):
            c, ph, pw = plan.sfu_shape
            over(fwd, group[-1].node, layers[l + 1][0].node, ph * pw, c * WORD_BITS)
            over(bwd, group[-1].node, layers[l + 1][0].node, ph * pw, c * WORD_BITS)
    plan_of = {p.name: p for p in plans}
    for block in blocks:
        lo, hi = sorted((block.host, block.owner))
        weights, grads = (fwd, bwd) if block.host < block.owner else (bwd, fwd)
        rows = block.out_range[1] - block.out_range[0]
        row = block.words // rows  # the model's word: one output channel's row of weights
        over(weights, lo, hi, rows * remote_streams(plan_of[block.layer]), row * WORD_BITS)
        over(grads, lo, hi, rows, row * grad_bits)
    return fwd, bwd


def link_line_bits(traffic, opposite, core=link_model.LinkCore()):
    """Line bits per sample of one link direction's ``traffic`` on a saturated link core whose
    other direction carries ``opposite``: data frames in bursts, the control frames that return the
    other direction's ACKs and credits, IDLEs (:func:`mapping.link_model.sample_flits`)."""
    return link_model.sample_flits(traffic, opposite, core) * core.lane_width


def remote_streams(plan):
    """Times per sample the host streams a remote row of ``plan`` to its owner.

    A conv row is applied weight-stationary (mapping/balance.py): one stream serves FP,
    EB and PG. An FC row is used once by FP and once by EB, which run on different
    samples at different times, each in its engine's order: two streams (one without
    EB)."""
    if plan.kind == "conv":
        return 1
    return 2 if plan.needs_eb else 1


@dataclass(frozen=True)
class NodePerf:
    cycles: int
    multipliers: int
    useful_macs: int
    dsp_util: float
    bram_util: float
    idle: float
    gops: float
    link_gbps: float        # busiest of the node's four link directions
    dram_gbps: float
    onchip_bits: int
    link_blocks: int        # 18 Kb blocks of its link endpoints (resources.link_core_blocks)


def evaluate(plans, slices, blocks, node_budgets, estimates, link_gbps, batch, grad_bits=ACC_BITS,
             psum_bits=ACC_BITS):
    """Figures of a mapping; ``estimates[d]`` is node d's Resources, ``link_gbps`` per pair,
    ``grad_bits`` the width of the gradients hosted rows' owners send back, ``psum_bits`` that
    of the partial sums between slices."""
    n = len(node_budgets)
    tau = period(slices, node_budgets, batch)
    rate = 1 / tau
    cyc = node_cycles(slices, node_budgets, batch)
    traffic = link_traffic(plans, slices, blocks, n, grad_bits, psum_bits)
    fwd, bwd = (np.array([sum(words * bits for words, bits in link) / 8 for link in links]) for links in traffic)
    fwd_traffic, bwd_traffic = traffic
    line_bits = np.array([link_line_bits(a, b) for a, b in zip(fwd_traffic, bwd_traffic)]
                         + [link_line_bits(b, a) for a, b in zip(fwd_traffic, bwd_traffic)])
    nodes = []
    for d, budget in enumerate(node_budgets):
        mine = [sl for sl in slices if sl.node == d]
        mult = sum(sl.multipliers for sl in mine)
        useful = sum(sl.useful_macs for sl in mine)
        alloc = mult * tau * budget.clock_hz
        links = [fwd[d] if d < n - 1 else 0, bwd[d] if d < n - 1 else 0,
                 fwd[d - 1] if d else 0, bwd[d - 1] if d else 0]
        dram = sum(slice_dram_bytes(sl, batch) for sl in mine)
        device = budget.device
        # the up endpoint receives the forward channels of link d - 1, the down one the backward of link d
        ends = ([(fwd_traffic[d - 1], fwd_traffic[d - 1] + bwd_traffic[d - 1])] if d else []) + \
               ([(bwd_traffic[d], fwd_traffic[d] + bwd_traffic[d])] if d < n - 1 else [])
        nodes.append(NodePerf(
            cycles=cyc[d], multipliers=mult, useful_macs=useful,
            dsp_util=estimates[d].dsp / device.dsp,
            bram_util=estimates[d].bram_blocks / (device.bram_blocks + 16 * device.uram_blocks),
            idle=1 - useful / alloc if alloc else 0.0,
            gops=2 * useful * rate / 1e9, link_gbps=max(links) * 8 * rate / 1e9,
            dram_gbps=dram * 8 * rate / 1e9, onchip_bits=estimates[d].bram_bits,
            link_blocks=sum(link_core_blocks([bits for _, bits in received], [bits for _, bits in channels],
                                             device.family) for received, channels in ends)))
    useful = sum(p.useful_macs for p in nodes)
    alloc = sum(p.multipliers * tau * b.clock_hz for p, b in zip(nodes, node_budgets))
    per_link = np.concatenate([fwd, bwd])
    gbps = np.concatenate([link_gbps, link_gbps]) if n > 1 else np.zeros(0)
    limits = [g * 1e9 / bits for g, bits in zip(gbps, line_bits) if bits > 0]
    link_rate = float(min(limits)) if limits else math.inf
    achieved = min(rate, link_rate)
    utilisation = line_bits * achieved / (gbps * 1e9) if n > 1 else np.zeros(0)
    busiest_line = int(np.argmax(utilisation)) if utilisation.size else None
    busiest = float(per_link.max()) if per_link.size else 0.0
    return {
        "period_s": tau,
        "compute_samples_per_s": rate,
        "link_samples_per_s": link_rate,
        "samples_per_s": min(rate, link_rate),
        "limited_by": "compute" if rate <= link_rate else "link bandwidth",
        "macs_per_sample": useful,
        "gops": 2 * useful * min(rate, link_rate) / 1e9,
        "gops_per_device": 2 * useful * min(rate, link_rate) / 1e9 / n,
        "idle": 1 - useful / alloc if alloc else 0.0,
        "busiest_link_bytes": busiest,
        "busiest_link_gbps": busiest * 8 * rate / 1e9,
        "nodes": nodes,
        "link_bytes_forward": fwd.tolist(),
        "link_bytes_backward": bwd.tolist(),
        # (words, bits per word) per channel per sample, link by link: what the link model prices
        "link_traffic_forward": [[list(t) for t in link] for link in fwd_traffic],
        "link_traffic_backward": [[list(t) for t in link] for link in bwd_traffic],
        "link_line_bits_forward": line_bits[:n - 1].tolist() if n > 1 else [],
        "link_line_bits_backward": line_bits[n - 1:].tolist() if n > 1 else [],
        # The link cores' line time (frames, CRC, ACK and credit frames, IDLEs; line code in
        # link_gbps) at the achieved rate, on the busiest link direction.
        "link_utilisation": float(utilisation[busiest_line]) if busiest_line is not None else 0.0,
        "busiest_link_line_gbps": float(line_bits.max()) * rate / 1e9 if line_bits.size else 0.0,
        "link_efficiency": (float(per_link[busiest_line] * 8 / line_bits[busiest_line])
                            if busiest_line is not None and line_bits[busiest_line] else 0.0),
    }
