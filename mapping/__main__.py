"""``python -m mapping``: map a network onto a cluster, print the node table, write JSON and plots.

    python -m mapping --network vgg16 --cluster vc709:15 [--out DIR] [--sizes 5:85[:STEP]]
                      [--batch B --lr X] [--link-gbps G] [--max-multipliers M]
"""

import argparse
import json
from pathlib import Path

from .cluster import Cluster, parse_cluster
from .errors import SpecError, run_cli
from .mapper import BRAM_FRACTION, GENERATOR_OPTIONS, map_network
from . import plots, report, zoo


def _sizes(text):
    parts = text.split(":")
    try:
        values = [int(v) for v in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3) or values[0] < 1 or values[1] < values[0] or \
            (len(values) == 3 and values[2] < 1):
        raise SpecError(f"--sizes must be FIRST:LAST or FIRST:LAST:STEP with 1 <= FIRST <= LAST, "
                        f"got '{text}'")
    return range(values[0], values[1] + 1, values[2] if len(values) == 3 else 1)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mapping", description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="alexnet-ungrouped", help="zoo name or .toml/.json file")
    parser.add_argument("--cluster", default="vc709:15", help="e.g. vc709:15, vc709:15@150, or a file")
    parser.add_argument("--out", default="mapping-out", help="directory for mapping.json and plots")
    parser.add_argument("--sizes", help="sweep cluster sizes FIRST:LAST[:STEP] of the cluster's device")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--link-gbps", type=float, help="override every link's bandwidth (Gb/s)")
    parser.add_argument("--max-multipliers", type=int, help="cap the multipliers used per device")
    parser.add_argument("--bram-fraction", type=float, default=BRAM_FRACTION,
                        help=f"share of each device's block RAM the mapping may use (default {BRAM_FRACTION})")
    parser.add_argument("--for-hardware", action="store_true",
                        help="map as hw/ generates: every weight on chip, balanced only as "
                             "fully connected rows kept on another node")
    args = parser.parse_args(argv)

    sizes = _sizes(args.sizes) if args.sizes else None
    network = zoo.get(args.network)
    cluster = parse_cluster(args.cluster)
    if args.link_gbps is not None:
        if not args.link_gbps > 0:
            raise SpecError(f"--link-gbps must be positive, got {args.link_gbps}")
        cluster = Cluster(cluster.devices, (args.link_gbps,) * (len(cluster) - 1),
                          f"{cluster.spec}@{args.link_gbps:g}")
    options = dict(batch=args.batch, lr=args.lr, max_multipliers=args.max_multipliers,
                   bram_fraction=args.bram_fraction,
                   **(GENERATOR_OPTIONS if args.for_hardware else {}))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    mapping = map_network(network, cluster, network_name=args.network, **options)
    print(report.table(mapping))
    (out / "mapping.json").write_text(mapping.to_json())
    plots.utilisation(mapping, out / "utilisation.png")
    written = ["mapping.json", "utilisation.png"]

    if sizes:
        gbps = args.link_gbps or min(cluster.link_gbps, default=cluster.devices[0].link_gbps)
        points = report.sweep(network, cluster, sizes, gbps, network_name=args.network,
                              **options)
        for point in points:
            if "error" in point:  # refused sizes stay in scaling.json and out of the plot
                print(f"{point['devices']} devices: refused: {point['error']}")
        limit = report.linear_limit(points, gbps)
        print(f"linear scaling up to {limit} devices at {gbps:g} Gb/s per link" if limit else
              f"no size in the sweep keeps the busiest link under {gbps:g} Gb/s")
        (out / "scaling.json").write_text(json.dumps(points, indent=1))
        plots.scaling(points, gbps, f"{args.network} on {cluster.devices[0].name}", out / "scaling.png")
        written += ["scaling.json", "scaling.png"]
    print(f"wrote {', '.join(str(out / f) for f in written)}")


if __name__ == "__main__":
    run_cli(main)
