"""``python -m mapping.compare``: every partitioning strategy on one cluster, or a paper's experiment.

    python -m mapping.compare --network vgg16 --cluster u50lv+u30 [--strategies fpdeep,accpar,...]
                              [--batch B] [--out DIR]
    python -m mapping.compare --paper accpar|mtrain [--out DIR]
"""

import argparse
import sys
from pathlib import Path

from ..errors import SpecError, run_cli
from . import accpar_paper, mtrain_paper

PAPERS = {"accpar": accpar_paper.run, "mtrain": mtrain_paper.run}


def _progress(text):
    print(text, file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mapping.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--paper", help=f"reproduce a paper's experiment: {', '.join(PAPERS)}")
    parser.add_argument("--out", default="compare-out", help="directory for the plots")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.paper is not None:
        if args.paper not in PAPERS:
            raise SpecError(f"unknown paper '{args.paper}' (known: {', '.join(PAPERS)})")
        PAPERS[args.paper](out, _progress)


if __name__ == "__main__":
    run_cli(main)
