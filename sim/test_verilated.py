"""The Verilator build cache (sim/verilated.py): a design named by a recipe is found again
without converting it to RTLIL; another recipe, or other source, converts it again but compiles
only a netlist not built before."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from sim import verilated


class Doubler(wiring.Component):
    def __init__(self):
        super().__init__({"a": In(8), "b": Out(9)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.b.eq(self.a * 2)
        return m


def test_a_recipe_finds_its_build_without_converting_the_design(tmp_path, monkeypatch):
    monkeypatch.setenv("FPDEEP_VERILATOR_CACHE", str(tmp_path))
    compiled, converted = [], []

    def compile_stub(kept, runtime, sources, *args):
        compiled.append(sources["top.v"])
        kept.parent.mkdir(parents=True)
        kept.write_text("library")

    real_rtlil = verilated._rtlil

    def counting_rtlil(design):
        converted.append(design)
        return real_rtlil(design)

    monkeypatch.setattr(verilated, "_compile", compile_stub)
    monkeypatch.setattr(verilated, "_rtlil", counting_rtlil)

    def build(recipe):
        return verilated.build(Doubler(), recipe=recipe, progress=lambda message: None)[0]

    first = build("doubler")
    assert (len(compiled), len(converted)) == (1, 1) and "module top" in compiled[0]
    assert build("doubler") == first and (len(compiled), len(converted)) == (1, 1)
    # a new recipe (other arguments, or edited source) of the same netlist: converted, not compiled
    assert build("doubler, named otherwise") == first and (len(compiled), len(converted)) == (1, 2)
    monkeypatch.setattr(verilated, "source_digest", lambda *modules: "edited source")
    assert build("doubler") == first and (len(compiled), len(converted)) == (1, 3)
    assert build("doubler") == first and (len(compiled), len(converted)) == (1, 3)
    # without a recipe: converted every time
    assert build(None) == first and (len(compiled), len(converted)) == (1, 4)
    # another netlist: compiled
    monkeypatch.setattr(Doubler, "elaborate", tripling)
    assert build("tripler") != first and (len(compiled), len(converted)) == (2, 5)


def tripling(self, platform):
    m = Module()
    m.d.comb += self.b.eq(self.a * 3)
    return m


def test_the_source_digest_reads_what_the_design_imports_and_nothing_else():
    """The modules of the design's classes and their imports, directly or not, with the
    packages that hold them; not the mapper (it makes the recipe's mapping), not the tests."""
    digested = []
    real_read = verilated.Path.read_bytes

    def reading(path):
        digested.append(path.relative_to(verilated._ROOT).as_posix())
        return real_read(path)

    verilated.source_digest.cache_clear()
    try:
        verilated.Path.read_bytes = reading
        verilated.source_digest("sim.chain_top")
    finally:
        verilated.Path.read_bytes = real_read
        verilated.source_digest.cache_clear()
    assert {"sim/chain_top.py", "sim/stall.py", "sim/__init__.py", "hw/node/top.py", "hw/node/slice_unit.py",
            "hw/__init__.py", "mapping/nodeconfig.py", "mapping/numerics.py"} <= set(digested)
    assert not {"mapping/mapper.py", "sim/chain.py", "sim/verilated.py"} & set(digested)
    assert not [name for name in digested if name.rpartition("/")[2].startswith(("test_", "conftest"))]


def test_a_design_s_modules_are_those_of_every_elaboratable_it_built():
    top = Doubler()
    top.parts = [Doubler(), {"inner": Tripler()}]
    assert verilated._design_modules(top) == ("sim.test_verilated", "sim.tripler")
    verilated.never_elaborated(top)


class Tripler(Doubler):
    __module__ = "sim.tripler"
