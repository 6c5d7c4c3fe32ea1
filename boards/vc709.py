"""The Xilinx Virtex-7 FPGA VC709 Connectivity Kit (XC7VX690T-2FFG1761C), after the board's
user guide (UG887): pins of the 200 MHz system clock, the CPU reset button, the USB UART
(a Silicon Labs CP2103) and the eight GPIO LEDs, and the four SFP+ cages' transceiver
lanes (GTH, quad 113, referenced by the SI5324 jitter attenuator on MGTREFCLK0).

The transceiver pins are those of the VC709 constraints in Alex Forencich's verilog-ethernet
and Corundum (used on the board): cage n's lane and TX_DISABLE pin in their order, which swaps
SFP+ 1 and 2 against the schematic's net names to match the board layout. UG887's own pin
table was not at hand to check them against. The SI5324 gives no 156.25 MHz until it is
programmed over I2C (behind the PCA9548 switch; those designs do it at power-up, and so do the
board tops here, boards/si5324.py); its I2C and reset pins are those of the same designs and of
the VC707's constraints (the same package and pins for these).

Open tools stop at Yosys synthesis (``synth_xilinx``) for this part: nextpnr-xilinx and
Project X-Ray have no database for Virtex-7, so place and route and the bitstream need
Vivado (``python -m boards.build --board vc709`` writes the Vivado project next to the
netlist and says so).
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, PinsN, Resource, Subsignal
from amaranth.vendor import XilinxPlatform
from amaranth_boards.resources import I2CResource, LEDResources, UARTResource

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
        # the SI5324 behind the PCA9548 I2C switch, both with active-low resets (boards/si5324.py)
        I2CResource(0, scl="AT35", sda="AU32", attrs=Attrs(IOSTANDARD="LVCMOS18")),
        Resource("i2c_switch_reset", 0, PinsN("AY42", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("si5324_reset", 0, PinsN("AT36", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
        *(Resource("sfp", n, Subsignal("tx", DiffPairs(tx_p, tx_n, dir="o")),
                   Subsignal("rx", DiffPairs(rx_p, rx_n, dir="i")),
                   Subsignal("tx_disable", PinsN(disable, dir="o"), Attrs(IOSTANDARD="LVCMOS18")))
          for n, (tx_p, tx_n, rx_p, rx_n, disable) in enumerate((
              ("AN2", "AN1", "AM8", "AM7", "Y42"),     # MGTH 113 channel 2
              ("AP4", "AP3", "AN6", "AN5", "AB41"),    # channel 3
              ("AM4", "AM3", "AL6", "AL5", "AC38"),    # channel 1
              ("AL2", "AL1", "AJ6", "AJ5", "AC40")))), # channel 0
    ]
    connectors = []
