"""The PHY between two link endpoints on one chip: a one-board chain's neighbours joined by the
same link layer as two boards (frames, CRC, sequence numbers, credits, replay), so a single dev
kit runs the link cores in hardware.

Each direction is ``latency`` registers of flits (the route across the die, and slack for the
placer), always valid and locked: there is no line code to align and no clock to recover, and
both endpoints run on the node clock.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, connect

from .signatures import PhySignature, flit_layout


class OnChipPhy(wiring.Component):
    """``a`` and ``b``: the PHY ports of the two endpoints (connect each to an endpoint's ``phy``)."""

    def __init__(self, lane_width, latency=2):
        if latency < 1:
            raise ValueError(f"an on-chip lane needs at least one register, got latency {latency}")
        self.lane_width, self.latency = lane_width, latency
        super().__init__({"a": In(PhySignature(lane_width)), "b": In(PhySignature(lane_width))})

    def elaborate(self, platform):
        m = Module()
        for sender, receiver in ((self.a, self.b), (self.b, self.a)):
            flit = sender.tx
            for _ in range(self.latency):
                stage = Signal(flit_layout(self.lane_width))
                m.d.sync += stage.eq(flit)
                flit = stage
            m.d.comb += [receiver.rx.eq(flit), receiver.rx_valid.eq(1), receiver.rx_locked.eq(1)]
        return m


def on_chip_phy(lane_width, latency=2):
    """A ``phy(m, link)`` for :func:`hw.link.chain.link_chain`: an :class:`OnChipPhy` per link."""
    def join(m, link):
        m.submodules[f"link{link.index}_phy"] = phy = OnChipPhy(lane_width, latency)
        connect(m, link.upstream.phy, phy.a)
        connect(m, link.downstream.phy, phy.b)
    return join
