"""The link layer: logical channels multiplexed into frames over one lane, with per-channel
credits, CRC, sequence numbers, ACK/NAK and go-back-N replay, and link training.

Everything here runs in one clock domain (the link clock, ``sync`` inside this component);
:class:`hw.link.endpoint.LinkEndpoint` puts it between the node's clock and the PHY's.
The frame format and every rule are in :mod:`hw.link.protocol` (the reference model).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .ack_tracker import AckTracker
from .credits import ReceiveBuffers, SendCredits
from .protocol import LinkConfig
from .receiver import LinkReceiver
from .sender import LinkSender
from .signatures import ChannelsSignature, PhySignature, channel_ports  # noqa: F401 (channel_ports: the tests take it from here)
from .training import LinkTraining, TrainState

COUNTER_NAMES = ("frames_sent", "frames_received", "replays", "frames_replayed", "crc_errors",
                 "retrains")


def counters_layout(config):
    return data.StructLayout({name: config.counter_bits for name in COUNTER_NAMES})


class LinkSignature(wiring.Signature):
    """A link endpoint: ``tx`` channels to send, ``rx`` channels received (both named by
    ``config.channels``), ``phy`` the lane, ``counters`` and ``link_up`` for the host."""

    def __init__(self, config):
        super().__init__({
            "tx": In(ChannelsSignature(config.channels)),
            "rx": Out(ChannelsSignature(config.channels)),
            "phy": Out(PhySignature(config.lane_width)),
            "counters": Out(counters_layout(config)),
            "link_up": Out(1),
        })


class LinkLayer(wiring.Component):
    """One endpoint of a link (both directions), everything in the link clock domain (``sync``):
    its parts, connected."""

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__(LinkSignature(config))

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        m.submodules.training = training = LinkTraining(cfg)
        m.submodules.receiver = receiver = LinkReceiver(cfg)
        m.submodules.buffers = buffers = ReceiveBuffers(cfg)
        m.submodules.credits = credits = SendCredits(cfg)
        m.submodules.acks = acks = AckTracker(cfg)
        m.submodules.sender = sender = LinkSender(cfg)

        for part in (training, receiver):
            m.d.comb += [part.rx.payload.eq(self.phy.rx), part.rx.valid.eq(self.phy.rx_valid)]
        link_up = training.state == TrainState.UP
        m.d.comb += [training.locked.eq(self.phy.rx_locked), training.ts2_sent.eq(sender.ts2_sent),
                     receiver.link_up.eq(link_up), acks.link_up.eq(link_up), self.link_up.eq(link_up),
                     acks.entering_up.eq(training.entering_up), sender.resync.eq(training.entering_up),
                     sender.state.eq(training.state), self.phy.tx.eq(sender.line)]
        wiring.connect(m, receiver.words, buffers.words)
        wiring.connect(m, buffers.rx, wiring.flipped(self.rx))
        wiring.connect(m, wiring.flipped(self.tx), sender.tx)
        wiring.connect(m, receiver.ctrl, credits.ctrl)
        wiring.connect(m, sender.sent, credits.sent)
        wiring.connect(m, sender.window, acks.window)
        wiring.connect(m, receiver.acks, sender.acks)
        # A second reader of the control frames (connect() takes one sink per stream).
        m.d.comb += [acks.ctrl.valid.eq(receiver.ctrl.valid), acks.ctrl.payload.eq(receiver.ctrl.payload),
                     sender.credit_limits.eq(buffers.credit_limits), sender.credits_freed.eq(buffers.freed),
                     sender.available.eq(credits.available)]

        # The counters count a cycle late, from registered events, so their adders stay off the
        # paths that decide (an ACK's window check on into ``replays`` was a one-board chain's
        # worst path on an ECP5 of speed grade 6: 5 ns of logic, 9.7 ns of routing).
        events = {"frames_sent": sender.sent.valid, "frames_received": receiver.frame_received,
                  "replays": acks.replay, "frames_replayed": sender.frame_replayed,
                  "crc_errors": receiver.frame_rejected, "retrains": training.retrain}
        for name in COUNTER_NAMES:
            counter, counted = getattr(self.counters, name), Signal(name=f"{name}_counted")
            m.d.sync += [counted.eq(events[name]), counter.eq(counter + counted)]
        return m
