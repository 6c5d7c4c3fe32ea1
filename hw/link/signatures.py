"""The layouts and signatures the link's parts share: a lane word (flit), the PHY, the
channels, a frame's header and a received control frame (the bit positions are
:mod:`hw.link.protocol`'s)."""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .protocol import FrameKind


def flit_layout(lane_width):
    """One lane word: ``data`` and the control flag (a K character in byte 0 when set)."""
    return data.StructLayout({"data": lane_width, "ctrl": 1})


class PhySignature(wiring.Signature):
    """A PHY seen from the link: a flit out every link-clock cycle, and flits in with a valid
    (an elastic buffer may have none) and the receiver's lock (clock and word alignment)."""

    def __init__(self, lane_width):
        self.lane_width = lane_width
        super().__init__({
            "tx": Out(flit_layout(lane_width)),
            "rx": In(flit_layout(lane_width)),
            "rx_valid": In(1),
            "rx_locked": In(1),
        })


def flit_stream(lane_width):
    """The flits a part receives: the PHY's ``rx`` and ``rx_valid``, nothing to push back."""
    return stream.Signature(flit_layout(lane_width), always_ready=True)


class ChannelsSignature(wiring.Signature):
    """One stream per logical channel, named and sized from the link's configuration
    (``always_ready``: streams without back-pressure, such as words leaving the receiver)."""

    def __init__(self, channels, always_ready=False):
        for name, _ in channels:
            if not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"channel name '{name}' is not a valid member name")
        super().__init__({name: Out(stream.Signature(width, always_ready=always_ready))
                          for name, width in channels})


def channel_ports(config, interface):
    """The channel streams of a ChannelsSignature ``interface``, in ``config.channels`` order."""
    return [getattr(interface, name) for name, _ in config.channels]


def header_layout(config):
    """A frame's header flit, read as a data frame's (``count``: its words less one) or a
    control frame's."""
    return data.UnionLayout({
        "data": data.StructLayout({"kind": FrameKind, "channel": config.channel_bits, "count": config.burst_bits,
                                   "seq": config.seq_bits}),
        "ctrl": data.StructLayout({"kind": FrameKind, "nak": 1, "ack_seq": config.seq_bits}),
    })


def credit_limits_layout(config):
    """Each channel's credit limit, as a control frame's payload carries them."""
    return data.ArrayLayout(config.credit_bits, len(config.channels))


def sent_stream(config):
    """The data frames a sender starts: the channel and how many of its words (first
    transmissions only: a replay takes no credit)."""
    return stream.Signature(data.StructLayout({"channel": config.channel_bits,
                                               "words": range(config.burst_words + 1)}), always_ready=True)


def ctrl_frame_stream(config):
    """Control frames as received: ACK (or NAK) of ``ack_seq`` and the partner's credit limits."""
    return stream.Signature(data.StructLayout({"ack_seq": config.seq_bits, "nak": 1,
                                               "credit_limits": credit_limits_layout(config)}), always_ready=True)


class AckRequestSignature(wiring.Signature):
    """What the receiver asks the sender to acknowledge: ``expected`` (the control frames carry
    ``expected`` - 1: everything before it arrived), ``ack`` an ACK to send, ``nak`` a NAK."""

    def __init__(self, config):
        super().__init__({"expected": Out(config.seq_bits), "ack": Out(1), "nak": Out(1)})


class ReplayWindowSignature(wiring.Signature):
    """The sender's sequence numbers against the ACK tracker's window, seen from the sender:
    ``next_seq`` (the next new frame; ``starting`` when it starts) and ``send_seq`` (the next
    frame to put on the line) out; ``open`` (room for a new frame) and ``rewind`` (replay from
    the payload) in."""

    def __init__(self, config):
        super().__init__({
            "next_seq": Out(config.seq_bits),
            "send_seq": Out(config.seq_bits),
            "starting": Out(1),
            "oldest": In(config.seq_bits),
            "open": In(1),
            "rewind": In(stream.Signature(config.seq_bits, always_ready=True)),
        })
