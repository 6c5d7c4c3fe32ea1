"""``python -m mapping``: map a network onto a cluster, print the node table, write JSON and plots.

    python -m mapping --network vgg16 --cluster vc709:15 [--out DIR] [--sizes 5:85[:STEP] [--jobs N]]
                      [--batch B --lr X] [--link-gbps G] [--max-multipliers M]
                      [--grad-bits 16|24|32|48] [--act-storage chip|dram|auto]
                      [--fc-weights chip|dram|auto] [--for-hardware]
"""

import json
import sys

from .cli import (DEFAULT_GRAD_BITS_HELP, FC_WEIGHTS_HELP, DefaultsShown, Parser,
                  add_act_storage_option, add_fc_weights_option, add_vector_words_option, add_grad_bits_option, add_jobs_option, add_psum_bits_option, fc_weights_problem, add_loss_option, add_update_option, formats_of, fraction, output_folder, positive_int,
                  positive_number)
from .cluster import Cluster, first_device_name, parse_cluster
from .errors import SpecError, run_cli
from .mapper import BATCH, BRAM_FRACTION, GENERATOR_OPTIONS, LEARNING_RATE, grad_bits_warning, mapper_for_widths
from .numerics import ACC_BITS
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


def _sweep_progress(done, total, *_):
    print(f"\rsweep: {done} of {total} sizes mapped", end="\n" if done == total else "", file=sys.stderr, flush=True)


def parse_args(argv):
    parser = Parser(prog="python -m mapping", description=__doc__.splitlines()[0].split(": ", 1)[1],
                    formatter_class=DefaultsShown)
    parser.add_argument("--network", default="alexnet-ungrouped", help="zoo name or .toml/.json file")
    parser.add_argument("--cluster", default="vc709:15", help="e.g. vc709:15, vc709:15@150, or a file")
    parser.add_argument("--out", default="mapping-out", help="folder for mapping.json and plots")
    parser.add_argument("--sizes", help="sweep cluster sizes FIRST:LAST[:STEP] of the cluster's first device")
    add_jobs_option(parser, "sizes of --sizes to map")
    parser.add_argument("--batch", type=positive_int, default=BATCH,
                        help="mini-batch size: samples whose gradients one weight update sums")
    parser.add_argument("--lr", type=positive_number, default=LEARNING_RATE,
                        help="learning rate (the hardware applies lr / batch as a 16-bit constant)")
    parser.add_argument("--link-gbps", type=positive_number,
                        help="override every link's bandwidth (Gb/s per direction)")
    parser.add_argument("--max-multipliers", type=positive_int, help="cap the multipliers used per device")
    parser.add_argument("--bram-fraction", type=fraction, default=BRAM_FRACTION,
                        help="share of each device's block RAM the mapping may use; less makes weight "
                             "balancing keep rows on other nodes")
    add_loss_option(parser)
    add_grad_bits_option(parser, default=None, help=DEFAULT_GRAD_BITS_HELP)
    add_psum_bits_option(parser)
    add_act_storage_option(parser)
    add_fc_weights_option(parser, default=None, help=f"{FC_WEIGHTS_HELP}; default: dram, auto with --for-hardware")
    parser.add_argument("--for-hardware", action="store_true",
                        help="map as hw/ generates: conv weights on chip, balanced only as fully connected "
                             "rows kept on another node, fully connected weights in DRAM at mini-batch 1 only")
    add_update_option(parser)
    add_vector_words_option(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    sizes = _sizes(args.sizes) if args.sizes else None
    network = zoo.get(args.network)
    cluster = parse_cluster(args.cluster)
    if args.link_gbps is not None:
        cluster = Cluster(cluster.devices, (args.link_gbps,) * (len(cluster) - 1),
                          f"{cluster.spec}@{args.link_gbps:g}")
    options = dict(batch=args.batch, lr=args.lr, formats=formats_of(args.loss, args.grad_bits, args.psum_bits), max_multipliers=args.max_multipliers,
                   bram_fraction=args.bram_fraction, act_storage=args.act_storage, vector_words=args.vector_words,
                   **{**(GENERATOR_OPTIONS if args.for_hardware else {}), "update": args.update})
    if args.fc_weights is not None:
        options["fc_weights"] = args.fc_weights
    with output_folder(args.out) as out:
        mapper = mapper_for_widths(args.grad_bits, args.psum_bits)
        mapping = mapper(network, cluster, network_name=args.network, **options)
        formats = mapping.nodes[0].formats
        if formats.psum_bits != ACC_BITS and args.psum_bits is None:
            print(f"partial sums: {formats.psum_bits}-bit between slices (exact {ACC_BITS}-bit ones leave this "
                  f"chain link bound; --psum-bits {ACC_BITS} keeps them; docs/numerics.md)")
        if args.grad_bits is None:
            if formats.grad_bits != ACC_BITS:
                print(f"gradient sums: {formats.grad_bits}-bit, each term rounded into them (exact {ACC_BITS}-bit "
                      f"ones do not fit this cluster's memory or leave it link bound; --grad-bits {ACC_BITS} "
                      f"keeps them; docs/numerics.md)")
        else:
            warning = grad_bits_warning(args.grad_bits, args.batch)
            if warning:
                print(f"warning: {warning}")
        problem = fc_weights_problem(mapping, args.fc_weights)
        if problem:
            raise SpecError(problem)
        print(report.table(mapping))
        moved = report.balancing(mapping)
        if moved:
            print(f"weight balancing (--bram-fraction {args.bram_fraction:g}: each node may use "
                  f"{args.bram_fraction:.0%} of its block RAM):")
            print("\n".join(f"  {line}" for line in moved))
        (out / "mapping.json").write_text(mapping.to_json())
        plots.utilisation(mapping, f"{network.name} on {mapping.cluster}", out / "utilisation.png")
        written = ["mapping.json", "utilisation.png"]

        if sizes:
            gbps = args.link_gbps or min(cluster.link_gbps, default=cluster.devices[0].link_gbps)
            device = cluster.devices[0]
            typed = first_device_name(args.cluster) or device.name
            shown = typed if typed.lower() == device.name else f"{typed} ({device.name})"
            # each size with the widths the tools choose for it
            points = report.sweep(network, cluster, sizes, gbps, jobs=args.jobs, progress=_sweep_progress,
                                  mapper=mapper, network_name=args.network, **options)
            for point in points:
                if "error" in point:  # kept in scaling.json and marked on the plot
                    print(f"{point['devices']} devices: refused: {point['error']}")
            print(report.scaling_summary(points, gbps))
            widths = report.widths_summary(points)
            if widths:
                print(widths)
            (out / "scaling.json").write_text(json.dumps(points, indent=1))
            plots.scaling(points, gbps, f"{network.name} on {shown} chains", out / "scaling.png")
            written += ["scaling.json", "scaling.png"]
        print(f"wrote {', '.join(str(out / f) for f in written)}")


if __name__ == "__main__":
    run_cli(main)
