"""MTrain's multi-branch training workflow (MTrain section IV) and its latency on a mapping.

Stages are the network's convolution / fully connected layers (non-batch-wise)
and batch norms (batch-wise); ReLU, pooling, flatten and residual adds ride on
the stage before them. A non-batch-wise stage becomes one sub-operation per
accelerator and phase (FP, BP, WU), each on ``ratio[k]`` samples of the
mini-batch; a batch norm stays one operation that gathers every branch.

Dependencies (sections IV, V-B): FP reads its producers' activations, the first
layer's FP its samples' images; BP reads the consumers' losses and the weights from
its FP counterpart; WU reads the input activation kept by FP and the loss at its
output, and finishes once its gradients are gathered to every accelerator where
the layer's FP sub-operations run. The images are held by the most
resource-abundant accelerator (section VI-C trains there alone without P2P
transfers). Moving data between accelerators costs its bytes over the P2P
bandwidth. A sub-operation's latency is LatComm + LatComp (section III-C): it
starts once its accelerator is free and its inputs are produced, receives (a WU
also sends its gradients), then computes. Every accelerator runs its operations
one at a time in a fixed priority order (FP forward, then BP backward with each
layer's WU right after it): sub-operations run asynchronously, there is no
barrier per layer.
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
    fetched: float = 0.0  # training images it reads from the accelerator holding the data set


@dataclass
class Workflow:
    ops: list             # in priority order
    index: dict = field(default_factory=dict)
    gradients: list = field(default_factory=list)   # (stage, [WU keys], [FP keys]) per weighted stage

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
                         WORD_BYTES * n * s.in_elements, WORD_BYTES * n * s.in_elements if s.first else 0.0))
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
    flow.gradients = [(by_name[name], [op.key for op in ops], [(name, "FP", op.key[2]) for op in ops])
                      for name, ops in wu.items()]
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


def compiled(flow, accelerators):
    """Per op: its inputs as (index, bytes), its seconds on each accelerator, the images it
    fetches and, for a WU, its gradients' bytes and the layer's FP ops (cached per flow)."""
    key = tuple(accelerators)
    cache = flow.__dict__.setdefault("_compiled", {})
    if key not in cache:
        shipped = {}
        for stage, wu_keys, fp_keys in flow.gradients:
            for k in wu_keys:
                shipped[k] = (WORD_BYTES * stage.weights, tuple(flow.index[f] for f in fp_keys))
        cache[key] = [(tuple((flow.index[k], size) for k, size in op.inputs),
                       [a.seconds(op) for a in accelerators], op.fetched, shipped.get(op.key))
                      for op in flow.ops]
    return cache[key]


def start_and_bytes(op, device, device_of, finish, free, home):
    """When compiled ``op`` can start on ``device`` (accelerator free, every input produced) and
    the bytes it moves over P2P links: inputs held elsewhere, images away from the data set, a
    WU's gradients to each other accelerator running the layer's FP. MTrain prices a
    sub-operation as LatComm + LatComp (section III-C): its transfers precede its computation
    on its accelerator, they do not overlap it."""
    inputs, _, fetched, shipped = op
    ready = free
    moved = fetched if device != home else 0.0
    for j, size in inputs:
        if finish[j] > ready:
            ready = finish[j]
        if size and device_of[j] != device:
            moved += size
    if shipped:
        moved += shipped[0] * len({device_of[f] for f in shipped[1]} - {device})
    return ready, moved


class Simulation:
    """One mapping's timeline, kept so that moving operations re-times only those from the first
    moved on (earlier operations come first in every accelerator's order and cannot change)."""

    def __init__(self, flow, mapping, accelerators, p2p_bytes_per_s):
        self.ops = compiled(flow, accelerators)
        self.bw = p2p_bytes_per_s
        self.home = data_home(accelerators)
        self.device_of = [mapping[op.key] for op in flow.ops]
        self.finish = [0.0] * len(self.ops)
        self.free_before = [()] * len(self.ops)
        self.end = self._run(self.device_of, 0, self.finish, [0.0] * len(accelerators), self.free_before)

    def _run(self, device_of, start, finish, free, snapshots=None):
        ops, bw, home = self.ops, self.bw, self.home
        for i in range(start, len(ops)):
            if snapshots is not None:
                snapshots[i] = tuple(free)
            device = device_of[i]
            ready, moved = start_and_bytes(ops[i], device, device_of, finish, free[device], home)
            finish[i] = free[device] = ready + moved / bw + ops[i][1][device]
        return max(free)

    def end_if(self, indices, device):
        """The mini-batch's end were operations ``indices`` moved to ``device``."""
        device_of = list(self.device_of)
        for i in indices:
            device_of[i] = device
        start = min(indices)
        return self._run(device_of, start, list(self.finish), list(self.free_before[start]))

    def move(self, indices, device):
        for i in indices:
            self.device_of[i] = device
        start = min(indices)
        self.end = self._run(self.device_of, start, self.finish, list(self.free_before[start]),
                             self.free_before)

    def traffic(self, n_devices):
        """Seconds each accelerator computes and the bytes that cross between accelerators."""
        busy, moved = [0.0] * n_devices, 0.0
        for op, device in zip(self.ops, self.device_of):
            busy[device] += op[1][device]
            moved += start_and_bytes(op, device, self.device_of, self.finish, 0.0, self.home)[1]
        return busy, moved


def data_home(accelerators):
    """The accelerator holding the training images: the most resource-abundant one, on which
    MTrain's single-FPGA strategy trains without any P2P transfer (section VI-C)."""
    return max(range(len(accelerators)), key=lambda d: accelerators[d].flops)


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
