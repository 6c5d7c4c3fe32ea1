"""The ECP5 SERDES PHY: one DCUA channel with 8b/10b, for ECP5-5G boards joined by SMA or
SERDES connectors.

:func:`write_serdes_verilog` generates LiteICLink's ECP5 SERDES core (``SerDesECP5``: DCUA
settings, reset/lock sequencing, 8b/10b encoder and decoder in fabric), as used on real boards,
as a Verilog module ``fpdeep_ecp5_serdes`` (hw.link.serdes says why), and
:class:`ECP5SerdesPhy` instantiates it.

Rates: the DCUA runs 20 line bits (two 8b/10b characters) per word clock, so a 16-bit flit with
its control flag in byte 0's K flag per tx clock cycle; a 2.5 Gb/s line (100 MHz reference, the
default) gives a 125 MHz link clock, and the ECP5-5G parts run 5 Gb/s from a 250 MHz reference
(250 MHz link clock).
"""

from .serdes import SerdesPhy, write_liteiclink_verilog

SERDES_MODULE = "fpdeep_ecp5_serdes"
LANE_WIDTH = 16


def write_serdes_verilog(directory, refclk_freq=100e6, linerate=2.5e9, dual=0, channel=0, name=SERDES_MODULE):
    """Write module ``name`` (EXTREFB reference input, LiteICLink's SerDesECP5 on DCU ``dual``
    channel ``channel``, 16-bit data and 2 K flags each way; one module per DCU channel a design
    uses) to ``directory``/``name``.v; returns its path."""
    from litex.build.lattice.common import lattice_ecp5_trellis_special_overrides
    from liteiclink.serdes.serdes_ecp5 import SerDesECP5, SerDesECP5PLL
    from migen import Instance as MigenInstance, Signal as MigenSignal

    def make_serdes(wrapper, refclk_p, refclk_n, tx_pads, rx_pads):
        refclk = MigenSignal()
        wrapper.specials += MigenInstance("EXTREFB", i_REFCLKP=refclk_p, i_REFCLKN=refclk_n, o_REFCLKO=refclk,
                                          p_REFCK_PWDNB="0b1", p_REFCK_RTERM="0b1", p_REFCK_DCBIAS_EN="0b0")
        return SerDesECP5(SerDesECP5PLL(refclk, refclk_freq, linerate), tx_pads, rx_pads, dual=dual, channel=channel)

    return write_liteiclink_verilog(directory, name, make_serdes, lattice_ecp5_trellis_special_overrides)


class ECP5SerdesPhy(SerdesPhy):
    """One DCUA channel behind the link's PHY interface (lane width 16): the DCUA aligns
    characters, not words, so a comma aligner re-pairs the bytes (``SerdesPhy``)."""

    def __init__(self, link_domain="link", rx_domain="link_rx", module=SERDES_MODULE):
        super().__init__(module, LANE_WIDTH, comma_aligner=True, link_domain=link_domain, rx_domain=rx_domain)
