"""The ECP5 SERDES PHY: one DCUA channel with 8b/10b, for ECP5-5G boards joined by SMA or
SERDES connectors.

The DCUA has hundreds of parameters whose working values come from hardware bring-up, so this
PHY does not set them by hand: :func:`write_serdes_verilog` generates LiteICLink's ECP5 SERDES core
(``SerDesECP5``: DCUA settings, reset/lock sequencing, 8b/10b encoder and decoder in fabric),
as used on real boards, as a Verilog module ``fpdeep_ecp5_serdes``, and
:class:`ECP5SerdesPhy` instantiates it. liteiclink (and the migen it is written in) is only
needed to generate that file, not to build or simulate anything else in hw.link.

Rates: the DCUA runs 20 line bits (two 8b/10b characters) per word clock, so a 16-bit flit with
its control flag in byte 0's K flag per tx clock cycle; a 2.5 Gb/s line (100 MHz reference, the
default) gives a 125 MHz link clock, and the ECP5-5G parts run 5 Gb/s from a 250 MHz reference
(250 MHz link clock).
"""

from pathlib import Path

from amaranth.hdl import Cat, ClockSignal, DomainRenamer, Instance, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from .layer import PhySignature, flit_layout
from .protocol import K_IDLE, K_TS1

SERDES_MODULE = "fpdeep_ecp5_serdes"
LANE_WIDTH = 16


def write_serdes_verilog(directory, refclk_freq=100e6, linerate=2.5e9, dual=0, channel=0, name=SERDES_MODULE):
    """Write module ``name`` (EXTREFB reference input, LiteICLink's SerDesECP5 on DCU ``dual``
    channel ``channel``, 16-bit data and 2 K flags each way; one module per DCU channel a design
    uses) to ``directory``/``name``.v, with the 8b/10b tables it reads ($readmemh files, found
    relative to the directory the synthesis tool runs in). Returns the Verilog file's path."""
    from litex.build.lattice.common import lattice_ecp5_trellis_special_overrides
    from liteiclink.serdes.serdes_ecp5 import SerDesECP5, SerDesECP5PLL
    from migen import ClockDomain as MigenClockDomain, Instance as MigenInstance, Module as MigenModule
    from migen import Record, Signal as MigenSignal
    from migen.fhdl.verilog import convert

    class Wrapper(MigenModule):
        def __init__(self):
            self.clock_domains.cd_sys = MigenClockDomain()
            refclk_p, refclk_n = MigenSignal(name_override="refclk_p"), MigenSignal(name_override="refclk_n")
            refclk = MigenSignal()
            self.specials += MigenInstance("EXTREFB", i_REFCLKP=refclk_p, i_REFCLKN=refclk_n, o_REFCLKO=refclk,
                                           p_REFCK_PWDNB="0b1", p_REFCK_RTERM="0b1", p_REFCK_DCBIAS_EN="0b0")
            tx_pads = Record([("p", 1), ("n", 1)], name="tx_pads")
            rx_pads = Record([("p", 1), ("n", 1)], name="rx_pads")
            pll = SerDesECP5PLL(refclk, refclk_freq, linerate)
            self.submodules.serdes = serdes = SerDesECP5(pll, tx_pads, rx_pads, dual=dual, channel=channel)
            serdes.add_stream_endpoints()
            # SerDesECP5 keeps its 8b/10b decoders in a list, which the LiteX on PyPI (2024.12)
            # does not collect as submodules: without this their logic is left out.
            if not any(isinstance(sub, tuple) and sub[0] == "decoders" for sub in serdes._submodules):
                self.submodules += serdes.decoders
            word_tx_clk = MigenSignal(name_override="word_tx_clk")
            word_rx_clk = MigenSignal(name_override="word_rx_clk")
            ready = MigenSignal(name_override="ready")
            self.comb += [word_tx_clk.eq(serdes.cd_tx.clk), word_rx_clk.eq(serdes.cd_rx.clk),
                          ready.eq(serdes.tx_ready & serdes.rx_ready)]
            self.ios = {self.cd_sys.clk, self.cd_sys.rst, refclk_p, refclk_n, tx_pads.p, tx_pads.n,
                        rx_pads.p, rx_pads.n, serdes.sink.data, serdes.sink.ctrl, serdes.source.data,
                        serdes.source.ctrl, word_tx_clk, word_rx_clk, ready}

    wrapper = Wrapper()
    output = convert(wrapper, ios=wrapper.ios, name=name,
                     special_overrides=lattice_ecp5_trellis_special_overrides)
    directory = Path(directory)
    for name, contents in output.data_files.items():
        (directory / name).write_text(contents)
    path = directory / f"{name}.v"
    path.write_text(output.main_source)
    return path


class CommaAligner(wiring.Component):
    """Puts the K character of control flits in byte 0.

    The DCUA aligns 10-bit characters on commas but may deliver a flit's two characters in
    either half of its 20-bit word. A comma (K28.5 idle or K28.1 training) seen in byte 1 means
    flits straddle words: take byte 0 from the previous word's byte 1. ``aligned`` rises on
    the first comma and stays until the domain is reset (tie the receive domain's reset to
    the SERDES not being ready).
    """

    def __init__(self):
        super().__init__({
            "data": In(LANE_WIDTH), "k": In(2),
            "flit": Out(flit_layout(LANE_WIDTH)),
            "aligned": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        comma = [self.k[i] & ((self.data[8 * i:8 * i + 8] == K_IDLE) | (self.data[8 * i:8 * i + 8] == K_TS1))
                 for i in range(2)]
        straddle = Signal()
        previous_byte, previous_k = Signal(8), Signal()
        m.d.sync += [previous_byte.eq(self.data[8:]), previous_k.eq(self.k[1])]
        with m.If(comma[0]):
            m.d.sync += [straddle.eq(0), self.aligned.eq(1)]
        with m.Elif(comma[1]):
            m.d.sync += [straddle.eq(1), self.aligned.eq(1)]
        low, high = Signal(8), Signal(8)
        low_k, high_k = Signal(), Signal()
        with m.If(straddle):
            m.d.comb += [low.eq(previous_byte), low_k.eq(previous_k), high.eq(self.data[:8]), high_k.eq(self.k[0])]
        with m.Else():
            m.d.comb += [low.eq(self.data[:8]), low_k.eq(self.k[0]), high.eq(self.data[8:]), high_k.eq(self.k[1])]
        # A K character in byte 1 never belongs to a valid flit: flag the flit as control so the
        # link layer rejects it (an unknown control code ends and drops the frame).
        m.d.comb += [self.flit.data.eq(Cat(low, high)), self.flit.ctrl.eq(low_k | high_k)]
        return m


class ECP5SerdesPhy(wiring.Component):
    """``link``: connect to ``LinkEndpoint.phy`` (lane width 16). ``tx_clk`` is the DCUA's word
    clock: the parent clocks the link domain with it; ``rx_clk`` (recovered) clocks the receive
    domain ``rx_domain``. The reset and lock sequencer runs in ``sync`` (any free-running clock).
    Pads: ``tx_p``/``tx_n``, ``rx_p``/``rx_n`` (the DCU channel's), ``refclk_p``/``refclk_n``.
    ``module``: the Verilog module :func:`write_serdes_verilog` wrote for this DCU channel."""

    def __init__(self, link_domain="link", rx_domain="link_rx", module=SERDES_MODULE):
        self.link_domain, self.rx_domain, self.module = link_domain, rx_domain, module
        super().__init__({
            "link": In(PhySignature(LANE_WIDTH)),
            "tx_clk": Out(1), "rx_clk": Out(1), "ready": Out(1),
            "tx_p": Out(1), "tx_n": Out(1), "rx_p": In(1), "rx_n": In(1),
            "refclk_p": In(1), "refclk_n": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        rx_data, rx_k = Signal(LANE_WIDTH), Signal(2)
        m.submodules.serdes = Instance(
            self.module,
            i_sys_clk=ClockSignal("sync"), i_sys_rst=ResetSignal("sync"),
            i_refclk_p=self.refclk_p, i_refclk_n=self.refclk_n,
            o_tx_pads_p=self.tx_p, o_tx_pads_n=self.tx_n, i_rx_pads_p=self.rx_p, i_rx_pads_n=self.rx_n,
            i_sink_payload_data=self.link.tx.data, i_sink_payload_ctrl=Cat(self.link.tx.ctrl, 0),
            o_source_payload_data=rx_data, o_source_payload_ctrl=rx_k,
            o_word_tx_clk=self.tx_clk, o_word_rx_clk=self.rx_clk, o_ready=self.ready)
        aligner = CommaAligner()
        m.submodules.aligner = DomainRenamer({"sync": self.rx_domain})(aligner)
        ready_rx = Signal()
        m.submodules.ready_sync = FFSynchronizer(self.ready, ready_rx, o_domain=self.rx_domain)
        m.d.comb += [aligner.data.eq(rx_data), aligner.k.eq(rx_k),
                     self.link.rx.eq(aligner.flit), self.link.rx_valid.eq(1),
                     self.link.rx_locked.eq(ready_rx & aligner.aligned)]
        return m
