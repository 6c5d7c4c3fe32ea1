"""Per-node report table and the scaling sweep."""

from .cluster import Cluster
from .errors import SpecError
from .mapper import map_network


def table(mapping):
    """The per-node table the CLI prints."""
    s = mapping.summary
    lines = [f"{mapping.network} on {mapping.cluster}: {s['samples_per_s']:.1f} samples/s "
             f"({s['limited_by']} bound), {s['gops_per_device']:.0f} GOPS per device, "
             f"idle stages {100 * s['idle']:.2f}%, busiest link {s['busiest_link_gbps']:.1f} Gb/s",
             f"{'node':>4} {'device':<14} {'DSP%':>5} {'BRAM%':>6} {'link Gb/s':>9} {'idle%':>6}  slices"]
    for node, perf in zip(mapping.nodes, s["per_node"]):
        parts = []
        for sl in node.slices:
            lo, hi = sl.in_range if sl.mode == "icp" else sl.out_range
            extra = " DRAM" if sl.weights_offchip else ""
            extra += f" +{len(sl.remote_weights)} remote" if sl.remote_weights else ""
            parts.append(f"{sl.layer} {sl.mode.upper()}[{lo}:{hi}]{extra}")
        if node.hosted:
            parts.append(f"hosts {sum(b.words for b in node.hosted):,} weights")
        lines.append(f"{node.index:>4} {node.device:<14} {100 * perf['dsp_util']:>5.1f} "
                     f"{100 * perf['bram_util']:>6.1f} {perf['link_gbps']:>9.2f} "
                     f"{100 * perf['idle']:>6.2f}  {', '.join(parts) or '-'}")
    return "\n".join(lines)


def sweep(network, device_cluster, sizes, link_gbps, **options):
    """Map ``network`` on n copies of the cluster's first device for every n in ``sizes``.

    Returns one dict per size: compute-bound and link-bound samples/s, throughput,
    busiest link Gb/s at the compute-bound rate, idle share, GOPS per device; or the
    refusal for sizes the network does not fit."""
    device = device_cluster.devices[0]
    points = []
    for n in sizes:
        cluster = Cluster((device,) * n, (link_gbps,) * (n - 1), f"{device.name}:{n}@{link_gbps:g}")
        try:
            s = map_network(network, cluster, **options).summary
        except SpecError as error:
            points.append({"devices": n, "error": str(error)})
            continue
        points.append({"devices": n, "compute_samples_per_s": s["compute_samples_per_s"],
                       "link_samples_per_s": s["link_samples_per_s"],
                       "samples_per_s": s["samples_per_s"], "busiest_link_gbps": s["busiest_link_gbps"],
                       "idle": s["idle"], "gops_per_device": s["gops_per_device"]})
    return points


def linear_limit(points, link_gbps):
    """Largest cluster size before the busiest link first needs more than ``link_gbps``."""
    best = None
    for p in points:
        if "error" in p:
            continue
        if p["busiest_link_gbps"] > link_gbps:
            return best
        best = p["devices"]
    return best
