"""Credits, both ways: the receive buffers that give them (``ReceiveBuffers``) and the count
of those the partner gave (``SendCredits``). The limits are cumulative counts modulo
2**credit_bits: a channel may send while its count of words sent differs from the limit
last advertised, words the receiver has freed plus its buffer depth."""

from amaranth.hdl import Assert, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..base.handshake import SkidBuffer
from .protocol import LinkConfig
from .signatures import ChannelsSignature, channel_ports, credit_limits_layout, ctrl_frame_stream, sent_stream


class ReceiveBuffers(wiring.Component):
    """One buffer of ``receive_depth`` words per channel between the receiver's ``words`` and
    the node's ``rx``, and the credit limits they advertise (``credit_limits``).

    ``freed`` counts the words the node took a cycle before (the limits move: an update to send).
    A word arriving at a full buffer is the partner's error (it ignored the credits); the
    buffer asserts it never happens.
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "words": In(ChannelsSignature(config.channels, always_ready=True)),
            "rx": Out(ChannelsSignature(config.channels)),
            "credit_limits": Out(credit_limits_layout(config)),
            "freed": Out(range(len(config.channels) + 1)),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        taken = []
        for c, (name, width), incoming, outgoing in zip(range(len(cfg.channels)), cfg.channels,
                                                        channel_ports(cfg, self.words), channel_ports(cfg, self.rx)):
            # A burst's words arrive one a cycle, and a SyncFIFOBuffered of two words is not ready
            # for its second while its first moves to the output register: three at least.
            buffer = m.submodules[f"buffer_{name}"] = SyncFIFOBuffered(width=width, depth=max(3, cfg.receive_depth))
            m.d.comb += [buffer.w_data.eq(incoming.payload), buffer.w_en.eq(incoming.valid)]
            m.d.sync += Assert(~buffer.w_en | buffer.w_rdy, f"receive buffer of {name} overflows")
            # The consumer's ready stops at the skid's registers instead of running on into the
            # buffer's read logic and the credit counters (from a node's EB line buffer into the
            # sender's pending update: an ECP5-85 node's worst path at 125 MHz). A word is freed
            # when the consumer takes it, a cycle later, so the buffer and the skid together
            # hold no more than the credits allow.
            skid = m.submodules[f"skid_{name}"] = SkidBuffer(width)
            m.d.comb += [skid.i.payload.eq(buffer.r_data), skid.i.valid.eq(buffer.r_rdy),
                         buffer.r_en.eq(skid.i.ready)]
            wiring.connect(m, skid.o, wiring.flipped(outgoing))
            taken.append(Signal(name=f"taken_{name}"))
            m.d.sync += taken[c].eq(outgoing.valid & outgoing.ready)
            freed = Signal(cfg.credit_bits, name=f"freed_{name}")
            with m.If(taken[c]):
                m.d.sync += freed.eq(freed + 1)
            m.d.comb += self.credit_limits[c].eq(freed + cfg.receive_depth)
        m.d.comb += self.freed.eq(sum(taken))
        return m


class SendCredits(wiring.Component):
    """The partner's credit limits, from its control frames (``ctrl``), against the words sent
    on each channel (``sent``: the channel and words of a data frame started): ``available``
    holds the words channel c may still send."""

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "ctrl": In(ctrl_frame_stream(config)),
            "sent": In(sent_stream(config)),
            "available": Out(credit_limits_layout(config)),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        n, k = len(cfg.channels), cfg.credit_bits
        # Before the first control frame: the receive buffers are empty.
        limits = [Signal(k, init=cfg.receive_depth, name=f"credit_limit_{c}") for c in range(n)]
        sent = [Signal(k, name=f"words_sent_{c}") for c in range(n)]
        m.d.comb += [self.available[c].eq(limits[c] - sent[c]) for c in range(n)]
        with m.If(self.ctrl.valid):
            m.d.sync += [limits[c].eq(self.ctrl.payload.credit_limits[c]) for c in range(n)]
        with m.If(self.sent.valid):
            with m.Switch(self.sent.payload.channel):
                for c in range(n):
                    with m.Case(c):
                        m.d.sync += sent[c].eq(sent[c] + self.sent.payload.words)
        return m
