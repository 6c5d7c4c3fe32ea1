"""What the SERDES PHYs share: LiteICLink's transceiver cores generated as Verilog, and the
Amaranth side that instantiates one (hw.link.ecp5_serdes for the ECP5 DCUA,
hw.link.gth_serdes for the Virtex-7 GTH).

A transceiver has hundreds of parameters whose working values come from hardware bring-up, so
no PHY here sets them by hand: LiteICLink's cores (PLL settings, reset and lock sequencing, 8b/10b
encoder and decoders in fabric), as used on real boards, are generated with migen as one Verilog
module per channel with the same ports, and :class:`SerdesPhy` instantiates it. liteiclink (and the
migen it is written in) is only needed to generate that file.
"""

from pathlib import Path

from amaranth.hdl import Cat, ClockSignal, DomainRenamer, Instance, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from .signatures import PhySignature, flit_layout
from .protocol import K_IDLE, K_TS1


def write_liteiclink_verilog(directory, name, make_serdes, special_overrides, refclk_ports=("refclk_p", "refclk_n")):
    """Write module ``name`` to ``directory``/``name``.v (with the 8b/10b tables it reads:
    $readmemh files, found relative to the directory the synthesis tool runs in) and return its
    path. ``make_serdes(wrapper, *refclk, tx_pads, rx_pads)`` builds the LiteICLink core (its
    PLL, and its reference clock buffer if the ``refclk_ports`` are pads) in the wrapper being
    built and returns it. Ports: ``sys_clk``/``sys_rst`` (the reset and lock sequencer), the
    ``refclk_ports``, ``tx_pads_p/n``, ``rx_pads_p/n``, ``sink_payload_data/ctrl`` (tx word
    clock), ``source_payload_data/ctrl`` (rx word clock), ``word_tx_clk``, ``word_rx_clk``,
    ``ready``."""
    from migen import ClockDomain as MigenClockDomain, Module as MigenModule, Record, Signal as MigenSignal
    from migen.fhdl.verilog import convert

    class Wrapper(MigenModule):
        def __init__(self):
            self.clock_domains.cd_sys = MigenClockDomain()
            refclk = [MigenSignal(name_override=port) for port in refclk_ports]
            tx_pads = Record([("p", 1), ("n", 1)], name="tx_pads")
            rx_pads = Record([("p", 1), ("n", 1)], name="rx_pads")
            self.submodules.serdes = serdes = make_serdes(self, *refclk, tx_pads, rx_pads)
            serdes.add_stream_endpoints()
            # The cores keep their 8b/10b decoders in a list, which the LiteX on PyPI (2024.12)
            # does not always collect as submodules: without this their logic is left out.
            if not any(isinstance(sub, tuple) and sub[0] == "decoders" for sub in serdes._submodules):
                self.submodules += serdes.decoders
            word_tx_clk = MigenSignal(name_override="word_tx_clk")
            word_rx_clk = MigenSignal(name_override="word_rx_clk")
            ready = MigenSignal(name_override="ready")
            self.comb += [word_tx_clk.eq(serdes.cd_tx.clk), word_rx_clk.eq(serdes.cd_rx.clk),
                          ready.eq(serdes.tx_ready & serdes.rx_ready)]
            self.ios = {self.cd_sys.clk, self.cd_sys.rst, *refclk, tx_pads.p, tx_pads.n,
                        rx_pads.p, rx_pads.n, serdes.sink.data, serdes.sink.ctrl, serdes.source.data,
                        serdes.source.ctrl, word_tx_clk, word_rx_clk, ready}

    wrapper = Wrapper()
    output = convert(wrapper, ios=wrapper.ios, name=name, special_overrides=special_overrides)
    directory = Path(directory)
    for file, contents in output.data_files.items():
        (directory / file).write_text(contents)
    path = directory / f"{name}.v"
    path.write_text(output.main_source)
    return path


class CommaAligner(wiring.Component):
    """Puts the K character of control flits in byte 0, for a transceiver that aligns 10-bit
    characters on commas but may deliver a 16-bit flit's two characters in either half of its
    20-bit word (the ECP5 DCUA). A comma (K28.5 idle or K28.1 training) seen in byte 1 means
    flits straddle words: take byte 0 from the previous word's byte 1. ``aligned`` rises on
    the first comma and stays until the domain is reset (tie the receive domain's reset to
    the SERDES not being ready).
    """

    def __init__(self):
        super().__init__({
            "data": In(16), "k": In(2),
            "flit": Out(flit_layout(16)),
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


class SerdesPhy(wiring.Component):
    """``link``: connect to ``LinkEndpoint.phy``. ``tx_clk`` is the transceiver's word clock: the
    parent clocks the link domain with it; ``rx_clk`` (recovered) clocks the receive domain
    ``rx_domain``. The reset and lock sequencer runs in ``sync`` (any free-running clock).
    ``module``: the Verilog module :func:`write_liteiclink_verilog` wrote for this channel.
    ``comma_aligner``: re-pair bytes on commas (16-bit lanes on a core that aligns characters,
    not words); without it the core aligns words itself (its ``ready`` includes the comma in the
    word's first character).

    Pads: the ports ``tx_p``/``tx_n``, ``rx_p``/``rx_n``, or with ``pads`` a board's transceiver
    pins (``pads.tx`` and ``pads.rx`` differential ports, as ``platform.request(..., dir="-")``
    gives them: a transceiver's pins take no I/O buffer). Reference clock: the ports
    ``refclk_p``/``refclk_n`` (the module buffers them), or with ``refclk_buffered`` the port
    ``refclk``, a clock the parent buffers once for every channel that shares it."""

    def __init__(self, module, lane_width, *, comma_aligner, link_domain="link", rx_domain="link_rx", pads=None,
                 refclk_buffered=False):
        if comma_aligner and lane_width != 16:
            raise ValueError(f"SerdesPhy: the comma aligner re-pairs 16-bit flits, not {lane_width}-bit ones")
        self.module, self.lane_width, self.comma_aligner = module, lane_width, comma_aligner
        self.link_domain, self.rx_domain = link_domain, rx_domain
        self.pads, self.refclk_buffered = pads, refclk_buffered
        members = {"link": In(PhySignature(lane_width)), "tx_clk": Out(1), "rx_clk": Out(1), "ready": Out(1)}
        if pads is None:
            members.update({"tx_p": Out(1), "tx_n": Out(1), "rx_p": In(1), "rx_n": In(1)})
        members.update({"refclk": In(1)} if refclk_buffered else {"refclk_p": In(1), "refclk_n": In(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        chars = self.lane_width // 8
        rx_data, rx_k = Signal(self.lane_width), Signal(chars)
        if self.pads is None:
            tx_p, tx_n, rx_p, rx_n = self.tx_p, self.tx_n, self.rx_p, self.rx_n
        else:
            tx_p, tx_n, rx_p, rx_n = self.pads.tx.p, self.pads.tx.n, self.pads.rx.p, self.pads.rx.n
        refclk = ({"i_refclk": self.refclk} if self.refclk_buffered
                  else {"i_refclk_p": self.refclk_p, "i_refclk_n": self.refclk_n})
        m.submodules.serdes = Instance(
            self.module,
            i_sys_clk=ClockSignal("sync"), i_sys_rst=ResetSignal("sync"),
            **refclk, o_tx_pads_p=tx_p, o_tx_pads_n=tx_n, i_rx_pads_p=rx_p, i_rx_pads_n=rx_n,
            i_sink_payload_data=self.link.tx.data, i_sink_payload_ctrl=Cat(self.link.tx.ctrl, Signal(chars - 1)),
            o_source_payload_data=rx_data, o_source_payload_ctrl=rx_k,
            o_word_tx_clk=self.tx_clk, o_word_rx_clk=self.rx_clk, o_ready=self.ready)
        ready_rx = Signal()
        m.submodules.ready_sync = FFSynchronizer(self.ready, ready_rx, o_domain=self.rx_domain)
        if self.comma_aligner:
            aligner = CommaAligner()
            m.submodules.aligner = DomainRenamer({"sync": self.rx_domain})(aligner)
            m.d.comb += [aligner.data.eq(rx_data), aligner.k.eq(rx_k), self.link.rx.eq(aligner.flit),
                         self.link.rx_locked.eq(ready_rx & aligner.aligned)]
        else:
            # A K character past byte 0 never belongs to a valid flit: flagged as control, the
            # link layer rejects it.
            m.d.comb += [self.link.rx.data.eq(rx_data), self.link.rx.ctrl.eq(rx_k.any()),
                         self.link.rx_locked.eq(ready_rx)]
        m.d.comb += self.link.rx_valid.eq(1)
        return m
