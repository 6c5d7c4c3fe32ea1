"""``python -m hw.build --node N``: map, elaborate one node, write RTL, synthesize, compare.

Steps: map the network onto the cluster (or load a mapping JSON), take node N's
NodeConfig, elaborate ``hw.node.Node`` from it, write RTLIL and Verilog under
``--out``/nodeN, synthesize with Yosys for the node's device family and print
used vs available vs the mapping's estimate for multipliers, block RAM, LUTs
and FFs.
"""

import argparse
import sys
import time
from pathlib import Path

from mapping.errors import SpecError, run_cli

DEFAULT_NETWORK = "tiny"
DEFAULT_CLUSTER = "ecp5-85:2+ecp5-45:2"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m hw.build", description=__doc__.splitlines()[0])
    parser.add_argument("--node", type=int, required=True, help="index of the node to build (0-based)")
    parser.add_argument("--network", default=DEFAULT_NETWORK, help="zoo name or .toml/.json file "
                        f"(default {DEFAULT_NETWORK})")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"cluster spec (default {DEFAULT_CLUSTER})")
    parser.add_argument("--mapping", help="a mapping JSON written by `python -m mapping` (overrides "
                        "--network/--cluster)")
    parser.add_argument("--bram-fraction", type=float, help="share of each device's block RAM the mapping "
                        "may use (default that of mapping.mapper); less makes it keep fully connected "
                        "rows on other nodes")
    parser.add_argument("--out", default="build", help="build directory (default ./build)")
    parser.add_argument("--no-synth", action="store_true", help="stop after writing the RTL")
    return parser.parse_args(argv)


def load_mapping(args):
    from mapping.nodeconfig import Mapping

    if args.mapping:
        try:
            return Mapping.from_json(Path(args.mapping).read_text())
        except OSError as error:
            raise SpecError(f"mapping file {args.mapping}: {error.strerror}") from None
    from mapping.cluster import parse_cluster
    from mapping.mapper import GENERATOR_OPTIONS, map_network
    from mapping.zoo import get

    fraction = {} if args.bram_fraction is None else {"bram_fraction": args.bram_fraction}
    return map_network(get(args.network), parse_cluster(args.cluster), **fraction, **GENERATOR_OPTIONS)


def resource_table(config, device, result):
    """Rows of (resource, used, available, estimate, used/estimate)."""
    estimate = config.estimate
    rows = [("multipliers", result.dsp, device.dsp, estimate.dsp),
            ("block RAM (18 Kb)", result.bram, device.bram_blocks, estimate.bram_blocks),
            ("LUTs", result.lut, device.lut, estimate.lut),
            ("FFs", result.ff, device.ff, estimate.ff)]
    lines = [f"{'resource':<20}{'used':>10}{'available':>12}{'util':>8}{'estimate':>10}{'used/est':>10}"]
    for name, used, available, est in rows:
        ratio = f"{used / est:.2f}" if est else "-"
        lines.append(f"{name:<20}{used:>10}{available:>12}{used / available:>8.1%}{est:>10}{ratio:>10}")
    lines.append("(multiplier and block RAM estimates list what the generator builds; LUT and FF "
                 "estimates are a linear per-slice and per-multiplier model, mapping/resources.py "
                 "logic_estimate; ECP5 LUTs are LUT4 sites, carry cells and distributed RAM counted)")
    return "\n".join(lines)


def build(args, log=print):
    """Map, elaborate, write the RTL and (unless ``--no-synth``) synthesize one node.

    Returns (NodeConfig, Device, SynthResult or None)."""
    started = time.monotonic()
    mapping = load_mapping(args)
    config = mapping.node(args.node)
    from mapping.devices import get_device

    device = get_device(config.device)
    layers = ", ".join(f"{s.layer}[{s.mode} in {s.in_range[0]}:{s.in_range[1]} "
                       f"out {s.out_range[0]}:{s.out_range[1]}]" for s in config.slices)
    log(f"node {config.index} of {len(mapping.nodes)} on {device.name} ({device.family}): {layers}")

    from amaranth.back import verilog

    from .node import Node
    from .synth import synthesize_rtlil, write_rtlil

    out = Path(args.out) / f"node{config.index}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "mapping.json").write_text(mapping.to_json())
    il = write_rtlil(Node(config, family=device.family), out / "top.il")
    # The second half of verilog.convert, on the RTLIL just written: convert() would
    # elaborate the node again.
    (out / "top.v").write_text(verilog._convert_rtlil_text(il.read_text()))
    log(f"wrote {out / 'top.il'} and {out / 'top.v'} ({time.monotonic() - started:.1f} s)")
    if args.no_synth:
        return config, device, None
    log(f"synthesizing for {device.family} with Yosys (log: {out / 'yosys.log'})")

    def progress(step):
        log(f"  [{time.monotonic() - started:6.1f} s] {step}", flush=True)

    result = synthesize_rtlil(il, device.family, out, progress=progress)
    log(resource_table(config, device, result))
    log(f"done in {time.monotonic() - started:.1f} s")
    return config, device, result


def main(argv=None):
    build(parse_args(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
