"""Per-node report table and the scaling sweep."""

from .cluster import Cluster
from .errors import SpecError
from .mapper import dram_bytes_held, map_network
from .parallel import run_jobs


def table(mapping):
    """The per-node table the CLI prints."""
    s = mapping.summary
    walks = ""
    if "samples_per_s_with_updates" in s:  # hardware mappings: the update's walks may stop the engines
        overlapped = " (overlapped)" if mapping.nodes[0].overlapped_update else ""
        walks = (f"; {s['samples_per_s_with_updates']:.1f} with the weight update's walks{overlapped} at "
                 f"mini-batch {mapping.nodes[0].training.batch}")
    lines = [f"{mapping.network} on {mapping.cluster}: {s['samples_per_s']:.1f} samples/s "
             f"({s['limited_by']} bound{walks}), {s['gops_per_device']:.0f} GOPS per device, "
             f"idle stages {100 * s['idle']:.2f}%, busiest link {s['busiest_link_gbps']:.1f} Gb/s of payload, "
             f"{s['busiest_link_line_gbps']:.1f} Gb/s of line with the link cores' framing (at the compute-bound "
             f"rate); {100 * s['link_utilisation']:.0f}% of the busiest link used",
             f"{'node':>4} {'device':<14} {'DSP%':>5} {'BRAM%':>6} {'link Gb/s':>9} {'idle%':>6} {'acts':>4} "
             f"{'DRAM GB/s':>9} {'DRAM MB':>8}  slices"]
    for node, perf in zip(mapping.nodes, s["per_node"]):
        storage = {sl.act_storage for sl in node.slices}
        acts = "DRAM" if storage == {"dram"} else "chip" if storage <= {"chip"} else "both"
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
                     f"{100 * perf['idle']:>6.2f} {acts:>4} {perf['dram_gbps'] / 8:>9.2f} "
                     f"{sum(dram_bytes_held(node)) / 1e6:>8.1f}  {', '.join(parts) or '-'}")
    return "\n".join(lines)


def sweep(network, device_cluster, sizes, link_gbps, *, jobs=1, progress=None, mapper=map_network, **options):
    """Map ``network`` with ``mapper`` (``map_network``'s signature; a picklable one, such as
    ``python -m mapping``'s default widths) on n copies of the cluster's first device for every
    n in ``sizes``, ``jobs`` sizes at a time (mapping/parallel.py; ``progress(done, total,
    index, point)`` as each finishes).

    Returns one dict per size: compute-bound and link-bound samples/s, throughput,
    busiest link Gb/s at the compute-bound rate, idle share, GOPS per device, the widths of the
    gradient and partial sums; or the refusal for sizes the network does not fit."""
    device = device_cluster.devices[0]
    return run_jobs(_sweep_point, [(network, device, n, link_gbps, mapper, options) for n in sizes], jobs, progress)


def _sweep_point(network, device, n, link_gbps, mapper, options):
    cluster = Cluster((device,) * n, (link_gbps,) * (n - 1), f"{device.name}:{n}@{link_gbps:g}")
    try:
        mapping = mapper(network, cluster, **options)
    except SpecError as error:
        return {"devices": n, "error": str(error)}
    s, formats = mapping.summary, mapping.nodes[0].formats
    return {"devices": n, "grad_bits": formats.grad_bits, "psum_bits": formats.psum_bits,
            "compute_samples_per_s": s["compute_samples_per_s"],
            "link_samples_per_s": s["link_samples_per_s"],
            "samples_per_s": s["samples_per_s"], "limited_by": s["limited_by"],
            "busiest_link_gbps": s["busiest_link_gbps"],
            "busiest_link_line_gbps": s["busiest_link_line_gbps"],
            "idle": s["idle"], "gops_per_device": s["gops_per_device"]}


# Throughput scales linearly while each size that adds throughput keeps its samples/s per
# device within this share of the best per-device rate of the smaller sizes.
LINEAR_EFFICIENCY = 0.9


def linear_limit(points):
    """Largest cluster size of a sweep up to which throughput grows in proportion to the
    devices (see LINEAR_EFFICIENCY), or None if no size maps. Refused sizes are skipped, and
    so are sizes that add no throughput to a smaller one (whole-cycle periods make steps)."""
    best_rate, record, limit = 0.0, 0.0, None
    for p in points:
        if "error" in p or p["samples_per_s"] <= record:
            continue
        rate = p["samples_per_s"] / p["devices"]
        if rate < LINEAR_EFFICIENCY * best_rate:
            return limit
        best_rate, record, limit = max(best_rate, rate), p["samples_per_s"], p["devices"]
    return limit


def link_limit(points, link_gbps):
    """Largest cluster size before the busiest link first needs more than ``link_gbps`` of line
    rate (at the compute-bound rate, with the link cores' frames, CRC and ACK traffic): where the
    links stop being enough, whatever else does."""
    best = None
    for p in points:
        if "error" in p:
            continue
        if p["busiest_link_line_gbps"] > link_gbps:
            return best
        best = p["devices"]
    return best


def scaling_summary(points, link_gbps):
    """One line on how throughput scales over the sweep ``points``."""
    mapped = [p for p in points if "error" not in p]
    if not mapped:
        return "no size of the sweep maps"
    if len(mapped) == 1:
        return f"only {mapped[0]['devices']} devices map in the sweep: no scaling to judge"
    limit = linear_limit(points)
    rule = f"samples/s per device within {LINEAR_EFFICIENCY:.0%} of the best of the smaller sizes"
    if limit == mapped[-1]["devices"]:
        return f"linear scaling over the whole sweep, up to {limit} devices ({rule})"
    after = next(p for p in mapped if p["devices"] > limit)
    bound = "compute bound" if after["limited_by"] == "compute" else f"link bound at {link_gbps:g} Gb/s per link"
    best = max(mapped, key=lambda p: p["samples_per_s"])
    beyond = (f"larger clusters add no throughput ({bound} from {after['devices']} devices)"
              if best["devices"] == limit else
              f"larger clusters add less ({bound} from {after['devices']} devices), up to "
              f"{best['samples_per_s']:.0f} samples/s at {best['devices']} devices")
    return f"linear scaling up to {limit} devices ({rule}); {beyond}"


def widths_summary(points):
    """One line on the widths of gradient and partial sums the sweep's sizes were mapped with,
    by runs of sizes, or None where every size took the same."""
    runs = []
    for point in (p for p in points if "error" not in p):
        widths = (point["grad_bits"], point["psum_bits"])
        if runs and runs[-1][0] == widths:
            runs[-1][2] = point["devices"]
        else:
            runs.append([widths, point["devices"], point["devices"]])
    if len(runs) < 2:
        return None
    return "widths by size: " + "; ".join(
        f"{lo}{'' if lo == hi else f'-{hi}'} devices {grad}-bit gradient sums, {psum}-bit partial sums"
        for (grad, psum), lo, hi in runs)


def balancing(mapping):
    """One line per weight block: which rows of which node's slice another node keeps."""
    lines = []
    for node in mapping.nodes:
        for s in node.slices:
            for b in s.remote_weights:
                lines.append(f"node {b.owner}'s layer '{b.layer}': output channels {b.out_range[0]}.."
                             f"{b.out_range[1] - 1} ({b.words:,} weights) kept on node {b.host}")
    return lines
