"""One strategy's figures on one cluster, measured the same way for every strategy."""

from dataclasses import dataclass, field, replace

from ..accpar import search
from ..accpar.graph import weighted_layers
from ..errors import SpecError

FIXED_POINT_BYTES = 2   # FPGA strategies other than MTrain's train in 16-bit words


@dataclass
class Outcome:
    strategy: str
    samples_per_s: float
    utilisation: list | None           # per device, share of the time it computes
    comm_bytes_per_sample: float | None  # bytes crossing between devices
    link_busy: float | None            # share of the time the busiest link (or the exchange) is busy
    memory_bytes: list | None          # per device
    partition: dict = field(default_factory=dict)

    def paced(self, samples_per_s):
        """The same plan run at a lower rate set by a pipeline it is part of."""
        slow = samples_per_s / self.samples_per_s
        return replace(self, samples_per_s=samples_per_s,
                       utilisation=[u * slow for u in self.utilisation],
                       link_busy=self.link_busy * slow)


def accpar_devices(cluster):
    """Each FPGA as AccPar sees it: its multipliers at its clock, its link as b_i."""
    return tuple(search.Accelerator(d.name, 2 * d.peak_gmacs * 1e9, d.link_gbps * 1e9 / 8) for d in cluster)


def capacity_bytes(device):
    return device.onchip_bits / 8 + device.dram_gb * 1e9


def of_fpdeep(mapping, first_device=0):
    """``first_device``: where the mapped chain starts in a larger cluster (for the partition)."""
    s = mapping.summary
    partition = {}
    for node in mapping.nodes:
        for sl in node.slices:
            lo, hi = sl.in_range if sl.mode == "icp" else sl.out_range
            partition.setdefault(sl.layer, []).append(f"{sl.mode.upper()}[{lo}:{hi}]@{first_device + node.index}")
    comm = sum(s["link_bytes_forward"]) + sum(s["link_bytes_backward"])
    link_busy = s["samples_per_s"] / s["link_samples_per_s"] if s["link_samples_per_s"] else 0.0
    return Outcome("fpdeep", s["samples_per_s"], [p["dsp_util"] for p in s["per_node"]], comm,
                   link_busy, [p["onchip_bits"] / 8 for p in s["per_node"]],
                   {k: " ".join(v) for k, v in partition.items()})


def of_accpar(strategy, plan, devices, batch):
    """Refuses a plan whose weights and stored activations overflow a device's memory."""
    memory = [FIXED_POINT_BYTES * sum(layer.weights + layer.in_features for layer in weighted_layers(leaf.items))
              for leaf in plan.leaves()]
    for device, need in zip(devices, memory):
        if need > capacity_bytes(device):
            raise SpecError(f"device {device.name} would hold {need / 1e6:.1f} MB of weights and "
                            f"activations, more than its {capacity_bytes(device) / 1e6:.1f} MB")
    leaves = plan.leaves()
    return Outcome(strategy, batch / plan.seconds, [leaf.compute_seconds / plan.seconds for leaf in leaves],
                   plan.total_comm_bytes() / batch,
                   1 - max(leaf.compute_seconds for leaf in leaves) / plan.seconds, memory, dict(plan.choice))
