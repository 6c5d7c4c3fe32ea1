"""A link endpoint across three clocks: the node's, the link's (the PHY's transmit clock) and
the PHY's receive clock (recovered or forwarded from the partner).

    node clock         link clock                  receive clock
    tx channels --> AsyncFIFO --> LinkLayer --> phy.tx
    rx channels <-- AsyncFIFO <--     ^     <-- ElasticBuffer (AsyncFIFO) <-- phy.rx
"""

from amaranth.hdl import Cat, DomainRenamer, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.fifo import AsyncFIFO
from amaranth.lib.wiring import In, Out

from .layer import COUNTER_NAMES, LinkLayer, LinkSignature
from .protocol import K_IDLE, LinkConfig
from .signatures import flit_layout


class ElasticBuffer(wiring.Component):
    """Received flits from the receive clock (``w_domain``) into the link clock (``r_domain``).

    An IDLE that follows an IDLE is not written: the sender puts one in at least every
    ``idle_interval`` flits, which absorbs a receive clock faster than the link clock. Lock
    is carried across with a synchroniser (a slow, level signal).
    """

    def __init__(self, lane_width, depth=8, w_domain="rx", r_domain="sync"):
        self.depth, self.w_domain, self.r_domain = depth, w_domain, r_domain
        super().__init__({
            "rx": In(flit_layout(lane_width)),
            "rx_valid": In(1),
            "rx_locked": In(1),
            "flit": Out(flit_layout(lane_width)),
            "valid": Out(1),
            "locked": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        layout = flit_layout(len(self.flit.data))
        m.submodules.fifo = fifo = AsyncFIFO(width=layout.size, depth=self.depth,
                                             w_domain=self.w_domain, r_domain=self.r_domain)
        rx = self.rx
        idle = rx.ctrl & (rx.data == K_IDLE)
        after_idle = Signal()
        with m.If(self.rx_valid):
            m.d[self.w_domain] += after_idle.eq(idle)
        m.d.comb += [fifo.w_data.eq(rx.as_value()),
                     fifo.w_en.eq(self.rx_valid & self.rx_locked & ~(idle & after_idle)),
                     fifo.r_en.eq(1)]
        # The flit leaves through a register: the FIFO's read-pointer comparison behind its
        # valid ran on into the enable of the link layer's received-frame shift register (0.9 ns
        # of logic, 7.8 ns of routing, an ECP5-85 node's worst link path at 125 MHz).
        m.d[self.r_domain] += [self.flit.eq(fifo.r_data), self.valid.eq(fifo.r_rdy)]
        m.submodules.lock = FFSynchronizer(self.rx_locked, self.locked, o_domain=self.r_domain)
        return m


class CounterSynchronizer(wiring.Component):
    """``i``, a counter in ``i_domain`` that steps by at most one a cycle (and wraps), as ``o`` in
    ``o_domain``: crossed in Gray code, in which a step changes one bit, so every value read is
    one the counter held (a binary count read mid-carry could be any value). Amaranth's Gray
    code helpers are private to ``lib.fifo``, which crosses its pointers the same way."""

    def __init__(self, width, *, i_domain, o_domain):
        self.i_domain, self.o_domain = i_domain, o_domain
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        width = len(self.i)
        gray, crossed = Signal(width), Signal(width)
        m.d[self.i_domain] += gray.eq(self.i ^ (self.i >> 1))
        m.submodules.sync = FFSynchronizer(gray, crossed, o_domain=self.o_domain)
        binary = [crossed[width - 1]]  # from the top bit down: b[k] = b[k + 1] ^ g[k]
        for k in reversed(range(width - 1)):
            binary.append(binary[-1] ^ crossed[k])
        m.d.comb += self.o.eq(Cat(*reversed(binary)))
        return m


class LinkEndpoint(wiring.Component):
    """A :class:`LinkLayer` with its clock crossings (same :class:`LinkSignature`).

    ``tx``/``rx`` are in ``node_domain``; ``phy.tx`` in ``link_domain``; ``phy.rx`` in
    ``rx_domain``; ``counters`` and ``link_up`` in ``status_domain`` (``link_domain`` unless
    given; in another, crossed by :class:`CounterSynchronizer` and a synchroniser, a few cycles
    late). ``fifo_depth``: words of each channel's crossing FIFO (a power of two; the credits
    cover the link, not these). A node that sends on its own clock (``link_domain ==
    node_domain``: a PHY on I/O pins clocked by the node) needs no crossing: its channels meet
    the link layer directly.
    """

    def __init__(self, config: LinkConfig, node_domain="sync", link_domain="link", rx_domain="link_rx",
                 fifo_depth=4, status_domain=None):
        self.config = config
        self.node_domain, self.link_domain, self.rx_domain = node_domain, link_domain, rx_domain
        self.status_domain = link_domain if status_domain is None else status_domain
        self.fifo_depth = fifo_depth
        super().__init__(LinkSignature(config))

    def elaborate(self, platform):
        m = Module()
        layer = LinkLayer(self.config)
        m.submodules.layer = DomainRenamer({"sync": self.link_domain})(layer)
        if self.link_domain == self.node_domain:
            wiring.connect(m, wiring.flipped(self.tx), layer.tx)
            wiring.connect(m, layer.rx, wiring.flipped(self.rx))
        else:
            for name, width in self.config.channels:
                outgoing = AsyncFIFO(width=width, depth=self.fifo_depth,
                                     w_domain=self.node_domain, r_domain=self.link_domain)
                incoming = AsyncFIFO(width=width, depth=self.fifo_depth,
                                     w_domain=self.link_domain, r_domain=self.node_domain)
                m.submodules[f"tx_{name}"], m.submodules[f"rx_{name}"] = outgoing, incoming
                for fifo, source, sink in ((outgoing, getattr(self.tx, name), getattr(layer.tx, name)),
                                           (incoming, getattr(layer.rx, name), getattr(self.rx, name))):
                    m.d.comb += [fifo.w_data.eq(source.payload), fifo.w_en.eq(source.valid),
                                 source.ready.eq(fifo.w_rdy),
                                 sink.payload.eq(fifo.r_data), sink.valid.eq(fifo.r_rdy),
                                 fifo.r_en.eq(sink.ready)]
        m.submodules.elastic = elastic = ElasticBuffer(self.config.lane_width, w_domain=self.rx_domain,
                                                       r_domain=self.link_domain)
        m.d.comb += [elastic.rx.eq(self.phy.rx), elastic.rx_valid.eq(self.phy.rx_valid),
                     elastic.rx_locked.eq(self.phy.rx_locked),
                     layer.phy.rx.eq(elastic.flit), layer.phy.rx_valid.eq(elastic.valid),
                     layer.phy.rx_locked.eq(elastic.locked),
                     self.phy.tx.eq(layer.phy.tx)]
        if self.status_domain == self.link_domain:
            m.d.comb += [self.counters.eq(layer.counters), self.link_up.eq(layer.link_up)]
            return m
        m.submodules.link_up = FFSynchronizer(layer.link_up, self.link_up, o_domain=self.status_domain)
        for name in COUNTER_NAMES:
            counter = CounterSynchronizer(self.config.counter_bits, i_domain=self.link_domain,
                                          o_domain=self.status_domain)
            m.submodules[f"{name}_sync"] = counter
            m.d.comb += [counter.i.eq(getattr(layer.counters, name)), getattr(self.counters, name).eq(counter.o)]
        return m
