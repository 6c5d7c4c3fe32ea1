"""Train a network with the golden model as the hardware would run it (paper Fig. 16).

``python -m mapping.train --network lenet-digits --data digits --epochs 5 --out DIR``

Each weighted layer's ``fp_stale`` comes from mapping the network onto ``--cluster``
exactly as ``hw.build`` does, so ``--update auto`` (the default) is the weight version
schedule the chain ``hw.build`` generates runs (docs/weight_versions.md): ``pipelined`` where
its update stops the engines, ``overlapped`` where it does not (EB on the previous sample's
version, FP one sample staler), as ``hw.build --update auto`` chooses; either can be asked
for, and ``--update aligned`` is plain mini-batch SGD. Data: scikit-learn's bundled 8x8 digits (``digits``) or an .npz
as mapping/data.py reads it (``x``, ``y`` and optionally ``x_test``, ``y_test``); without a
test split of its own, a stratified 20% is held out. The sample count and so the rounding
noise and the stale weight versions continue across epochs (``golden.train(resume=...)``).

Unless ``--no-reference``, float aligned SGD runs too, from the same initial weights on
the same sample order, and both curves go to ``curves.csv`` and ``fig16.png``.

Several seeds and gradient-sum widths (``--seed 0,1,2 --grad-bits 16,24,48``) make a sweep:
each (width, seed) trains on its own, ``--jobs`` at a time in worker processes, into
``OUT/grad{W}-seed{S}/`` (its curves, plot and log; float aligned SGD in the first width's
run of each seed: it does not depend on the width), and the final test accuracies and their
gaps to float aligned go to ``OUT/table.md`` as docs/numerics.md shows them.
"""

import argparse
import csv
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import golden, stability
from .cluster import parse_cluster
from .cli import (GRAD_BITS_HELP, LOSS_HELP, DefaultsShown, Parser, add_act_storage_option, add_jobs_option,
                  add_loss_option, formats_of, int_list, output_folder, positive_int, positive_number)
from .data import DIGITS, SOURCE_HELP, load
from .errors import SpecError, run_cli
from .mapper import GENERATOR_OPTIONS, grad_bits_warning, map_network
from .numerics import ACC_BITS, GRAD_BITS, PSUM_BITS
from .parallel import run_jobs, run_logged
from .zoo import get

DEFAULT_CLUSTER = "ecp5-85:2+ecp5-45:2"  # hw.build's default chain
# Inside the stale-gradient stability bound for the default chain's staleness, and the best
# measured of 0.02-0.03 (docs/numerics.md); sim.train uses them too.
DEFAULT_BATCH, DEFAULT_LR = 1, 0.02
# --update: (each layer's fp_stale, eb_stale) from the mapping's fp_stale
UPDATES = {"auto": None,  # the rule of the update hw.build's mapping chooses: one of the two below
           "pipelined": lambda mapped: (mapped, 0),
           "aligned": lambda mapped: ({}, 0),
           "overlapped": lambda mapped: (mapped, 1)}  # mapped with overlapped_update: one sample staler
CHUNK = 240  # samples between progress lines
# A fixed-point run cannot overflow to NaN: an epoch whose mean loss is this many times
# the untrained net's has diverged.
DIVERGED_LOSS_RATIO = 4.0


@dataclass
class Run:
    """One training configuration and its per-epoch curve."""

    name: str
    mode: str
    fp_stale: dict
    eb_stale: int
    params: dict
    record: object = None
    curve: list = field(default_factory=list)  # (epoch, train loss, test accuracy)
    psum_cuts: dict = field(default_factory=dict)  # golden.train's: where the mapping's slices cut each layer


def accuracy(network, params, images, labels, arith):
    hits = sum(int(golden.forward(network, params, x, arith, s).output.ravel().argmax() == y)
               for s, (x, y) in enumerate(zip(images, labels)))
    return hits / len(labels)


def mean_loss(network, params, images, labels, arith):
    return float(np.mean([golden.loss(golden.forward(network, params, x, arith, s).output, y, arith)
                          for s, (x, y) in enumerate(zip(images, labels))]))


def epoch(network, run, images, labels, *, batch, lr, formats, progress):
    """One pass over ``images`` in chunks (for progress); returns the mean training loss."""
    losses = []
    step = max(batch, CHUNK - CHUNK % batch)
    for at in range(0, len(images), step):
        run.params, run.record = golden.train(
            network, run.params, images[at:at + step], labels[at:at + step], batch=batch, lr=lr,
            mode=run.mode, formats=formats, fp_stale=run.fp_stale, eb_stale=run.eb_stale,
            resume=run.record, psum_cuts=run.psum_cuts)
        losses.append(run.record.loss)
        progress(at + len(run.record.loss))
    return float(np.mean(np.concatenate(losses)))


def train(network, runs, data, *, epochs, batch, lr, formats, seed, log=print):
    """Train every run for ``epochs`` on ``data`` (a mapping.data.Dataset); each epoch shuffles
    the training split the same way for all."""
    train_x, test_x, train_y, test_y = data.train_x, data.test_x, data.train_y, data.test_y
    usable = len(train_x) - len(train_x) % batch
    if usable == 0:
        raise SpecError(f"{len(train_x)} training samples make no mini-batch of {batch}")
    order_rng = np.random.default_rng(seed)
    for run in runs:
        arith = golden.arithmetic(run.mode, formats, run.psum_cuts)
        run.initial_loss = mean_loss(network, run.params, test_x, test_y, arith)
        run.curve.append((0, run.initial_loss, accuracy(network, run.params, test_x, test_y, arith)))
    for e in range(1, epochs + 1):
        order = order_rng.permutation(len(train_x))[:usable]
        for run in runs:
            arith = golden.arithmetic(run.mode, formats, run.psum_cuts)
            began = time.monotonic()

            def progress(done):
                rate = done / max(time.monotonic() - began, 1e-9)
                print(f"\r{run.name}: epoch {e}/{epochs}, {done}/{usable} samples, {rate:.0f} samples/s",
                      end="", file=sys.stderr, flush=True)

            loss = epoch(network, run, train_x[order], train_y[order], batch=batch, lr=lr, formats=formats,
                         progress=progress)
            print(file=sys.stderr)
            acc = accuracy(network, run.params, test_x, test_y, arith)
            run.curve.append((e, loss, acc))
            log(f"{run.name}: epoch {e}: train loss {loss:.4f}, test accuracy {acc:.4f}")
            if loss > DIVERGED_LOSS_RATIO * run.initial_loss:
                raise SpecError(f"{run.name}: training diverged in epoch {e}: mean loss {loss:.3g} is over "
                                f"{DIVERGED_LOSS_RATIO:g}x the untrained net's {run.initial_loss:.3g}")
    return runs


def write_curves(runs, out):
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "epoch", "train_loss", "test_accuracy"])
        for run in runs:
            for e, loss, acc in run.curve:
                writer.writerow([run.name, e, f"{loss:.6f}", f"{acc:.6f}"])
    from .plots import training_curves

    training_curves([(run.name, run.curve) for run in runs], out / "fig16.png")


def parse_args(argv):
    p = Parser(prog="python -m mapping.train", description=__doc__.split("\n\n")[0], formatter_class=DefaultsShown)
    p.add_argument("--network", default="lenet-digits", help="zoo name or network spec file")
    p.add_argument("--data", default=DIGITS, help=SOURCE_HELP)
    p.add_argument("--epochs", type=positive_int, default=5, help="passes over the training split")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help="cluster the staleness is mapped on")
    p.add_argument("--mode", choices=golden.MODES, default="fixed", help="the hardware's fixed point, or float")
    p.add_argument("--update", choices=UPDATES, default="auto",
                   help="the stale weight versions of the chain hw.build generates (auto: its update stops the "
                        "engines or not, as hw.build --update auto chooses), those of the update that stops "
                        "them (pipelined) or of the one that does not (overlapped), or plain mini-batch SGD")
    add_loss_option(p, help=f"{LOSS_HELP}; docs/numerics.md")
    p.add_argument("--grad-bits", type=int_list(GRAD_BITS), default=[ACC_BITS],
                   help=f"{GRAD_BITS_HELP}; several, comma-separated, make a sweep")
    add_act_storage_option(p)
    p.add_argument("--psum-bits", type=int, choices=PSUM_BITS, default=ACC_BITS,
                   help="width of the partial sums between the slices --cluster's mapping cuts each layer into: "
                        f"{ACC_BITS} is exact, 32 saturates them as they leave a slice")
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="mini-batch size")
    p.add_argument("--lr", type=positive_number, default=DEFAULT_LR, help="learning rate")
    p.add_argument("--init-scale", type=positive_number, default=golden.INIT_SCALE,
                   help="He-normal initial weights times this (docs/numerics.md)")
    p.add_argument("--seed", type=int_list(), default=[0],
                   help="initial weights, split and sample order; several, comma-separated, make a sweep")
    p.add_argument("--limit", type=positive_int, help="use only the first N samples of the data")
    p.add_argument("--no-reference", action="store_true", help="skip the float aligned SGD reference run")
    p.add_argument("--out", type=Path, required=True, help="directory for curves.csv and fig16.png")
    add_jobs_option(p, "runs of a sweep to train")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    runs = [(bits, seed) for bits in args.grad_bits for seed in args.seed]
    with output_folder(args.out) as out:  # a path that cannot hold the curves is refused first
        if len(runs) == 1:
            _train_and_plot(_run_args(args, *runs[0]), out)
        else:
            _sweep(args, runs, out)


def _run_args(args, grad_bits, seed, reference=True):
    """The arguments of one run of a sweep."""
    return argparse.Namespace(**{**vars(args), "grad_bits": grad_bits, "seed": seed,
                                 "no_reference": args.no_reference or not reference})


def _sweep(args, runs, out):
    print(f"{len(runs)} runs, {args.jobs or 'every core'} at a time: {args.network}, gradient sums of "
          f"{', '.join(map(str, args.grad_bits))} bits, seeds {', '.join(map(str, args.seed))}; each in "
          f"{out}/grad{{W}}-seed{{S}} with its log")
    jobs = [(_run_args(args, bits, seed, reference=bits == args.grad_bits[0]), out / f"grad{bits}-seed{seed}")
            for bits, seed in runs]

    def progress(done, total, index, result):
        bits, seed = runs[index]
        shown = result if isinstance(result, str) else ", ".join(f"{n} {acc:.3f}" for n, acc in result.items())
        print(f"run {done} of {total} done ({bits}-bit sums, seed {seed}): {shown}", flush=True)

    results = run_jobs(_final_accuracies, jobs, args.jobs, progress)
    table = accuracy_table(args, runs, results)
    (out / "table.md").write_text(table + "\n")
    print(table)
    print(f"wrote {out / 'table.md'}")


def _final_accuracies(args, folder):
    """One run of a sweep, its output in ``folder``/log.txt: {run name: final test accuracy},
    or its refusal or divergence (which ends only this run)."""
    runs = run_logged(folder / "log.txt", _train_and_plot, args, folder)
    return runs if isinstance(runs, str) else {run.name: run.curve[-1][2] for run in runs}


def accuracy_table(args, runs, results):
    """Markdown: final test accuracy per width (rows) and seed (columns), with the gap to
    float aligned SGD in points where it ran (and its mean and worst over the seeds)."""
    owns = {id(result): _own_run(result) for result in results if isinstance(result, dict)}
    reference = {seed: result.get("float aligned") for (bits, seed), result in zip(runs, results)
                 if isinstance(result, dict) and result.get("float aligned") is not None}
    header = ["sums: width"] + [f"seed {seed}" for seed in args.seed] + (["mean gap", "worst gap"] if reference else [])
    rows = []
    if reference:
        rows.append(["float aligned"] + [f"{reference[s]:.3f}" if s in reference else "" for s in args.seed]
                    + ["", ""])
    for bits in args.grad_bits:
        cells, gaps = [], []
        for seed in args.seed:
            result = results[runs.index((bits, seed))]
            if isinstance(result, str) or owns[id(result)] is None:
                cells.append("failed (log.txt)")
                continue
            acc = result[owns[id(result)]]
            if seed in reference:
                gaps.append(100 * (reference[seed] - acc))
                cells.append(f"{acc:.3f} ({gaps[-1]:.1f})")
            else:
                cells.append(f"{acc:.3f}")
        label = f"{bits} (exact)" if bits == ACC_BITS else str(bits)
        if reference:
            cells += [f"{sum(gaps) / len(gaps):.1f}", f"{max(gaps):.1f}"] if gaps else ["", ""]
        rows.append([label] + cells)
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |" for row in [header] + rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    names = "/".join(sorted({name for name in owns.values() if name is not None})) or f"{args.mode} {args.update}"
    return "\n".join([f"{names} against float aligned SGD: final test accuracy (gap in points)"] + lines)


def _own_run(result):
    """The name of a result's own run ({run name: accuracy}): not its float aligned reference,
    unless that is the run itself (--mode float --update aligned); None if it has none."""
    return next((name for name in result if name != "float aligned"), next(iter(result), None))


def _train_and_plot(args, out):
    network = get(args.network)
    formats = formats_of(args.loss, args.grad_bits, args.psum_bits)
    warning = grad_bits_warning(args.grad_bits, args.batch)
    if warning:
        print(f"warning: {warning}")
    grouped = [info.name for info in network.weighted_layers if golden.conv_groups(info) > 1]
    if grouped:
        print(f"note: {', '.join(grouped)} grouped, which the hardware generator does not build yet: "
              f"staleness from the mapping model (python -m mapping)")
    policy = {"auto": "auto", "overlapped": "overlapped"}.get(args.update, "stop")
    mapping = map_network(network, parse_cluster(args.cluster), batch=args.batch, lr=args.lr,
                          formats=formats, act_storage=args.act_storage,
                          **{**({} if grouped else GENERATOR_OPTIONS), "update": policy})
    rule = args.update
    if rule == "auto":
        rule = "overlapped" if mapping.eb_stale() else "pipelined"
    stale, eb_stale = UPDATES[rule](mapping.fp_stale())
    print(f"{args.network} on {args.cluster}: fp_stale per layer "
          f"{', '.join(f'{k}={v}' for k, v in mapping.fp_stale().items())}; update {args.update}"
          + (f" ({rule})" if rule != args.update else "")
          + (" (FP one sample staler, EB on the previous sample's version)" if eb_stale else ""))
    data = load(args.data, network.input_shape, network.num_classes, seed=args.seed, limit=args.limit)
    real = golden.init_params(network, np.random.default_rng(args.seed), scale=args.init_scale)
    check = stability.margin(network, real, data.train_x[:8], data.train_y[:8], lr=args.lr, fp_stale=stale,
                             batch=args.batch, rng=np.random.default_rng(args.seed), loss=args.loss)
    print(check)
    if check.margin < 1:
        print("warning: lr * curvature is beyond the stale-gradient stability bound (docs/numerics.md)")
    params = golden.to_fixed(real, formats) if args.mode == "fixed" else real
    cuts = golden.psum_cuts([sl for node in mapping.nodes for sl in node.slices])
    runs = [Run(f"{args.mode} {rule}", args.mode, stale, eb_stale, params, psum_cuts=cuts)]
    if not args.no_reference and (args.mode, rule) != ("float", "aligned"):
        runs.append(Run("float aligned", "float", {}, 0, real))
    print(f"{len(data.train_x)} training, {len(data.test_x)} test samples; batch {args.batch}, lr {args.lr:g}, "
          f"loss {args.loss}, {formats.grad_bits}-bit gradient sums"
          + (f" ({formats.grad_frac} fractional bits)" if formats.grad_shift else "")
          + (f", {formats.psum_bits}-bit partial sums between the slices" if formats.psum_bits != ACC_BITS else ""))
    try:
        train(network, runs, data, epochs=args.epochs, batch=args.batch, lr=args.lr, formats=formats,
              seed=args.seed)
    finally:
        write_curves(runs, out)
        print(f"wrote {out / 'curves.csv'} and {out / 'fig16.png'}")
    return runs


if __name__ == "__main__":
    run_cli(main)
