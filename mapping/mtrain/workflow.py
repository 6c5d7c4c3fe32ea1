"""MTrain's multi-branch training workflow (MTrain section IV) and its latency on a mapping.

Stages are the network's convolution / fully connected layers (non-batch-wise)
and batch norms (batch-wise); ReLU, pooling, flatten and residual adds ride on
the stage before them. A non-batch-wise stage becomes one sub-operation per
accelerator and phase (FP, BP, WU), each on ``ratio[k]`` samples of the
mini-batch; a batch norm stays one operation that gathers every branch.

Dependencies (section V-B): FP reads its producers' activations; BP reads the
consumers' losses and the weights from its FP counterpart; WU reads the input
activation kept by FP and the loss at its output; after every WU of a layer its
gradients are accumulated on the accelerator that holds the layer's largest
sub-operation. Moving data between accelerators costs its bytes over the P2P
bandwidth; every accelerator runs its operations one at a time in a fixed
priority order (FP forward, then BP backward with each layer's WU right after
it), starting each as soon as its inputs have arrived: sub-operations run
asynchronously, there is no barrier per layer.
"""

from dataclasses import dataclass, field
import math

from ..errors import SpecError

WORD_BYTES = 4      # both IPs MTrain uses (DarkFPGA, EF-Train) train in 32-bit floating point


@dataclass(frozen=True)
class Stage:
    name: str
    batchwise: bool
    producers: tuple      # stage names
    in_elements: int      # per sample
    out_elements: int     # per sample
    weights: int
    macs: int             # per sample, one phase
    first: bool
    elementwise_ops: tuple = (0, 0, 0)   # batch norm's (FP, EB, PG) per sample

    def flop(self, phase):
        """Floating-point operations per sample of one phase (a batch norm's "BP" carries
        its gradients of gamma and beta too)."""
        if not self.batchwise:
            return 2 * self.macs
        fp, eb, pg = self.elementwise_ops
        return fp if phase == "FP" else eb + pg


def stages_of(network):
    """The network's stages in order, each naming the stages whose output it reads."""
    source_of, stages = {"input": ()}, []
    previous, first = "input", True
    for info in network:
        inputs = info.layer.inputs if info.type == "add" else (info.layer.input or previous,)
        producers = tuple(dict.fromkeys(p for name in inputs for p in source_of[name]))
        if info.type in ("conv2d", "linear", "batchnorm"):
            if info.type == "conv2d" and info.layer.groups != 1:
                raise SpecError(f"network {network.name}: grouped convolution '{info.name}' "
                                f"is not modelled by MTrain's sub-operations")
            stages.append(Stage(info.name, info.type == "batchnorm", producers, info.in_activations,
                                info.out_activations, info.params, info.fp_macs, first,
                                info.elementwise_ops))
            first = False
            source_of[info.name] = (info.name,)
        else:
            source_of[info.name] = producers
        previous = info.name
    return stages


@dataclass(frozen=True)
class Op:
    key: tuple            # (stage, phase, branch) with branch None for batch-wise ops
    stage: Stage
    phase: str            # "FP", "BP", "WU"
    samples: int
    flop: float
    dram_bytes: float     # the accelerator's own off-chip traffic for the op
    inputs: tuple         # ((producer key, bytes), ...)
    stored_bytes: float   # activation it keeps in DRAM until its layer's WU


@dataclass
class Workflow:
    ops: list             # in priority order
    index: dict = field(default_factory=dict)
    gradients: list = field(default_factory=list)   # (stage, [WU keys]) per weighted stage

    def __post_init__(self):
        self.index = {op.key: i for i, op in enumerate(self.ops)}


def convert(stages, ratio):
    """The multi-branch workflow of ``stages`` for batch split ``ratio`` (samples per branch)."""
    batch = sum(ratio)
    branches = [k for k, samples in enumerate(ratio) if samples > 0]
    consumers = {s.name: [] for s in stages}
    for s in stages:
        for p in s.producers:
            consumers[p].append(s)
    by_name = {s.name: s for s in stages}

    def keys(stage_name, phase, branch):
        if by_name[stage_name].batchwise:
            return [(stage_name, phase, None)]
        return [(stage_name, phase, k) for k in ([branch] if branch is not None else branches)]

    def samples_of(branch):
        return batch if branch is None else ratio[branch]

    fp, bp, wu = [], [], {}
    for s in stages:
        for branch in ([None] if s.batchwise else branches):
            n = samples_of(branch)
            inputs = tuple((key, WORD_BYTES * s.in_elements * (samples_of(key[2]) if s.batchwise else n))
                           for p in s.producers for key in keys(p, "FP", None if s.batchwise else branch))
            flop = s.flop("FP") * n
            traffic = WORD_BYTES * (n * (s.in_elements + s.out_elements) + s.weights)
            fp.append(Op((s.name, "FP", branch), s, "FP", n, flop, traffic, inputs,
                         WORD_BYTES * n * s.in_elements))
    for s in reversed(stages):
        for branch in ([None] if s.batchwise else branches):
            n = samples_of(branch)
            losses = tuple((key, WORD_BYTES * s.out_elements * (samples_of(key[2]) if s.batchwise else n))
                           for c in consumers[s.name]
                           for key in keys(c.name, "BP", None if s.batchwise else branch))
            if not consumers[s.name]:   # the last layer: the loss comes from its own output
                losses = (((s.name, "FP", branch), WORD_BYTES * s.out_elements * n),)
            traffic = WORD_BYTES * (n * (s.in_elements + s.out_elements) + s.weights)
            if not s.first:
                weights = (((s.name, "FP", branch), WORD_BYTES * s.weights),) if not s.batchwise else ()
                flop = s.flop("BP") * n
                # its loss is used by the layer's WU, which runs right after it
                bp.append(Op((s.name, "BP", branch), s, "BP", n, flop, traffic, losses + weights, 0))
            if not s.batchwise:
                inputs = losses + (((s.name, "FP", branch), WORD_BYTES * s.in_elements * n),)
                wu[s.name] = wu.get(s.name, []) + [
                    Op((s.name, "WU", branch), s, "WU", n, s.flop("WU") * n, traffic, inputs, 0)]
        if s.name in wu:
            bp.extend(wu[s.name])
    flow = Workflow(fp + bp)
    flow.gradients = [(by_name[name], [op.key for op in ops]) for name, ops in wu.items()]
    return flow


@dataclass(frozen=True)
class Accelerator:
    """A training IP on one FPGA: its peak floating-point rate and DRAM (MTrain section III-A)."""

    name: str
    flops: float          # per second
    dram_bytes_per_s: float
    dram_bytes: float

    def seconds(self, op):
        """Roofline: the op is bound by its arithmetic or by its own DRAM traffic."""
        return max(op.flop / self.flops, op.dram_bytes / self.dram_bytes_per_s)


def _compiled(flow, accelerators):
    """Per op: its inputs as (index, bytes) and its seconds on each accelerator (cached per flow)."""
    key = tuple(accelerators)
    cache = flow.__dict__.setdefault("_compiled", {})
    if key not in cache:
        ops = [(tuple((flow.index[k], size) for k, size in op.inputs if size),
                tuple((flow.index[k]) for k, size in op.inputs if not size),
                [a.seconds(op) for a in accelerators]) for op in flow.ops]
        gradients = []
        for stage, keys in flow.gradients:
            indices = [flow.index[k] for k in keys]
            home = max(indices, key=lambda i: flow.ops[i].samples)
            gradients.append((WORD_BYTES * stage.weights, home, indices))
        cache[key] = ops, gradients
    return cache[key]


class Simulation:
    """One mapping's timeline, kept so that moving one operation re-times only those after it
    (earlier operations come first in every accelerator's order and cannot change)."""

    def __init__(self, flow, mapping, accelerators, p2p_bytes_per_s):
        self.ops, self.gradients = _compiled(flow, accelerators)
        self.bw = p2p_bytes_per_s
        self.device_of = [mapping[op.key] for op in flow.ops]
        self.finish = [0.0] * len(self.ops)
        self.free_before = [()] * len(self.ops)
        self.end = self._run(self.device_of, 0, self.finish, [0.0] * len(accelerators), self.free_before)

    def _run(self, device_of, start, finish, free, snapshots=None):
        ops, bw = self.ops, self.bw
        for i in range(start, len(ops)):
            if snapshots is not None:
                snapshots[i] = tuple(free)
            sized, ordering, seconds = ops[i]
            device = device_of[i]
            ready = free[device]
            for j, size in sized:
                arrival = finish[j] + (size / bw if device_of[j] != device else 0.0)
                if arrival > ready:
                    ready = arrival
            for j in ordering:
                if finish[j] > ready:
                    ready = finish[j]
            finish[i] = free[device] = ready + seconds[device]
        end = max(free)
        for weight_bytes, home, indices in self.gradients:
            for i in indices:
                if device_of[i] != device_of[home]:
                    end = max(end, finish[i] + weight_bytes / bw)
        return end

    def end_if(self, index, device):
        """The mini-batch's end were operation ``index`` moved to ``device``."""
        device_of = list(self.device_of)
        device_of[index] = device
        return self._run(device_of, index, list(self.finish), list(self.free_before[index]))

    def move(self, index, device):
        self.device_of[index] = device
        self.end = self._run(self.device_of, index, self.finish, list(self.free_before[index]),
                             self.free_before)

    def traffic(self, n_devices):
        """Seconds each accelerator computes and the bytes that cross between accelerators."""
        busy, moved = [0.0] * n_devices, 0.0
        for i, (sized, _, seconds) in enumerate(self.ops):
            busy[self.device_of[i]] += seconds[self.device_of[i]]
            moved += sum(size for j, size in sized if self.device_of[j] != self.device_of[i])
        for weight_bytes, home, indices in self.gradients:
            moved += sum(2 * weight_bytes for i in indices   # gradients in, updated weights back
                         if self.device_of[i] != self.device_of[home])
        return busy, moved


def latency(flow, mapping, accelerators, p2p_bytes_per_s, detail=False):
    """Makespan of one mini-batch for ``mapping`` {op key: device}; with ``detail`` also each
    accelerator's busy seconds and the bytes moved between accelerators."""
    simulation = Simulation(flow, mapping, accelerators, p2p_bytes_per_s)
    if detail:
        return (simulation.end, *simulation.traffic(len(accelerators)))
    return simulation.end


def dram_use(flow, mapping, n_devices):
    """Bytes each accelerator keeps: weights (and gradients) of every layer it runs and the
    input activations of its FP sub-operations until their WU (all of them at the peak,
    the end of FP)."""
    use = [0.0] * n_devices
    weights = [set() for _ in range(n_devices)]
    for op in flow.ops:
        device = mapping[op.key]
        use[device] += op.stored_bytes
        weights[device].add(op.stage)
    for device, held in enumerate(weights):
        use[device] += sum(2 * WORD_BYTES * s.weights for s in held)
    return use


def fits(flow, mapping, accelerators):
    return all(u <= a.dram_bytes for u, a in zip(dram_use(flow, mapping, len(accelerators)), accelerators))


def training_flop(stages, batch):
    """FLOPs of one mini-batch: FP, BP (not for the first layer) and WU (not for batch norm)."""
    total = 0.0
    for s in stages:
        phases = ("FP",) + (() if s.first else ("BP",)) + (() if s.batchwise else ("WU",))
        total += sum(s.flop(phase) for phase in phases) * batch
    return total


def balanced_ratio(weights, batch):
    """Integer samples per accelerator proportional to ``weights`` (largest remainders)."""
    total = sum(weights)
    exact = [batch * w / total for w in weights]
    ratio = [math.floor(x) for x in exact]
    for k in sorted(range(len(exact)), key=lambda k: exact[k] - ratio[k], reverse=True)[:batch - sum(ratio)]:
        ratio[k] += 1
    return ratio
