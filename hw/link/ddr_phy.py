"""A parallel source-synchronous PHY over ordinary ECP5 I/O pins, for boards joined by a
ribbon cable or header instead of SERDES connectors.

Each direction carries one flit (W data bits and the control flag) per link-clock cycle on
ceil((W + 1) / 2) data pins at double data rate (ODDRX1F / IDDRX1F), with the link clock
forwarded on one more pin. The receiver clocks its input registers with the forwarded clock,
which is the PHY's receive clock (``rx_domain``; the endpoint's ElasticBuffer crosses it into
the link clock). There is no clock recovery or word alignment to lose: the receiver reports
lock once the forwarded clock has run ``lock_cycles`` cycles, and training (TS1/TS2) checks
that flits arrive intact. The board must match the data pins to the clock within the timing
margin of the chosen rate (the pins of one direction routed as a bus).
"""

from math import ceil

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .signatures import PhySignature


def data_pins(lane_width):
    """Data pins each way for flits of ``lane_width`` bits and the control flag, two per cycle."""
    return ceil((lane_width + 1) / 2)


class ECP5DDRPhy(wiring.Component):
    """``link`` is the link's PHY port (connect it to ``LinkEndpoint.phy``); ``tx_data``,
    ``tx_clk`` and ``rx_data`` go to the pads. ``tx`` is sent in ``link_domain``; ``rx``
    appears in ``rx_domain``, which the parent defines, clocked from the forwarded-clock pad."""

    def __init__(self, lane_width, link_domain="link", rx_domain="link_rx", lock_cycles=64):
        self.lane_width = lane_width
        self.pin_count = data_pins(lane_width)
        self.link_domain, self.rx_domain, self.lock_cycles = link_domain, rx_domain, lock_cycles
        super().__init__({
            "link": In(PhySignature(lane_width)),
            "tx_data": Out(self.pin_count), "tx_clk": Out(1),
            "rx_data": In(self.pin_count),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.pin_count
        link_clock = ClockSignal(self.link_domain)

        sent = Signal(2 * n)
        m.d.comb += sent.eq(self.link.tx.as_value())
        for pin in range(n):
            m.submodules[f"oddr_{pin}"] = Instance(
                "ODDRX1F", i_SCLK=link_clock, i_RST=0, i_D0=sent[pin], i_D1=sent[n + pin],
                o_Q=self.tx_data[pin])
        # The clock leaves through an ODDR too (1 then 0), so it has the data's delay.
        m.submodules.oddr_clk = Instance("ODDRX1F", i_SCLK=link_clock, i_RST=0, i_D0=1, i_D1=0,
                                         o_Q=self.tx_clk)

        rising, falling = Signal(n), Signal(n)
        for pin in range(n):
            m.submodules[f"iddr_{pin}"] = Instance(
                "IDDRX1F", i_SCLK=ClockSignal(self.rx_domain), i_RST=0, i_D=self.rx_data[pin],
                o_Q0=rising[pin], o_Q1=falling[pin])
        received = Signal(2 * n)
        m.d[self.rx_domain] += received.eq(Cat(rising, falling))
        running = Signal(range(self.lock_cycles + 1))
        with m.If(running != self.lock_cycles):
            m.d[self.rx_domain] += running.eq(running + 1)
        m.d.comb += [self.link.rx.eq(received[:self.lane_width + 1]), self.link.rx_valid.eq(1),
                     self.link.rx_locked.eq(running == self.lock_cycles)]
        return m
