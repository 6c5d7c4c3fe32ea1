"""Every partitioning strategy on one network and one FPGA cluster, reduced to the same figures.

- ``fpdeep``: the project's mapper (pipelined layer + ICP/OCP channel parallelism, 16-bit).
- ``accpar``, ``hypar``, ``owt``, ``dp``: AccPar's search and baselines on the cluster's
  devices, 16-bit words, each device's multipliers at its clock (two operations per MAC) and
  its ``link_gbps`` as the network bandwidth b_i of eq. 7 (a hierarchy level's halves reach
  each other through the chain's links; AccPar assumes any-to-any and so do we).
- ``mtrain``, ``hap``: MTrain's Algorithms 1-2 and its HAP baseline, fp32 training IPs,
  P2P bandwidth the slowest link of the chain; they need DRAM on every device.
- ``hybrid``: per layer, FPDeep-style pipelined placement or an AccPar split (mapping/hybrid.py).

``link_busy``: FPDeep, the busiest link's share of its bandwidth; AccPar and its baselines,
the share of the mini-batch the critical path spends communicating; MTrain and HAP, the
bytes exchanged over the P2P bandwidth per mini-batch time (above 100% where several pairs
exchange at once).
"""

from dataclasses import dataclass, field

from ..accpar import search
from ..accpar.graph import items_of, weighted_layers
from ..errors import SpecError
from ..hybrid import best_plan
from ..mapper import map_network
from ..mtrain.schedule import accelerator_of, hap, mtrain
from ..mtrain.workflow import stages_of

STRATEGIES = ("fpdeep", "accpar", "hypar", "owt", "dp", "mtrain", "hap", "hybrid")
FIXED_POINT_BYTES = 2


@dataclass
class Outcome:
    strategy: str
    samples_per_s: float
    utilisation: list | None           # per device, share of the time it computes
    comm_bytes_per_sample: float | None  # bytes crossing between devices
    link_busy: float | None            # share of the time the busiest link (or the exchange) is busy
    memory_bytes: list | None          # per device
    partition: dict = field(default_factory=dict)


def accpar_devices(cluster):
    return tuple(search.Accelerator(d.name, 2 * d.peak_gmacs * 1e9, d.link_gbps * 1e9 / 8) for d in cluster)


def _capacity(device):
    return device.onchip_bits / 8 + device.dram_gb * 1e9


def run_fpdeep(network, cluster, batch):
    network.check_trainable()
    mapping = map_network(network, cluster, batch=batch)
    s = mapping.summary
    partition = {}
    for node in mapping.nodes:
        for sl in node.slices:
            lo, hi = sl.in_range if sl.mode == "icp" else sl.out_range
            partition.setdefault(sl.layer, []).append(f"{sl.mode.upper()}[{lo}:{hi}]@{node.index}")
    comm = sum(s["link_bytes_forward"]) + sum(s["link_bytes_backward"])
    link_share = s["samples_per_s"] / s["link_samples_per_s"] if s["link_samples_per_s"] else 0.0
    return Outcome("fpdeep", s["samples_per_s"], [p["dsp_util"] for p in s["per_node"]], comm,
                   link_share, [p["onchip_bits"] / 8 for p in s["per_node"]],
                   {k: " ".join(v) for k, v in partition.items()})


def leaf_memory(plan, element_bytes):
    """Weights and stored activations of each device's part of every layer."""
    return [element_bytes * sum(layer.weights + layer.in_features for layer in weighted_layers(leaf.items))
            for leaf in plan.leaves()]


def run_accpar(strategy, network, cluster, batch):
    items = items_of(network, batch)
    plan = search.partition(items, accpar_devices(cluster), strategy, FIXED_POINT_BYTES)
    memory = leaf_memory(plan, FIXED_POINT_BYTES)
    for device, need in zip(cluster, memory):
        if need > _capacity(device):
            raise SpecError(f"device {device.name} would hold {need / 1e6:.1f} MB of weights and "
                            f"activations, more than its {_capacity(device) / 1e6:.1f} MB")
    leaves = plan.leaves()
    return Outcome(strategy, batch / plan.seconds, [leaf.compute_seconds / plan.seconds for leaf in leaves],
                   plan.total_comm_bytes() / batch, 1 - max(leaf.compute_seconds for leaf in leaves) / plan.seconds,
                   memory, {name: t for name, t in plan.choice.items()})


def _p2p(cluster):
    return min(cluster.link_gbps, default=cluster.devices[0].link_gbps) * 1e9 / 8


def run_mtrain(network, cluster, batch):
    stages = stages_of(network)
    for device in cluster:
        accelerator_of(device)
    schedule = mtrain(stages, cluster.devices, batch, _p2p(cluster))
    placement = {}
    for key, device in schedule.mapping.items():
        if key[1] == "FP":
            placement.setdefault(key[0], set()).add(device)
    return Outcome("mtrain", batch / schedule.seconds, [b / schedule.seconds for b in schedule.busy],
                   schedule.moved_bytes / batch, schedule.moved_bytes / _p2p(cluster) / schedule.seconds,
                   schedule.dram_bytes,
                   {"ratio": ":".join(map(str, schedule.ratio)),
                    **{k: ",".join(map(str, sorted(v))) for k, v in placement.items()}})


def run_hap(network, cluster, batch):
    stages = stages_of(network)
    for device in cluster:
        accelerator_of(device)
    result = hap(stages, cluster.devices, batch, _p2p(cluster))
    return Outcome("hap", batch / result.seconds, [b / result.seconds for b in result.busy],
                   result.moved_bytes / batch, result.moved_bytes / _p2p(cluster) / result.seconds, None,
                   {"ratio": ":".join(map(str, result.ratio)), **result.plan})


def run(strategy, network, cluster, batch):
    """The Outcome of ``strategy``; a SpecError says why it does not apply."""
    if strategy == "fpdeep":
        return run_fpdeep(network, cluster, batch)
    if strategy in search.STRATEGIES:
        return run_accpar(strategy, network, cluster, batch)
    if strategy == "mtrain":
        return run_mtrain(network, cluster, batch)
    if strategy == "hap":
        return run_hap(network, cluster, batch)
    rate, description, choices = best_plan(network, cluster, batch, accpar_devices(cluster))
    return Outcome("hybrid", rate, None, None, None, None, {"plan": description, **choices})
