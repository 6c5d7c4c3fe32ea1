"""The VC709's transceiver PHY: one Virtex-7 GTH channel (GTHE2_CHANNEL) with 8b/10b, for the
SFP+ cages (direct-attach copper between boards, or optics rated for the line rate).

The issue asked for "GTX": the VC709's XC7VX690T has GTH transceivers (the XT parts of Virtex-7
carry GTH, the 485T GTX), so this is LiteICLink's 7-series GTH core (``GTH``: channel settings,
the bring-up and lock sequencing, 8b/10b in fabric, a clock aligner that resets the receiver until
a comma lands in the first character of a word), generated as Verilog (hw.link.serdes says why)
and instantiated by :class:`GTHSerdesPhy`.

Rate: 40 line bits per word clock (four 8b/10b characters), so a 32-bit flit with its control
flag in byte 0's K flag per cycle. From the 156.25 MHz SFP+ reference (the SI5324 on the VC709)
the channel PLL runs 6.25 Gb/s: a 156.25 MHz link clock, 5 Gb/s of characters. The mapping's
VC709 entry counts two SFP+ lanes at 10 Gb/s; 10.3125 Gb/s needs the quad PLL and a 258 MHz link
clock, which no tool here can time (place and route for Virtex-7 needs Vivado).
"""

from .serdes import SerdesPhy, write_liteiclink_verilog

GTH_MODULE = "fpdeep_gth_serdes"
# The same channel with its reference clock buffered outside (one IBUFDS_GTE2 for the channels
# of a quad that share it: two modules each buffering the same pins is no design Vivado places).
GTH_CHANNEL_MODULE = "fpdeep_gth_channel"
LANE_WIDTH = 32
REFCLK_HZ = 156.25e6
LINE_RATE = 6.25e9


def write_gth_verilog(directory, refclk_freq=REFCLK_HZ, linerate=LINE_RATE, sys_clk_freq=100e6, name=GTH_MODULE,
                      refclk_buffer=True):
    """Write module ``name`` (LiteICLink's GTH with its channel PLL, 32-bit data and 4 K flags each
    way; ``sys_clk_freq``: the clock of ``sys_clk``, which times the bring-up sequence) to
    ``directory``/``name``.v; returns its path. With ``refclk_buffer`` the module takes the
    reference clock's pins ``refclk_p``/``refclk_n`` into its own IBUFDS_GTE2, without it the
    buffered clock on ``refclk``."""
    from litex.build.xilinx.common import xilinx_special_overrides
    from liteiclink.serdes.gth_7series import GTH, GTHChannelPLL
    from migen import Instance as MigenInstance, Signal as MigenSignal

    def channel(refclk, tx_pads, rx_pads):
        return GTH(GTHChannelPLL(refclk, refclk_freq, linerate), tx_pads, rx_pads, sys_clk_freq, data_width=40)

    def buffered(wrapper, refclk_p, refclk_n, tx_pads, rx_pads):
        refclk = MigenSignal()
        wrapper.specials += MigenInstance("IBUFDS_GTE2", i_CEB=0, i_I=refclk_p, i_IB=refclk_n, o_O=refclk)
        return channel(refclk, tx_pads, rx_pads)

    def shared(wrapper, refclk, tx_pads, rx_pads):
        return channel(refclk, tx_pads, rx_pads)

    if refclk_buffer:
        return write_liteiclink_verilog(directory, name, buffered, xilinx_special_overrides)
    return write_liteiclink_verilog(directory, name, shared, xilinx_special_overrides, refclk_ports=("refclk",))


class GTHSerdesPhy(SerdesPhy):
    """One GTH channel behind the link's PHY interface (lane width 32); the core aligns words on
    the idle comma, so no byte re-pairing. ``pins``: ``pads`` and ``refclk_buffered`` (with
    module :data:`GTH_CHANNEL_MODULE`), as :class:`SerdesPhy` takes them."""

    def __init__(self, link_domain="link", rx_domain="link_rx", module=GTH_MODULE, **pins):
        super().__init__(module, LANE_WIDTH, comma_aligner=False, link_domain=link_domain, rx_domain=rx_domain,
                         **pins)
