"""The Xilinx Virtex-7 FPGA VC709 Connectivity Kit (XC7VX690T-2FFG1761C), after the board's
user guide (UG887): pins of the 200 MHz system clock, the CPU reset button, the USB UART
(a Silicon Labs CP2103) and the eight GPIO LEDs, and the four SFP+ cages' transceiver
lanes (GTH, quad 113, referenced by the SI5324 jitter attenuator on MGTREFCLK0).

Open tools stop at Yosys synthesis (``synth_xilinx``) for this part: nextpnr-xilinx and
Project X-Ray have no database for Virtex-7, so place and route and the bitstream need
Vivado (``python -m boards.build --board vc709`` writes the Vivado project next to the
netlist and says so).
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, PinsN, Resource, Subsignal
from amaranth.vendor import XilinxPlatform
from amaranth_boards.resources import LEDResources, UARTResource

__all__ = ["VC709Platform"]


class VC709Platform(XilinxPlatform):
    device = "xc7vx690t"
    package = "ffg1761"
    speed = "2"
    default_clk = "clk200"
    default_rst = "rst"
    resources = [
        Resource("clk200", 0, DiffPairs("H19", "G18", dir="i"), Clock(200e6), Attrs(IOSTANDARD="LVDS")),
        Resource("rst", 0, Pins("AV40", dir="i"), Attrs(IOSTANDARD="LVCMOS18")),
        UARTResource(0, rx="AU33", tx="AU36", attrs=Attrs(IOSTANDARD="LVCMOS18")),
        *LEDResources(pins="AM39 AN39 AR37 AT37 AR35 AP41 AP42 AU39", attrs=Attrs(IOSTANDARD="LVCMOS18")),
        Resource("sfp_refclk", 0, DiffPairs("AH8", "AH7", dir="i"), Clock(156.25e6)),
        *(Resource("sfp", n, Subsignal("tx", DiffPairs(tx_p, tx_n, dir="o")),
                   Subsignal("rx", DiffPairs(rx_p, rx_n, dir="i")),
                   Subsignal("tx_disable", PinsN(disable, dir="o"), Attrs(IOSTANDARD="LVCMOS18")))
          for n, (tx_p, tx_n, rx_p, rx_n, disable) in enumerate((
              ("AN4", "AN3", "AN8", "AN7", "AB41"), ("AM2", "AM1", "AM6", "AM5", "Y42"),
              ("AL4", "AL3", "AL8", "AL7", "AC38"), ("AK2", "AK1", "AK6", "AK5", "AC40")))),
    ]
    connectors = []
