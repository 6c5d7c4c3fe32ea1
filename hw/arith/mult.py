"""Signed multiplier with input and output registers and a clock enable.

Every multiply of the project goes through :class:`Multiplier` so that the
device's hard multiplier is used *with its internal registers*. On ECP5, Yosys
maps an inferred ``a * b`` to a MULT18X18D but leaves the primitive's input and
output registers unused (the registers land in the fabric), which caps Fmax near
155 MHz at speed grade 8; the primitive instantiated with its registers enabled
reaches about 175 MHz. Other families (and simulation) get the behavioural
``a * b`` between registers, which Yosys packs into DSP48E1/E2 with their
A/B/P registers on Xilinx.

Timing (both implementations): ``p`` is ``a * b`` of the operands presented
``LATENCY`` = 2 enabled clock edges earlier. The first enabled edge captures
``a`` and ``b``, the second the product; an edge with ``en`` low changes nothing,
so a stalled pipeline keeps its operands and its product.
"""

from amaranth.hdl import ClockSignal, Const, Instance, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mapping.memories import MULTIPLIER_LATENCY

from ..base.checks import check_family, refuse

LATENCY = MULTIPLIER_LATENCY
ECP5_WIDTH = 18  # MULT18X18D operand width


class Multiplier(wiring.Component):
    """``p = a * b`` (signed), ``LATENCY`` enabled cycles after ``a`` and ``b`` were presented.

    ``family``: "ecp5" instantiates MULT18X18D with its registers; another family of
    mapping.devices, or None (simulation), uses the portable behavioural model, which
    Yosys maps to the family's DSP blocks.
    """

    latency = LATENCY

    def __init__(self, a_width=16, b_width=16, family=None):
        check_family(self, family)
        for name, width in (("a_width", a_width), ("b_width", b_width)):
            if width < 1:
                refuse(self, f"multiplier: {name} = {width} must be at least 1")
            if family == "ecp5" and width > ECP5_WIDTH:
                refuse(self, f"multiplier: {name} = {width} exceeds the {ECP5_WIDTH}-bit "
                             f"operands of the ECP5 MULT18X18D")
        self.a_width, self.b_width, self.family = a_width, b_width, family
        super().__init__({
            "a": In(signed(a_width)),
            "b": In(signed(b_width)),
            "en": In(1),
            "p": Out(signed(a_width + b_width)),
        })

    def elaborate(self, platform):
        m = Module()
        if self.family == "ecp5":
            self._elaborate_mult18x18d(m)
        else:
            a = Signal.like(self.a, name="a_reg")
            b = Signal.like(self.b, name="b_reg")
            with m.If(self.en):
                m.d.sync += [a.eq(self.a), b.eq(self.b), self.p.eq(a * b)]
        return m

    def _elaborate_mult18x18d(self, m):
        # Operands sign-extended to 18 bits; the 36-bit product is exact for any widths <= 18.
        a, b = Signal(signed(ECP5_WIDTH)), Signal(signed(ECP5_WIDTH))
        product = Signal(signed(2 * ECP5_WIDTH))
        m.d.comb += [a.eq(self.a), b.eq(self.b), self.p.eq(product)]
        ports = {f"i_A{i}": a[i] for i in range(ECP5_WIDTH)}
        ports |= {f"i_B{i}": b[i] for i in range(ECP5_WIDTH)}
        ports |= {f"i_C{i}": Const(0, 1) for i in range(ECP5_WIDTH)}
        ports |= {f"o_P{i}": product[i] for i in range(2 * ECP5_WIDTH)}
        m.submodules.mult = Instance(
            "MULT18X18D",
            # Input A/B and output registers on CLK0/CE0 (CE0 is each register's default
            # enable, RST0 its default reset), no pipeline register: two cycles of latency.
            p_REG_INPUTA_CLK="CLK0", p_REG_INPUTB_CLK="CLK0", p_REG_OUTPUT_CLK="CLK0",
            p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
            p_GSR="DISABLED", p_RESETMODE="SYNC",
            i_CLK0=ClockSignal("sync"), i_CE0=self.en, i_RST0=Const(0, 1),
            i_SIGNEDA=Const(1, 1), i_SIGNEDB=Const(1, 1),
            i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
            **ports)
