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

from ..accpar import search
from ..accpar.graph import items_of
from ..hybrid import best_plan
from ..mapper import map_network
from ..mtrain.schedule import accelerator_of, hap, mtrain
from ..mtrain.workflow import stages_of
from .outcome import FIXED_POINT_BYTES, Outcome, accpar_devices, of_accpar, of_fpdeep

STRATEGIES = ("fpdeep", "accpar", "hypar", "owt", "dp", "mtrain", "hap", "hybrid")


def run_fpdeep(network, cluster, batch):
    network.check_trainable()
    return of_fpdeep(map_network(network, cluster, batch=batch))


def run_accpar(strategy, network, cluster, batch):
    plan = search.partition(items_of(network, batch), accpar_devices(cluster), strategy, FIXED_POINT_BYTES)
    return of_accpar(strategy, plan, cluster.devices, batch)


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
    return best_plan(network, cluster, batch)
