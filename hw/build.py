"""``python -m hw.build --node N``: map, elaborate one node, write RTL, synthesize, compare.

Steps: map the network onto the cluster (or load a mapping JSON), take node N's
NodeConfig, elaborate ``hw.node.Node`` from it, write RTLIL and Verilog under
``--out``/nodeN, synthesize with Yosys for the node's device family and print
used vs available vs the mapping's estimate for multipliers, block RAM, LUTs
and FFs.
"""

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
import gc
import multiprocessing
from pathlib import Path
import sys
import threading
import time
import warnings

from mapping.cli import (ACT_STORAGE_HELP, DEFAULT_GRAD_BITS_HELP, LOSS_HELP, UPDATE_HELP, VECTOR_WORDS_HELP, DefaultsShown,
                         Parser, add_act_storage_option, add_loss_option, add_psum_bits_option, add_update_option,
                         add_vector_words_option,
                         formats_of, fraction, jobs_count, output_folder, positive_int, positive_number)
from mapping.errors import SpecError, read_text, run_cli
from mapping.mapper import BATCH, BRAM_FRACTION, LEARNING_RATE
from mapping.nodeconfig import VECTOR_WORDS
from mapping.parallel import check_jobs
from mapping.numerics import GRAD_BITS

DEFAULT_NETWORK = "tiny"
DEFAULT_CLUSTER = "ecp5-85:2+ecp5-45:2"
# Seconds without a Yosys pass starting after which a progress line says it is still busy.
QUIET_SECONDS = 10


def parse_args(argv):
    parser = Parser(prog="python -m hw.build", description=__doc__.splitlines()[0].split(": ", 1)[1],
                    formatter_class=DefaultsShown)
    parser.add_argument("--node", type=int, required=True, help="index of the node to build (0-based)")
    parser.add_argument("--network", help=f"zoo name or .toml/.json file (without --mapping: "
                        f"{DEFAULT_NETWORK}; with it, checked against the mapping's)")
    parser.add_argument("--cluster", help=f"cluster spec (without --mapping: {DEFAULT_CLUSTER}; with it, "
                        f"checked against the mapping's)")
    parser.add_argument("--mapping", help="a mapping JSON written by `python -m mapping --for-hardware` "
                        "(instead of mapping --network on --cluster here)")
    parser.add_argument("--bram-fraction", type=fraction, help="share of each device's block RAM the "
                        f"mapping may use (without --mapping: {BRAM_FRACTION}); less makes it keep fully "
                        "connected rows on other nodes")
    parser.add_argument("--batch", type=positive_int, help="mini-batch size the node is built for "
                        f"(without --mapping: {BATCH})")
    parser.add_argument("--lr", type=positive_number, help="learning rate the node is built for "
                        f"(without --mapping: {LEARNING_RATE})")
    add_loss_option(parser, default=None, help=f"{LOSS_HELP} (without --mapping: mse)")
    parser.add_argument("--grad-bits", type=int, choices=GRAD_BITS, help=DEFAULT_GRAD_BITS_HELP)
    add_psum_bits_option(parser)
    add_act_storage_option(parser, default=None, help=f"{ACT_STORAGE_HELP} (without --mapping: auto)")
    add_update_option(parser, default=None, help=f"{UPDATE_HELP} (without --mapping: auto)")
    add_vector_words_option(parser, default=None, help=f"{VECTOR_WORDS_HELP} (without --mapping: {VECTOR_WORDS})")
    parser.add_argument("--out", default="build", help="build folder")
    parser.add_argument("--no-synth", action="store_true", help="stop after writing the RTL")
    parser.add_argument("--jobs", type=jobs_count, default=0,
                        help="how many of the node's layer slices to elaborate, and Yosys runs writing its "
                             "Verilog or synthesizing it, at once, each in a process of its own (0: every core)")
    return parser.parse_args(argv)


def load_mapping(args):
    """The mapping to build from: the ``--mapping`` file, checked against ``--network`` and
    ``--cluster`` where given, or ``--network`` mapped onto ``--cluster`` as hw/ builds it."""
    from mapping.nodeconfig import Mapping

    options = {key: value for key, value in (("bram_fraction", args.bram_fraction), ("batch", args.batch),
                                             ("lr", args.lr), ("loss", args.loss), ("grad_bits", args.grad_bits), ("psum_bits", args.psum_bits),
                                             ("update", args.update),
                                             ("act_storage", args.act_storage),
                                             ("vector_words", args.vector_words)) if value is not None}
    if args.mapping:
        where = f"mapping file {args.mapping}"
        if options:
            given = ", ".join(f"--{key.replace('_', '-')}" for key in options)
            raise SpecError(f"{given} set how a network is mapped, but {where} is mapped already "
                            f"(map it again with python -m mapping --for-hardware {given} ...)")
        text = read_text(Path(args.mapping), where)
        try:
            mapping = Mapping.from_json(text)
        except SpecError as error:
            raise SpecError(f"{where}: {error}") from None
        for option, given, recorded in (("--network", args.network, mapping.network),
                                        ("--cluster", args.cluster, mapping.cluster)):
            if given is not None and not _same(given, recorded):
                raise SpecError(f"{where} maps '{recorded}', not '{given}' ({option})")
        return mapping
    from mapping.cluster import parse_cluster
    from mapping.mapper import GENERATOR_OPTIONS, mapper_for_widths
    from mapping.zoo import get

    loss, grad_bits, psum_bits = (options.pop(key, None) for key in ("loss", "grad_bits", "psum_bits"))
    return mapper_for_widths(grad_bits, psum_bits)(get(args.network or DEFAULT_NETWORK), parse_cluster(args.cluster or DEFAULT_CLUSTER),
                  formats=formats_of(loss, grad_bits, psum_bits), **{**GENERATOR_OPTIONS, **options})


def _same(given, recorded):
    """Whether a ``--network``/``--cluster`` names what the mapping records: the same text,
    or the same file."""
    if given.strip().lower() == recorded.strip().lower():
        return True
    return Path(given).is_file() and Path(recorded).is_file() and Path(given).samefile(recorded)


def resource_table(config, device, result=None):
    """Rows of (resource, used, available, estimate, used/estimate); without a synthesis
    ``result``, the mapping's estimate against what the device offers."""
    estimate = config.estimate
    rows = [("multipliers", device.dsp, estimate.dsp, result and result.dsp),
            ("block RAM (18 Kb)", device.bram_blocks, estimate.bram_blocks, result and result.bram),
            ("LUTs", device.lut, estimate.lut, result and result.lut),
            ("FFs", device.ff, estimate.ff, result and result.ff)]
    if result is None:
        lines = [f"{'resource':<20}{'estimate':>10}{'available':>12}{'util':>8}"]
        lines += [f"{name:<20}{est:>10}{available:>12}{est / available:>8.1%}"
                  for name, available, est, _ in rows]
        lines.append("(the mapping's estimate, mapping/resources.py; synthesize to compare)")
        return "\n".join(lines)
    lines = [f"{'resource':<20}{'used':>10}{'available':>12}{'util':>8}{'estimate':>10}{'used/est':>10}"]
    for name, available, est, used in rows:
        ratio = f"{used / est:.2f}" if est else "-"
        lines.append(f"{name:<20}{used:>10}{available:>12}{used / available:>8.1%}{est:>10}{ratio:>10}")
    lines.append("(multiplier and block RAM estimates list what the generator builds; LUT and FF "
                 "estimates are a linear per-slice and per-multiplier model, mapping/resources.py "
                 "logic_estimate; ECP5 LUTs are LUT4 sites, carry cells and distributed RAM counted)")
    return "\n".join(lines)


@contextmanager
def heartbeat(log, started, quiet=QUIET_SECONDS):
    """A ``progress(step)`` callback that logs each step with the elapsed time, and logs the
    step again whenever ``quiet`` seconds pass without a new one (ABC runs a minute silent)."""
    last = {"step": "starting", "at": time.monotonic()}
    done = threading.Event()

    def line(step):
        last["at"] = time.monotonic()
        log(f"  [{last['at'] - started:6.1f} s] {step}", flush=True)

    def progress(step):
        last["step"] = step
        line(step)

    def beat():
        while not done.wait(min(1, quiet)):
            if time.monotonic() - last["at"] >= quiet:
                line(f"{last['step']} (still running)")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        done.set()
        thread.join()


def write_node(config, family, out, jobs, log=None):
    """Node ``config``'s RTLIL and Verilog, ``out``/top.il and top.v. Amaranth elaborates on one
    core and a paper-scale slice takes minutes, so the node's layer slices are elaborated side by
    side in processes of their own (``Node(slices_apart=True)``) and each slice's Verilog is
    written by Yosys as soon as its RTLIL is there; ``jobs`` of these tasks run at once, the
    slices first, and the node's own RTLIL (its top, links, loss) is made meanwhile. ``log`` gets
    a line as each slice is elaborated."""
    from amaranth.back import rtlil
    from amaranth.hdl import UnusedElaboratable

    from .node.top import Node, slice_rtlil
    from .synth import VerilogWriter, yosys_rtlil

    slices = range(len(config.slices))
    # Spawned, not forked: the parent is running threads.
    with (ProcessPoolExecutor(min(jobs, len(slices)), mp_context=multiprocessing.get_context("spawn")) as processes,
          ThreadPoolExecutor(jobs) as tasks):
        writer = VerilogWriter(tasks)

        def elaborate(n):
            started = time.monotonic()
            text = yosys_rtlil(processes.submit(slice_rtlil, config, n, family=family).result())
            if log is not None:
                log(f"elaborated slice {n} ({config.slices[n].layer}) in {time.monotonic() - started:.0f} s",
                    flush=True)
            writer.add(text)
            return text

        elaborated = [tasks.submit(elaborate, n) for n in slices]
        # The node's own SliceUnits only give the instances their ports (their hardware is
        # elaborated in the processes above): collected here, never elaborated, without warnings.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnusedElaboratable)
            texts = [yosys_rtlil(rtlil.convert(Node(config, family=family, slices_apart=True)))]
            gc.collect()
        writer.add(texts[0])
        texts += [slice_text.result() for slice_text in elaborated]
        (out / "top.il").write_text("".join(texts))
        (out / "top.v").write_text(writer.text())
    return out / "top.il"


def build(args, log=print):
    """Map, elaborate, write the RTL and (unless ``--no-synth``) synthesize one node.

    Returns (NodeConfig, Device, SynthResult or None)."""
    from mapping.devices import get_device
    from mapping.memories import generator_problem

    started = time.monotonic()
    with output_folder(args.out) as folder:
        mapping = load_mapping(args)
        config = mapping.node(args.node)
        for s in config.slices:
            problem = generator_problem(s, config.formats.grad_bits, config.training.batch)
            if problem:
                raise SpecError(problem)
        device = get_device(config.device)
        layers = ", ".join(f"{s.layer}[{s.mode} in {s.in_range[0]}:{s.in_range[1]} "
                           f"out {s.out_range[0]}:{s.out_range[1]}]" for s in config.slices)
        log(f"node {config.index} of {len(mapping.nodes)} on {device.name} ({device.family}): {layers}")

        from .node.top import slice_module_name
        from .synth import compile_yosys, synthesize_node

        with output_folder(folder / f"node{config.index}") as out:
            (out / "mapping.json").write_text(mapping.to_json())
            compile_yosys(log)  # it writes the Verilog too
            il = write_node(config, device.family, out, check_jobs(args.jobs), log)
            log(f"wrote {out / 'top.il'} and {out / 'top.v'} ({time.monotonic() - started:.1f} s)")
            if args.no_synth:
                log(resource_table(config, device))
                log(f"outputs in {out}: mapping.json, top.il, top.v")
                return config, device, None
            log(f"synthesizing for {device.family} with Yosys, module by module (logs: {out / 'synth'}/*/yosys.log)",
                flush=True)
            with heartbeat(log, started) as progress:
                result = synthesize_node(il, device.family, out / "synth",
                                         [slice_module_name(config, n) for n in range(len(config.slices))],
                                         check_jobs(args.jobs), progress=progress)
            log(resource_table(config, device, result))
            log(f"done in {time.monotonic() - started:.1f} s; outputs in {out}: "
                f"{', '.join(sorted(path.name for path in out.iterdir()))}")
            return config, device, result


def main(argv=None):
    build(parse_args(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
