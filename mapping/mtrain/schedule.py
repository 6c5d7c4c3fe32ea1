"""MTrain's Algorithm 1 (converting, duty-cycle re-partition) and Algorithm 2 (mapping), and HAP.

Algorithm 2 maps a workflow in three procedures: DRAM-budget-aware mapping
(each wave of sub-operations whose predecessors are mapped goes, over every
combination of accelerators that fits the DRAM, where it adds the least
latency), balance-aware re-mapping (towards sub-operation k on accelerator k)
and data-locality-aware re-mapping (a sub-operation, or a whole layer's, towards a
predecessor's or successor's accelerator); a move is kept only where it shortens
the mini-batch. Algorithm 1 starts from a ratio proportional to the accelerators'
DSPs (its PEs) and moves ``step`` samples from the least-busy accelerator to
another while that helps.

HAP (Zhang et al. 2024) as MTrain evaluates it (sections III-B, VI-C): every
layer sharded over all accelerators, each with a share, with one sharding ratio;
after each layer its outputs (in BP its losses) are gathered to the host and
scattered as the next layer's input; per layer data-parallel (batch shards, also
gradients gathered and weights returned) or tensor-parallel (channel shards, each
receiving the whole input), whichever moves less; the layer waits for its slowest
shard (synchronous). The host is the accelerator holding the images.
"""

from dataclasses import dataclass
import itertools

from ..errors import SpecError
from .workflow import (WORD_BYTES, Accelerator, Simulation, balanced_ratio, compiled, convert, data_home, dram_use,
                       fits, latency, start_and_bytes)

DSP_PER_FP32_MAC = 5   # a floating-point multiplier (3 DSP48) and adder (2 DSP48), full-DSP variants
MAX_PASSES = 3


def accelerator_of(device):
    """The training IP on one FPGA of the device database; refuses a board without DRAM."""
    if device.dram_gb <= 0:
        raise SpecError(f"device {device.name} has no off-chip DRAM, where MTrain's training IPs "
                        f"keep activations and losses until the weight update")
    flops = 2 * device.dsp / DSP_PER_FP32_MAC * device.clock_mhz * 1e6
    return Accelerator(device.name, flops, device.dram_gbps * 1e9 / 8, device.dram_gb * 1e9)


def _waves(flow):
    waves, current = [], []
    for op in flow.ops:
        if current and (op.stage.name, op.phase) != (current[0].stage.name, current[0].phase):
            waves.append(current)
            current = []
        current.append(op)
    return waves + [current]


def _dram_aware(flow, accelerators, bw):
    n = len(accelerators)
    home = data_home(accelerators)
    ops = compiled(flow, accelerators)
    device_of, finish, free = [None] * len(ops), [0.0] * len(ops), [0.0] * n
    use = [0.0] * n
    held = [set() for _ in range(n)]
    for wave in _waves(flow):
        indices = [flow.index[op.key] for op in wave]
        best = None
        for choice in itertools.product(range(n), repeat=len(wave)):
            trial_use, trial_held = list(use), list(held)
            for op, device in zip(wave, choice):
                trial_use[device] += op.stored_bytes
                if op.stage not in trial_held[device]:
                    trial_held[device] = trial_held[device] | {op.stage}
                    trial_use[device] += 2 * WORD_BYTES * op.stage.weights
            if any(u > a.dram_bytes for u, a in zip(trial_use, accelerators)):
                continue
            trial_free, ends = list(free), []
            for i, device in zip(indices, choice):
                device_of[i] = device
                ready, moved = start_and_bytes(ops[i], device, device_of, finish, trial_free[device], home)
                trial_free[device] = ready + moved / bw + ops[i][1][device]
                ends.append(trial_free[device])
            score = (max(trial_free), sum(trial_free))
            if best is None or score < best[0]:
                best = (score, choice, trial_free, ends, trial_use, trial_held)
        if best is None:
            raise SpecError(f"layer '{wave[0].stage.name}' ({wave[0].phase}) does not fit the DRAM of "
                            f"any accelerator: {', '.join(a.name for a in accelerators)}")
        _, choice, free, ends, use, held = best
        for i, device, end in zip(indices, choice, ends):
            device_of[i], finish[i] = device, end
    return {op.key: device for op, device in zip(flow.ops, device_of)}


def _improve(flow, mapping, accelerators, bw, groups, candidates):
    """Try each group of op indices on every device of ``candidates(group, mapping)``, moved
    together; keep every move that shortens the mini-batch and fits the DRAM."""
    simulation = Simulation(flow, mapping, accelerators, bw)
    mapping = dict(mapping)
    for _ in range(MAX_PASSES):
        improved = False
        for group in groups:
            for device in candidates(group, mapping):
                if all(mapping[flow.ops[i].key] == device for i in group) or \
                        simulation.end_if(group, device) >= simulation.end * (1 - 1e-9):
                    continue
                trial = dict(mapping)
                trial.update((flow.ops[i].key, device) for i in group)
                if fits(flow, trial, accelerators):
                    mapping = trial
                    simulation.move(group, device)
                    improved = True
        if not improved:
            break
    return mapping, simulation.end


def _balance_aware(flow, mapping, accelerators, bw):
    """Move each op towards its balanced accelerator: sub-operation k to accelerator k, a batch
    norm to the fastest."""
    fastest = max(range(len(accelerators)), key=lambda d: accelerators[d].flops)

    def balanced(group, mapping):
        op = flow.ops[group[0]]
        return [fastest if op.key[2] is None else op.key[2]]

    return _improve(flow, mapping, accelerators, bw, [(i,) for i in range(len(flow.ops))], balanced)


def _data_locality_aware(flow, mapping, accelerators, bw):
    """Move ops towards their predecessors' and successors' accelerators, counting "all the data
    transfer relationships mentioned in Sec. V-B" (section V-D): a WU's gradients make the
    layer's FP sub-operations its successors. The procedure runs until "no more layers can be
    re-mapped" (section V-D): besides each sub-operation alone, a layer's sub-operations (every
    phase and branch) move together, since a layer split over two accelerators keeps a gradient
    crossing after any single move."""
    successors = {}
    for op in flow.ops:
        for key, _ in op.inputs:
            successors.setdefault(key, []).append(op.key)
    for _, wu_keys, fp_keys in flow.gradients:
        for key in wu_keys:
            successors.setdefault(key, []).extend(fp_keys)
    layers = {}
    for i, op in enumerate(flow.ops):
        layers.setdefault(op.stage.name, []).append(i)

    def neighbours(group, mapping):
        near = set()
        for i in group:
            op = flow.ops[i]
            near |= {mapping[k] for k, _ in op.inputs} | {mapping[k] for k in successors.get(op.key, ())}
        return sorted(near)

    groups = [(i,) for i in range(len(flow.ops))] + [tuple(g) for g in layers.values()]
    return _improve(flow, mapping, accelerators, bw, groups, neighbours)


def mtrain_mapping(flow, accelerators, bw):
    """Algorithm 2; returns the mapping and the latency after each of its three procedures."""
    mapping = _dram_aware(flow, accelerators, bw)
    steps = [latency(flow, mapping, accelerators, bw)]
    mapping, lat = _balance_aware(flow, mapping, accelerators, bw)
    steps.append(lat)
    mapping, lat = _data_locality_aware(flow, mapping, accelerators, bw)
    steps.append(lat)
    return mapping, steps


@dataclass
class Schedule:
    ratio: list
    mapping: dict
    seconds: float
    steps: list           # Fig. 8's steps 1-4
    busy: list            # seconds per accelerator
    moved_bytes: float
    dram_bytes: list


def mtrain(stages, devices, batch, bw, step=None):
    """Algorithm 1 on ``devices`` (Device entries) at ``bw`` bytes/s P2P; returns a Schedule."""
    accelerators = [accelerator_of(d) for d in devices]
    step = step or max(1, batch // 16)
    ratio = balanced_ratio([d.dsp for d in devices], batch)

    def run(r):
        flow = convert(stages, r)
        mapping, steps = mtrain_mapping(flow, accelerators, bw)
        return flow, mapping, steps

    flow, mapping, steps = run(ratio)
    first_steps = list(steps)
    best = (steps[-1], ratio, flow, mapping)
    while True:
        _, busy, _ = latency(best[2], best[3], accelerators, bw, detail=True)
        order = sorted(range(len(devices)), key=lambda d: busy[d])
        moved = False
        for w in order:
            if best[1][w] < step:
                continue
            trials = []
            for r in range(len(devices)):
                if r == w:
                    continue
                trial_ratio = list(best[1])
                trial_ratio[r] += step
                trial_ratio[w] -= step
                try:
                    flow, mapping, steps = run(trial_ratio)
                except SpecError:
                    continue
                trials.append((steps[-1], trial_ratio, flow, mapping))
            if trials and min(trials, key=lambda t: t[0])[0] < best[0] * (1 - 1e-9):
                best = min(trials, key=lambda t: t[0])
                moved = True
                break
        if not moved:
            break
    lat, ratio, flow, mapping = best
    seconds, busy, moved_bytes = latency(flow, mapping, accelerators, bw, detail=True)
    return Schedule(ratio, mapping, seconds, first_steps + [seconds], busy, moved_bytes,
                    dram_use(flow, mapping, len(devices)))


def _ratios(batch, n, step):
    """Every split of ``batch`` in multiples of ``step`` that gives each accelerator a share:
    HAP distributes every operation over all devices (MTrain section VI-C)."""
    for cut in itertools.product(range(step, batch, step), repeat=n - 1):
        if sum(cut) < batch:
            yield list(cut) + [batch - sum(cut)]


@dataclass
class HapPlan:
    seconds: float
    ratio: list
    plan: dict            # layer -> "DP" or "TP"
    busy: list            # seconds each accelerator computes
    moved_bytes: float


def hap_exchange(stage, batch, shards, away):
    """("DP" or "TP", bytes) HAP moves for one layer as MTrain describes it (section III-B,
    Fig. 3(b)): after every layer the shards' outputs are gathered to the host and scattered
    back as the next layer's input, in BP as in FP (the first layer has no BP; its input is the
    images). ``away`` is the share of the batch off the host, ``shards`` the accelerators with
    a share. A batch shard (DP, and batch norm) sends and receives its samples; a channel
    shard (TP) needs the whole input and yields its share of the output, while DP also
    gathers the weight gradients and returns the weights to every other shard. The cheaper
    of the two per layer."""
    t_in = WORD_BYTES * batch * stage.in_elements
    t_out = WORD_BYTES * batch * stage.out_elements
    phases = 1 if stage.first else 2
    data_parallel = phases * away * (t_in + t_out)
    if stage.batchwise:
        return "DP", data_parallel
    data_parallel += 2 * (shards - 1) * WORD_BYTES * stage.weights
    tensor_parallel = phases * ((shards - 1) * t_in + away * t_out)
    return ("DP", data_parallel) if data_parallel <= tensor_parallel else ("TP", tensor_parallel)


def hap(stages, devices, batch, bw, step=None):
    """HAP's synchronous DP/TP sharding with the best single ratio (a HapPlan)."""
    accelerators = [accelerator_of(d) for d in devices]
    n = len(devices)
    host = data_home(accelerators)
    step = step or max(1, batch // 16)
    best = None
    for ratio in _ratios(batch, n, step):
        flow = convert(stages, ratio)
        by_phase = {}
        for op in flow.ops:
            by_phase.setdefault((op.stage.name, op.phase), []).append(op)
        total, moved, plan, busy = 0.0, 0.0, {}, [0.0] * n
        for s in stages:
            for phase in ("FP", "BP", "WU"):
                shards = []
                for op in by_phase.get((s.name, phase), ()):
                    if op.key[2] is None:   # batch norm: each shard normalises its samples
                        shards += [(d, accelerators[d].seconds(op) * ratio[d] / batch)
                                   for d in range(n) if ratio[d]]
                    else:
                        shards.append((op.key[2], accelerators[op.key[2]].seconds(op)))
                for d, seconds in shards:
                    busy[d] += seconds
                total += max((seconds for _, seconds in shards), default=0.0)
            layer_plan, exchange = hap_exchange(s, batch, n, 1 - ratio[host] / batch)
            if not s.batchwise:
                plan[s.name] = layer_plan
            total += exchange / bw
            moved += exchange
        if best is None or total < best.seconds:
            best = HapPlan(total, ratio, plan, busy, moved)
    return best
