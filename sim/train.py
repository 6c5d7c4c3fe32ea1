"""Train a network on the simulated chain of generated nodes, on real data.

    python -m sim.train --network lenet-digits --cluster ecp5-85:3 --data digits --samples 500

Maps the network onto the cluster as the generator builds it, generates every node,
trains the simulated chain (Verilator, or Amaranth's simulator with ``--backend pysim``)
and the golden model on the same samples from the same initial weights, and reports:
whether every final word is the golden model's (the first differing one if not), the
test accuracy of the trained weights (the golden model's forward pass on the held-out
set), cycles per sample measured against the mapping's prediction on every node, and
simulated cycles per second. ``--links`` joins the neighbours through link cores over a
simulated lane (``--ber``, ``--lock-loss``) and prints every endpoint's counters.

``--distributed`` cuts that chain at its lanes into parts, one per MPI rank (sim/distributed.py):

    mpiexec -n 3 python -m sim.train --links --distributed

prints the same report, whether it is the one-process run's (``--compare``, the default), and
the speed per rank. Without ``mpiexec`` every part runs in this one process.
"""

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from mapping import data, golden, link_model, zoo
from mapping.cli import (DEFAULT_GRAD_BITS_HELP, DefaultsShown, Parser, add_act_storage_option,
                         add_fc_weights_option, fc_weights_problem,
                         add_grad_bits_option, add_loss_option, add_psum_bits_option, add_update_option, add_vector_words_option, formats_of,
                         positive_int, positive_number)
from mapping.cluster import parse_cluster
from mapping.errors import SpecError, run_cli
from mapping.mapper import GENERATOR_OPTIONS, grad_bits_warning, mapper_for_widths
from mapping.train import DEFAULT_BATCH, DEFAULT_LR
from sim.chain import first_difference, report, train_chain
from sim.chain_links import LinkedChain
from sim.distributed import Distributed, check_window, mpi_rank, mpi_transport, same_run, speed_report, train_distributed


def deadline(mapping, samples):
    """Cycles after which the run is taken for hung: four times the slowest node's predicted
    rate with its weight updates, per sample."""
    return int(4 * max(node.cycles_per_sample_with_updates for node in mapping.nodes) * samples) + 100_000


def parse_args(argv):
    parser = Parser(prog="python -m sim.train", description=__doc__.splitlines()[0], formatter_class=DefaultsShown)
    parser.add_argument("--network", default="lenet-digits", help="a network of the zoo or a spec file")
    parser.add_argument("--cluster", default="ecp5-85:3", help="e.g. ecp5-85:3 or ecp5-85:2+ecp5-45:2")
    parser.add_argument("--data", default=data.DIGITS, help=data.SOURCE_HELP)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--samples", type=positive_int,
                        help="train on this many samples per epoch (default: the whole training split)")
    parser.add_argument("--backend", choices=("verilator", "pysim"), default="verilator")
    parser.add_argument("--build", choices=("fast", "quick"), default="fast",
                        help="Verilator's build: fast to simulate, or quick to compile (sim/verilated.py)")
    # mapping.train's defaults: at larger mini-batches a few hundred samples barely move the
    # weights (batch 8, lr 0.01: no better than the initial weights after 496 digits)
    parser.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="mini-batch size")
    parser.add_argument("--lr", type=positive_number, default=DEFAULT_LR, help="learning rate")
    add_loss_option(parser)
    add_grad_bits_option(parser, default=None, help=DEFAULT_GRAD_BITS_HELP)
    add_psum_bits_option(parser)
    add_act_storage_option(parser)
    add_vector_words_option(parser)
    add_update_option(parser)
    add_fc_weights_option(parser)
    parser.add_argument("--seed", type=int, default=0, help="initial weights and the test split")
    links = parser.add_argument_group("links", "neighbours joined by link cores instead of wires")
    links.add_argument("--links", action="store_true",
                       help="join every pair of neighbours through two link endpoints and a simulated lane "
                            "(on Verilator: lanes in logic, hw/link/model_phy.py)")
    links.add_argument("--lane-width", type=int, choices=(8, 16, 32), default=link_model.LANE_WIDTH,
                       help="flit width (the ECP5 SERDES PHY's)")
    links.add_argument("--phy-latency", type=positive_int, default=link_model.PHY_LATENCY,
                       help="lane latency each way, in cycles")
    links.add_argument("--ber", type=probability, default=0.0, help="bit-error rate of every lane")
    links.add_argument("--lock-loss", type=lock_loss, metavar="LINK:CYCLE:CYCLES",
                       help="both lanes of link LINK lose lock for CYCLES cycles from CYCLE")
    spread = parser.add_argument_group("distributed", "the linked chain cut at its lanes, a part per MPI rank")
    spread.add_argument("--distributed", action="store_true",
                        help="simulate parts of the chain in processes of their own (under mpiexec: one part per "
                             "rank; without: every part in this process), exchanging the lanes' flits every window")
    spread.add_argument("--parts", type=positive_int,
                        help="parts without mpiexec (default: one per node; under mpiexec: one per rank)")
    spread.add_argument("--window", type=positive_int,
                        help="cycles between exchanges, at most --phy-latency (default: --phy-latency)")
    spread.add_argument("--compare", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the chain in one process and say whether every word, cycle and counter "
                             "is the same")
    return parser.parse_args(argv)


def probability(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number at least 0 and below 1, got '{text}'")
    return value


def lock_loss(text):
    parts = text.split(":")
    if len(parts) != 3 or not all(part.isdigit() for part in parts) or int(parts[2]) == 0:
        raise argparse.ArgumentTypeError(f"must be LINK:CYCLE:CYCLES with CYCLES at least 1, got '{text}'")
    return tuple(map(int, parts))


def linked_chain(args, mapping):
    """The LinkedChain ``--links`` asks for, or None; a ``--lock-loss`` on a link the chain
    does not have is refused."""
    if not args.links:
        if args.ber or args.lock_loss:
            raise SpecError("--ber and --lock-loss need --links")
        return None
    if args.lock_loss is not None and not 0 <= args.lock_loss[0] < len(mapping.nodes) - 1:
        raise SpecError(f"--lock-loss: link {args.lock_loss[0]} is not a link of the chain "
                        f"(0..{len(mapping.nodes) - 2})")
    return LinkedChain(lane_width=args.lane_width, latency=args.phy_latency, ber=args.ber,
                       lock_loss=args.lock_loss, seed=args.seed)


def accuracy(network, params, formats, images, labels):
    """Share of ``images`` the golden model's fixed-point forward pass classifies right."""
    arith = golden.arithmetic("fixed", formats)
    hits = sum(int(np.argmax(golden.forward(network, params, image, arith, k).output) == label)
               for k, (image, label) in enumerate(zip(images, labels)))
    return hits / len(labels)


class ProgressBar:
    """One line on stderr, redrawn at most a few times a second."""

    def __init__(self, total_samples):
        self.total, self.started, self.drawn = total_samples, None, 0.0

    def __call__(self, fraction, cycles):
        now = time.monotonic()
        if self.started is None:  # the first call comes after the build
            self.started = now - 1e-3
        if now - self.drawn < 0.25 and fraction < 1:
            return
        self.drawn = now
        width = 30
        filled = int(width * fraction)
        rate = cycles / max(now - self.started, 1e-9)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction * self.total:.0f}/{self.total} samples fed, "
              f"{cycles} cycles, {rate / 1000:.0f}k cycles/s", end="", file=sys.stderr, flush=True)

    def close(self):
        print(file=sys.stderr, flush=True)


def distributed_spec(args, mapping):
    """The Distributed ``--distributed`` asks for (an MPI transport under mpiexec), or None."""
    if not args.distributed:
        if args.parts or args.window:
            raise SpecError("--parts and --window need --distributed")
        return None
    if not args.links or args.backend != "verilator":
        raise SpecError("--distributed cuts the chain at its link lanes: it needs --links on the verilator backend")
    window = args.window or args.phy_latency
    check_window(window, args.phy_latency)
    transport = mpi_transport()
    nodes = len(mapping.nodes)
    if transport is not None:
        if args.parts:
            raise SpecError(f"--parts under mpiexec: the chain has one part per rank ({transport.size})")
        if transport.size > nodes:
            raise SpecError(f"{transport.size} MPI ranks for a chain of {nodes} nodes: at most one rank per node")
    return Distributed(transport.size if transport is not None else args.parts or nodes, window, transport)


def main(argv=None):
    args = parse_args(argv)
    try:
        return _main(args)
    except SpecError:
        if mpi_rank() > 0:
            raise SystemExit(2) from None  # every rank refuses alike: rank 0 says why
        raise


@dataclass
class Setup:
    """What the options ask for, before any simulation."""
    network: object
    mapping: object
    dataset: object
    inputs: np.ndarray
    labels: np.ndarray
    params: dict
    links: object       # a LinkedChain or None
    deadline: int


def setup(args):
    """The network, its mapping, the data and the initial weights the options ask for."""
    network = zoo.get(args.network)
    warning = args.grad_bits and grad_bits_warning(args.grad_bits, args.batch)
    if warning and mpi_rank() == 0:
        print(f"warning: {warning}")
    mapping = mapper_for_widths(args.grad_bits, args.psum_bits)(network, parse_cluster(args.cluster), batch=args.batch, lr=args.lr,
                     formats=formats_of(args.loss, args.grad_bits, args.psum_bits), act_storage=args.act_storage,
                     vector_words=args.vector_words,
                     **{**GENERATOR_OPTIONS, "fc_weights": args.fc_weights, "update": args.update})
    problem = fc_weights_problem(mapping, args.fc_weights)
    if problem:
        raise SpecError(problem)
    dataset = data.load(args.data, network.input_shape, network.num_classes, seed=args.seed)
    per_epoch = len(dataset.train_x) if args.samples is None else min(args.samples, len(dataset.train_x))
    per_epoch -= per_epoch % args.batch
    if per_epoch == 0:
        raise SpecError(f"fewer training samples than one mini-batch of {args.batch}")
    inputs = np.concatenate([dataset.train_x[:per_epoch]] * args.epochs)
    labels = np.concatenate([dataset.train_y[:per_epoch]] * args.epochs)
    params = golden.init_params(network, np.random.default_rng(args.seed), mapping.nodes[0].formats)
    links = linked_chain(args, mapping)
    return Setup(network, mapping, dataset, inputs, labels, params, links,
                 deadline(mapping, len(inputs)) * (4 if links else 1))


def _main(args):
    s = setup(args)
    network, mapping, dataset, inputs, labels, params, links = (s.network, s.mapping, s.dataset, s.inputs,
                                                                 s.labels, s.params, s.links)
    formats = mapping.nodes[0].formats
    spread = distributed_spec(args, mapping)
    rank = spread.transport.rank if spread and spread.transport else 0
    if rank == 0:
        print(f"{network.name} on {args.cluster}: {len(mapping.nodes)} nodes, mini-batch {args.batch}, "
              f"lr {args.lr}; {len(inputs)} samples of {dataset.name} ({args.epochs} epoch(s)), "
              f"{len(dataset.test_x)} held out; backend {args.backend}", flush=True)
    bar = ProgressBar(len(inputs)) if rank == 0 else None
    limit = s.deadline
    if spread:
        run = train_distributed(network, mapping, inputs, labels, params, links, spread, deadline=limit,
                                progress=bar, profile=args.build)
        if run is None:  # not rank 0
            spread.transport.wait_for_all()
            return 0
    else:
        run = train_chain(network, mapping, inputs, labels, params, backend=args.backend, progress=bar,
                          deadline=limit, links=links, profile=args.build)
    bar.close()
    difference = first_difference(run)
    print(f"bit-exact: {'yes' if difference is None else 'no, ' + difference}")
    print(f"test accuracy: {accuracy(network, run.params, formats, dataset.test_x, dataset.test_y):.1%} "
          f"(initial weights: {accuracy(network, params, formats, dataset.test_x, dataset.test_y):.1%}) "
          f"on {len(dataset.test_x)} held-out samples")
    print(f"{run.cycles} cycles, {run.cycles / len(inputs):.1f} per sample (mini-batch boundaries included); "
          f"simulated {run.cycles_per_second:,.0f} cycles/s, {run.cycles_per_cpu_second:,.0f} per CPU second "
          f"({len(inputs) / run.seconds:.1f} samples/s)")
    print(report(mapping, run))
    if links is not None:
        print(f"links: {links.predicted_cycles(mapping):.0f} cycles/sample predicted (mapping/link_model.py)")
    for i, ends in enumerate(run.link_counters):
        print(f"link {i}: " + "; ".join(f"{side} " + ", ".join(f"{name} {count}" for name, count in end.items())
                                        for side, end in zip(("up", "down"), ends)))
    same = True
    if spread:
        print(f"distributed: {len(run.stats)} parts (nodes "
              + ", ".join(f"{s.nodes.start}..{s.nodes.stop - 1}" for s in run.stats)
              + f"), a window of {spread.window} cycles, lanes of {links.latency} cycles", flush=True)
        one = None
        if args.compare:
            one = train_chain(network, mapping, inputs, labels, params, backend=args.backend, deadline=limit,
                              links=links, profile=args.build)
            differs = same_run(run, one)
            same = differs is None
            print(f"same as one process: {'yes' if same else 'no, ' + differs}")
        print(speed_report(run, one))
        if spread.transport is not None:
            spread.transport.wait_for_all()
    return 0 if difference is None and same else 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
