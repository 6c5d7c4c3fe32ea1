"""The link protocol in plain Python: its configuration, frame format, sizing formulas and a
reference encoder/decoder that the hardware is tested against.

A link joins two endpoints over one physical lane that carries one ``lane_width``-bit flit per
link-clock cycle plus a control flag (a K character on an 8b/10b line). Frames are

    SOF (control flit) | header | payload flits | CRC          (data and control frames)

where a data frame's payload is 1 to ``burst_words`` words of one channel (their count in the
header), and every control flit (SOF, IDLE, TS1, TS2) ends the frame before it, so a frame's length is
checked against its header and a dropped or corrupted flit is always caught. docs/link_protocol.md
describes the protocol for a board designer; this module is its executable form.
"""

from dataclasses import dataclass

from amaranth.lib import enum
from amaranth.lib.crc import catalog

from mapping import link_model
from mapping.link_model import BURST_WORDS, FRAME_OVERHEAD_FLITS, KIND_BITS

# The CRC is one flit wide, so a frame's check word is its last flit; one catalogue entry per
# lane width (each detects every burst of up to its own width, i.e. any corruption of one flit).
CRC_FOR_LANE = {8: catalog.CRC8_AUTOSAR, 16: catalog.CRC16_IBM_3740, 32: catalog.CRC32_ISO_HDLC}


class ControlCode(enum.IntEnum, shape=8):
    """A control flit: the K character in byte 0 (the rest of the flit zero). K28.5 and K28.1
    are commas, so the 8b/10b word aligner can lock on idles and on training."""
    IDLE = 0xBC  # K28.5
    SOF = 0xFB   # K27.7 (PCIe's start of packet)
    TS1 = 0x3C   # K28.1: training, "I am looking for you"
    TS2 = 0x5C   # K28.2: training, "I hear you"


# Their values as plain ints, for the reference model's flits and the tools and tests that
# compare with flits read from a simulation.
K_IDLE, K_SOF, K_TS1, K_TS2 = (code.value for code in (ControlCode.IDLE, ControlCode.SOF, ControlCode.TS1,
                                                       ControlCode.TS2))



class FrameKind(enum.IntEnum, shape=KIND_BITS):
    """A frame header's low bits (0 and 3 are no frame: a damaged header)."""
    DATA = 1
    CTRL = 2


@dataclass(frozen=True)
class LinkConfig:
    """One link's parameters; both endpoints of a link must be built from equal configs.

    ``channels``: (name, payload width in bits) per logical channel, in priority-free order.
    ``burst_words``: the most words of one channel a data frame carries (its header counts them
    in ``burst_bits``, taken from the sequence number).
    ``receive_depth``: words of receive buffer per channel (the credits the sender starts with);
    use :func:`receive_depth` for the depth that keeps one channel at full rate.
    ``replay_frames``: frames kept for go-back-N replay (a power of two).
    ``ack_interval``: a pending ACK or credit update is sent within this many cycles even when
    data frames are waiting, and sooner once ``ack_batch`` frames or ``credit_batch`` words wait
    for it (half the replay window, half a receive buffer); ``refresh_interval``: an unchanged update is repeated this often
    (it repairs a lost control frame). ``replay_timeout``: cycles without ACK progress before the
    sender replays everything unacknowledged. ``train_count`` consecutive training flits are
    needed to move on; ``train_timeout`` cycles without completing the handshake restart it.
    ``idle_interval``: at most this many flits between two IDLEs, so a receiver whose clock is
    slower by up to 1/idle_interval can drop IDLEs to keep its elastic buffer from overflowing.
    ``counter_bits``: width of the host-readable event counters (they wrap).
    """
    channels: tuple
    lane_width: int = 16
    burst_words: int = 1
    receive_depth: int = 16
    replay_frames: int = 16
    ack_interval: int = 64
    refresh_interval: int = 512
    replay_timeout: int = 512
    train_count: int = 16
    train_timeout: int = 1024
    idle_interval: int = 1024
    counter_bits: int = 32

    def __post_init__(self):
        object.__setattr__(self, "channels", tuple((str(n), int(w)) for n, w in self.channels))
        if self.lane_width not in CRC_FOR_LANE:
            raise ValueError(f"lane width {self.lane_width} not supported "
                             f"(one of {', '.join(map(str, CRC_FOR_LANE))})")
        if not isinstance(self.burst_words, int):
            raise TypeError(f"burst_words must be a positive integer, not {self.burst_words!r}")
        if self.burst_words < 1:
            raise ValueError(f"burst_words must be a positive integer, not {self.burst_words!r}")
        if not self.channels:
            raise ValueError("a link needs at least one channel")
        names = [name for name, _ in self.channels]
        if len(set(names)) != len(names):
            raise ValueError(f"channel names must be distinct: {names}")
        if any(width < 1 for _, width in self.channels):
            raise ValueError("every channel needs a payload width of at least 1 bit")
        if self.seq_bits < 3:
            raise ValueError(f"{len(self.channels)} channels leave {self.seq_bits} sequence bits "
                             f"in a {self.lane_width}-bit header with bursts of {self.burst_words} words; "
                             f"use a wider lane or shorter bursts")
        if self.replay_frames & (self.replay_frames - 1) or not 2 <= self.replay_frames <= self.seq_window:
            raise ValueError(f"replay_frames must be a power of two from 2 to {self.seq_window}")
        longest = FRAME_OVERHEAD_FLITS + self.max_payload_flits
        if self.idle_interval < 2 * longest:
            raise ValueError(f"idle_interval must be at least twice the longest frame ({2 * longest} flits)")
        if self.receive_depth < 1 or self.receive_depth >= 2 ** (self.credit_bits - 1):
            raise ValueError("receive_depth out of range")

    @property
    def channel_bits(self):
        return max(1, (len(self.channels) - 1).bit_length())

    @property
    def burst_bits(self):
        """Width of a data header's word count (the words less one)."""
        return (self.burst_words - 1).bit_length()

    @property
    def seq_bits(self):
        return link_model.sequence_bits(len(self.channels), self.lane_width, self.burst_words)

    @property
    def seq_window(self):
        """Frames that may be unacknowledged: half the sequence space, so old and new differ."""
        return 2 ** (self.seq_bits - 1)

    @property
    def credit_bits(self):
        """Width of the cumulative credit counters (modulo 2**credit_bits)."""
        return link_model.credit_bits(self.receive_depth)

    @property
    def replay_flits(self):
        """Flits of the replay buffer (a power of two): ``replay_frames`` frames of one word of
        the narrowest channel (what the window is sized for) and a longest burst more."""
        shortest = min(self.payload_flits(c) for c in range(len(self.channels)))
        return link_model.replay_flits(self.replay_frames, shortest, self.burst_words, self.max_word_flits)

    @property
    def ack_batch(self):
        """Frames accepted that make an ACK due: half the partner's replay window."""
        return max(1, self.replay_frames // 2)

    @property
    def credit_batch(self):
        """Words freed that make a credit update due: half a receive buffer."""
        return max(1, self.receive_depth // 2)

    @property
    def crc(self):
        return CRC_FOR_LANE[self.lane_width](data_width=self.lane_width)

    def payload_flits(self, channel):
        """Payload flits of one word of ``channel``."""
        return link_model.payload_flits(self.channels[channel][1], self.lane_width)

    @property
    def ctrl_payload_flits(self):
        return link_model.payload_flits(len(self.channels) * self.credit_bits, self.lane_width)

    @property
    def max_word_flits(self):
        """Payload flits of the widest channel's word."""
        return max(self.payload_flits(c) for c in range(len(self.channels)))

    @property
    def max_payload_flits(self):
        """Payload flits of the longest frame: a full burst of the widest channel, or a control frame."""
        return max(self.ctrl_payload_flits, self.burst_words * self.max_word_flits)

    def frame_flits(self, channel=None, words=1):
        """Line flits of a data frame of ``words`` words of ``channel`` (a control frame when
        None): SOF, header, payload, CRC."""
        payload = self.ctrl_payload_flits if channel is None else words * self.payload_flits(channel)
        return FRAME_OVERHEAD_FLITS + payload


def round_trip_cycles(config, phy_latency, channel=None):
    """Worst link-clock cycles from a sender committing to a full burst of ``channel`` (the
    longest burst of any channel when None) to the credit (or ACK) it frees reaching the sender
    again, with ``phy_latency`` cycles of PHY latency each way
    (:func:`mapping.link_model.round_trip_cycles`)."""
    bursts = [config.frame_flits(c, config.burst_words) for c in range(len(config.channels))]
    frame = max(bursts) if channel is None else bursts[channel]
    return link_model.round_trip_cycles(frame, max(bursts), config.frame_flits(None), phy_latency,
                                        config.ack_interval)


def receive_depth(config, phy_latency, channel):
    """Receive-buffer words that keep ``channel`` at the full line rate when it is alone on the
    link: enough credits to cover one round trip of its full bursts, and one burst more."""
    return link_model.receive_depth(config.frame_flits(channel, config.burst_words),
                                    round_trip_cycles(config, phy_latency, channel), config.burst_words)


def replay_frames(config, phy_latency):
    """Replay-buffer frames (a power of two) that never stall a sender at full rate waiting for
    ACKs, even when every frame carries one word of the channel with the shortest words."""
    shortest = min(config.frame_flits(c) for c in range(len(config.channels)))
    return link_model.replay_frames(shortest, round_trip_cycles(config, phy_latency))


def sized_config(channels, lane_width, latency, burst_words=BURST_WORDS, ack_interval=LinkConfig.ack_interval):
    """A LinkConfig with bursts of ``burst_words`` whose receive buffers and replay buffer are
    sized for ``latency`` cycles of PHY latency by the protocol's formulas
    (:func:`mapping.link_model.sized_buffers`: every channel the depth :func:`receive_depth` gives
    the one with the shortest full bursts, :func:`replay_frames` capped by the sequence window)."""
    fixed = dict(lane_width=lane_width, burst_words=burst_words, ack_interval=ack_interval)
    LinkConfig(channels, replay_frames=2, **fixed)  # refuses what no sizing can mend (names, header bits)
    depth, frames = link_model.sized_buffers([width for _, width in channels], lane_width, latency, burst_words,
                                             ack_interval)
    return LinkConfig(channels, receive_depth=depth, replay_frames=frames, **fixed)


def frame_efficiency(config, channel):
    """Payload bits per line bit of back-to-back full bursts of ``channel``, without ACK traffic."""
    words = config.burst_words
    return words * config.channels[channel][1] / (config.frame_flits(channel, words) * config.lane_width)


# Reference encoder and decoder -------------------------------------------------------------------

def data_header(config, channel, seq, words=1):
    return (FrameKind.DATA | channel << KIND_BITS | (words - 1) << (KIND_BITS + config.channel_bits)
            | seq << (KIND_BITS + config.channel_bits + config.burst_bits))


def ctrl_header(config, ack_seq, nak):
    return FrameKind.CTRL | int(nak) << KIND_BITS | ack_seq << (KIND_BITS + 1)


def _split(value, flits, width):
    return [(value >> (width * i)) & ((1 << width) - 1) for i in range(flits)]


def _join(flits, width):
    return sum(flit << (width * i) for i, flit in enumerate(flits))


def _frame(config, header, payload_flits):
    body = [header, *payload_flits]
    return [(1, K_SOF)] + [(0, flit) for flit in body] + [(0, config.crc.compute(body))]


def encode_data(config, channel, seq, words):
    """The line flits (ctrl, data) of data frame ``seq`` carrying ``words`` (1 to
    ``burst_words``, oldest first) on ``channel``."""
    if not 1 <= len(words) <= config.burst_words:
        raise ValueError(f"a data frame carries 1 to {config.burst_words} words, not {len(words)!r}")
    flits = [flit for word in words for flit in _split(word, config.payload_flits(channel), config.lane_width)]
    return _frame(config, data_header(config, channel, seq, len(words)), flits)


def encode_ctrl(config, ack_seq, nak, credit_limits):
    """The line flits of a control frame: ACK (or NAK) of ``ack_seq`` and each channel's credit limit."""
    packed = sum(limit << (config.credit_bits * c) for c, limit in enumerate(credit_limits))
    flits = _split(packed, config.ctrl_payload_flits, config.lane_width)
    return _frame(config, ctrl_header(config, ack_seq, nak), flits)


@dataclass(frozen=True)
class DataFrame:
    channel: int
    seq: int
    words: tuple


@dataclass(frozen=True)
class CtrlFrame:
    ack_seq: int
    nak: bool
    credit_limits: tuple


def decode_frame(config, body):
    """A DataFrame or CtrlFrame from the data flits between a SOF and the next control flit,
    or None if the frame is damaged (bad CRC, bad kind or channel, wrong length)."""
    if len(body) < 3 or config.crc.compute(body[:-1]) != body[-1]:
        return None
    header, payload = body[0], body[1:-1]
    kind = header & ((1 << KIND_BITS) - 1)
    rest = header >> KIND_BITS
    if kind == FrameKind.DATA:
        channel = rest & ((1 << config.channel_bits) - 1)
        count = (rest >> config.channel_bits & ((1 << config.burst_bits) - 1)) + 1
        if channel >= len(config.channels) or count > config.burst_words:
            return None
        word_flits = config.payload_flits(channel)
        if len(payload) != count * word_flits:
            return None
        words = tuple(_join(payload[i:i + word_flits], config.lane_width) for i in range(0, len(payload), word_flits))
        if any(word >> config.channels[channel][1] for word in words):
            return None
        return DataFrame(channel, rest >> (config.channel_bits + config.burst_bits), words)
    if kind == FrameKind.CTRL and len(payload) == config.ctrl_payload_flits:
        packed = _join(payload, config.lane_width)
        mask = (1 << config.credit_bits) - 1
        limits = tuple((packed >> (config.credit_bits * c)) & mask for c in range(len(config.channels)))
        return CtrlFrame(rest >> 1 & ((1 << config.seq_bits) - 1), bool(rest & 1), limits)
    return None


def parse_line(config, flits):
    """Split a flit sequence into frames: yields ("frame", DataFrame | CtrlFrame | None) for
    each SOF-delimited frame and ("ctrl", code) for every other control flit."""
    body = None
    for ctrl, data in flits:
        if not ctrl:
            if body is not None:
                body.append(data)
            continue
        if body is not None:
            yield "frame", decode_frame(config, body)
            body = None
        if data == K_SOF:
            body = []
        else:
            yield "ctrl", data
    if body is not None:
        yield "frame", decode_frame(config, body)
