"""``python -m mapping.compare``: every partitioning strategy on one cluster, or a paper's experiment.

    python -m mapping.compare --network vgg16 --cluster u50lv+u30 [--strategies fpdeep,accpar,...]
                              [--batch B] [--out DIR]
    python -m mapping.compare --paper accpar|mtrain [--out DIR]
"""

import argparse
import sys
from pathlib import Path

from .. import zoo
from ..cluster import parse_cluster
from ..errors import SpecError, run_cli
from . import accpar_paper, mtrain_paper
from .paper_report import bars
from .strategies import STRATEGIES, run

PAPERS = {"accpar": accpar_paper.run, "mtrain": mtrain_paper.run}


def _progress(text):
    print(text, file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mapping.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--paper", help=f"reproduce a paper's experiment: {', '.join(PAPERS)}")
    parser.add_argument("--network", default="lenet-digits", help="zoo name or .toml/.json file")
    parser.add_argument("--cluster", default="ecp5-85:2+ecp5-45:2", help="e.g. u50lv+u30@24, or a file")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated subset")
    parser.add_argument("--batch", type=int, default=16, help="mini-batch every strategy trains with")
    parser.add_argument("--out", default="compare-out", help="directory for the plots")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.paper is not None:
        if args.paper not in PAPERS:
            raise SpecError(f"unknown paper '{args.paper}' (known: {', '.join(PAPERS)})")
        PAPERS[args.paper](out, _progress)
        return
    strategies = [name.strip() for name in args.strategies.split(",")]
    for name in strategies:
        if name not in STRATEGIES:
            raise SpecError(f"unknown strategy '{name}' (known: {', '.join(STRATEGIES)})")
    if args.batch < 1:
        raise SpecError(f"--batch must be a positive integer, got {args.batch}")
    network = zoo.get(args.network)
    cluster = parse_cluster(args.cluster)
    outcomes, refused = [], []
    for name in strategies:
        _progress(f"  {name}")
        try:
            outcomes.append(run(name, network, cluster, args.batch))
        except SpecError as error:
            refused.append((name, str(error)))
    print(f"{args.network} on {cluster} ({cluster.spec}), mini-batch {args.batch}")
    print(f"{'strategy':<9} {'samples/s':>12} {'comm B/sample':>14} {'link busy':>9}  "
          f"{'utilisation per device':<28} memory per device (MB)")
    for o in outcomes:
        util = " ".join(f"{100 * u:.0f}%" for u in o.utilisation) if o.utilisation else "-"
        memory = " ".join(f"{m / 1e6:.2f}" for m in o.memory_bytes) if o.memory_bytes else "-"
        comm = f"{o.comm_bytes_per_sample:,.0f}" if o.comm_bytes_per_sample is not None else "-"
        share = f"{100 * o.link_busy:.0f}%" if o.link_busy is not None else "-"
        print(f"{o.strategy:<9} {o.samples_per_s:>12.1f} {comm:>14} {share:>9}  {util:<28} {memory}")
    for o in outcomes:
        print(f"\n{o.strategy}: " + "; ".join(f"{k} {v}" for k, v in o.partition.items()))
    if refused:
        print("\nnot applicable:")
        for name, reason in refused:
            print(f"  {name}: {reason}")
    if outcomes:
        out.mkdir(parents=True, exist_ok=True)
        bars([o.strategy for o in outcomes], {"samples/s": [o.samples_per_s for o in outcomes]},
             f"{args.network} on {cluster.spec}", "samples/s", out / "compare.png", log=True)
        print(f"\nwrote {out / 'compare.png'}")


if __name__ == "__main__":
    run_cli(main)
