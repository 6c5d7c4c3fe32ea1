"""Synthesis of designs that instantiate a SERDES PHY: LiteICLink's core is generated as Verilog
(hw.link.ecp5_serdes.write_serdes_verilog, hw.link.gth_serdes.write_gth_verilog) and read into
Yosys beside the design (``hw.synth.synthesize_rtlil``'s ``verilog``)."""

from hw.link.ecp5_serdes import SERDES_MODULE, write_serdes_verilog
from hw.synth import run_nextpnr_ecp5, synthesize_rtlil, write_rtlil


def synthesize_with_serdes(top, work, cores=((SERDES_MODULE, write_serdes_verilog),), family="ecp5",
                           netlist=None):
    """``cores``: (module name, writer) of every transceiver core ``top`` instantiates; the
    writer is called as ``writer(work, name=name)`` and returns the Verilog file's path;
    ``netlist`` as for :func:`hw.synth.synthesize_rtlil`."""
    verilog = [write(work, name=name).name for name, write in cores]
    write_rtlil(top, work / "top.il")
    return synthesize_rtlil(work / "top.il", family, work, netlist=netlist, verilog=verilog)


def place_on_ecp5_85(work, freq_mhz=125):
    """nextpnr-ecp5 on ``work``/top.json for an LFE5UM5G-85F-8BG381C; the report's JSON."""
    return run_nextpnr_ecp5(work, ["--um5g-85k", "--package", "CABGA381", "--speed", "8", "--freq", str(freq_mhz),
                                   "--timing-allow-fail", "--seed", "1"])
