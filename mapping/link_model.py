"""The link core's frame arithmetic: line flits per word, round trips, buffer depths, efficiency,
and the line time a mapping's traffic takes on it.

One source for the link protocol's sizing (docs/link_protocol.md): ``hw/link/protocol.py``
builds its ``LinkConfig`` formulas from these functions, and the mapping's performance model
(mapping/perf.py) prices every link's traffic with them. Pure arithmetic on bit widths and cycle
counts, in flits (one lane word per link-clock cycle).

A data frame is SOF, header, the payload flits of 1 to ``burst_words`` words of one channel
(ceil(bits / lane) flits each) and a CRC flit. The receiver coalesces its ACKs and credit
updates into control frames (SOF, header, a credit limit per channel, CRC); the sender puts an
IDLE on the line at least every ``idle_interval`` flits. The line code is the PHY's: a device's
``link_gbps`` (mapping/devices.py) is already after 8b/10b, so it counts flit bits.

:class:`LinkCore` and :func:`sample_flits` price one link direction's traffic per sample as the
hardware sends it (bursts, coalesced control frames, IDLEs, go-back-N replays at a bit-error
rate); :func:`link_cycles_per_sample` turns that into node cycles per sample of a chain.
"""

from dataclasses import dataclass
from math import ceil, inf

FRAME_OVERHEAD_FLITS = 3  # SOF, header, CRC
PHY_TX_PIPELINE = 1       # the sender's register between a flit and the one that takes the CRC into it
PHY_RX_PIPELINE = 7       # cycles from a flit leaving the PHY to the receiver acting on it

# The link core the mapping plans with: the ECP5 SERDES PHY's 16-bit flits and LinkConfig's
# defaults (hw/link/protocol.py).
LANE_WIDTH = 16
ACK_INTERVAL = 64
# PHY latency each way, link cycles, that buffers are sized for: an assumption of the order of
# the ECP5 DCUA's transmit and receive paths with fabric 8b/10b; not measured on hardware.
PHY_LATENCY = 16
IDLE_INTERVAL = 1024
REFRESH_INTERVAL = 512
# The longest burst of a link sized by ``hw.link.protocol.sized_config`` unless told otherwise.
BURST_WORDS = 16
# The receive depth a sized link's round trip is first computed with (LinkConfig's default):
# it sets the width of the credit fields in the control frame of that first round trip.
BASE_RECEIVE_DEPTH = 16
KIND_BITS = 2             # a frame header's kind field
# Cycles from a control frame falling due (its timer or batch) to the sender seeing it: the
# trigger is registered, and so is its urgency.
CONTROL_DECISION_CYCLES = 2


def payload_flits(bits, lane_width):
    return ceil(bits / lane_width)


def frame_flits(bits, lane_width, words=1):
    """Line flits of a frame whose payload is ``words`` words ``bits`` wide."""
    return FRAME_OVERHEAD_FLITS + words * payload_flits(bits, lane_width)


def credit_bits(receive_depth):
    """Width of a channel's cumulative credit counter."""
    return receive_depth.bit_length() + 1


def control_frame_flits(channels, receive_depth, lane_width):
    """Line flits of a control frame: ACK and one credit limit per channel."""
    return frame_flits(channels * credit_bits(receive_depth), lane_width)


def round_trip_cycles(frame, longest, control_frame, phy_latency, ack_interval):
    """Worst link cycles from committing to a ``frame``-flit frame to the credit (or ACK) it frees
    reaching the sender again: the frame, the PHY and receiver pipeline both ways, the far end's
    ``longest`` frame in progress, its wait for an update (``ack_interval``) and its control frame."""
    return frame + 1 + 2 * (phy_latency + PHY_TX_PIPELINE + PHY_RX_PIPELINE) + longest + ack_interval + control_frame + 2


def receive_depth(frame, round_trip, words=1):
    """Words of receive buffer that keep a channel of ``frame``-flit frames of ``words`` words
    each at line rate alone: a round trip of frames and one more."""
    return words * (ceil(round_trip / frame) + 1)


def replay_frames(shortest, round_trip):
    """Replay-buffer frames (a power of two) that never stall the sender waiting for ACKs."""
    frames = ceil(round_trip / shortest) + 1
    return 1 << (frames - 1).bit_length()


def sized_buffers(widths, lane_width, phy_latency, burst_words=BURST_WORDS, ack_interval=ACK_INTERVAL):
    """(receive depth, replay frames) of a link whose channels are ``widths`` bits wide, sized by
    the protocol's formulas as ``hw.link.protocol.sized_config`` does: every channel the depth
    that keeps the one with the shortest full bursts at line rate alone, and a replay window of
    a round trip of single-word frames of the narrowest channel, capped by the sequence window."""
    bursts = [frame_flits(w, lane_width, burst_words) for w in widths]

    def trip(frame, depth):
        return round_trip_cycles(frame, max(bursts), control_frame_flits(len(widths), depth, lane_width),
                                 phy_latency, ack_interval)

    depth = max(receive_depth(f, trip(f, BASE_RECEIVE_DEPTH), burst_words) for f in bursts)
    shortest = min(frame_flits(w, lane_width) for w in widths)
    window = 2 ** (sequence_bits(len(widths), lane_width, burst_words) - 1)
    return depth, min(replay_frames(shortest, trip(max(bursts), depth)), window)


def replay_flits(replay_frames, shortest_word_flits, burst_words, longest_word_flits):
    """Flits of a replay ring (a power of two): ``replay_frames`` frames of one word of the
    narrowest channel (what the window is sized for; a header flit each) and a longest burst more."""
    return 1 << (replay_frames * (1 + shortest_word_flits) + 1 + burst_words * longest_word_flits - 1).bit_length()


def sequence_bits(channels, lane_width, burst_words):
    """Sequence-number bits of a data header: the flit less the kind, the channel and the word count."""
    return lane_width - KIND_BITS - max(1, (channels - 1).bit_length()) - (burst_words - 1).bit_length()


def frame_efficiency(bits, lane_width, words=1):
    """Payload bits per line bit of back-to-back frames of ``words`` ``bits``-wide words."""
    return words * bits / (frame_flits(bits, lane_width, words) * lane_width)


def line_flits(traffic, lane_width, control_frame, ack_interval=ACK_INTERVAL, idle_interval=IDLE_INTERVAL):
    """Line flits that carry ``traffic`` ((words, bits per word) pairs, one frame of each word)
    on a saturated link: their data frames, plus the control frames (one per ``ack_interval``)
    and IDLEs (one per ``idle_interval``) sent in the same time."""
    data = sum(words * frame_flits(bits, lane_width) for words, bits in traffic if words)
    return data / (1 - control_frame / ack_interval - 1 / idle_interval)


def efficiency(traffic, lane_width, control_frame, **intervals):
    """Payload bits per line bit of ``traffic`` on a saturated link."""
    flits = line_flits(traffic, lane_width, control_frame, **intervals)
    return sum(words * bits for words, bits in traffic) / (flits * lane_width) if flits else 0.0


# Line time of a mapping's traffic ----------------------------------------------------------------

@dataclass(frozen=True)
class LinkCore:
    """One link as the model prices it: both endpoints of a ``LinkConfig`` built by
    ``hw.link.protocol.sized_config`` (buffers for ``phy_latency`` link cycles each way, bursts of
    up to ``burst_words``, the protocol's intervals) on a PHY that moves ``lane_width``-bit flits at
    ``flits_per_cycle`` flits per node-clock cycle, each line bit flipped with probability ``ber``."""
    lane_width: int = LANE_WIDTH
    flits_per_cycle: float = 1.0
    phy_latency: int = PHY_LATENCY
    burst_words: int = BURST_WORDS
    ack_interval: int = ACK_INTERVAL
    idle_interval: int = IDLE_INTERVAL
    refresh_interval: int = REFRESH_INTERVAL
    ber: float = 0.0

    @classmethod
    def for_gbps(cls, link_gbps, clock_hz, lane_width=LANE_WIDTH, **rest):
        """The core on a PHY that carries ``link_gbps`` of flit bits (after the line code) beside
        a node clocked at ``clock_hz``."""
        return cls(lane_width=lane_width, flits_per_cycle=link_gbps * 1e9 / lane_width / clock_hz, **rest)


def burst_frames(traffic, burst_words):
    """Data frames per sample of each channel of one link direction's ``traffic`` ((words, bits
    per word) per channel per sample) on a saturated line.

    The sender does not wait for a burst to fill: a frame carries the words waiting when the
    round robin comes to the channel. The busiest channel (the most full bursts) waits for the
    line, so its bursts fill: ceil(words / burst_words) frames, its turns. Every other channel's
    words arrive spread over the sample, so each of those turns finds some: a frame per turn, at
    most one per word, and no fewer than its own full bursts."""
    turns = max((ceil(words / burst_words) for words, _ in traffic), default=0)
    return [min(words, max(ceil(words / burst_words), turns)) for words, _ in traffic]


def data_flits(traffic, lane_width, burst_words):
    """(frames, line flits) of each channel's data frames per sample (:func:`burst_frames`)."""
    frames = burst_frames(traffic, burst_words)
    return [(f, FRAME_OVERHEAD_FLITS * f + words * payload_flits(bits, lane_width))
            for f, (words, bits) in zip(frames, traffic)]


def error_events(ber, lane_width):
    """Error events per flit of a lane at bit-error rate ``ber`` (W data bits and the control flag)."""
    return 1 - (1 - ber) ** (lane_width + 1)


def sample_flits(traffic, opposite, core=LinkCore()):
    """Line flits per sample of one direction of a saturated link: its ``traffic``'s data frames
    ((words, bits per word) per channel per sample; ``opposite`` the other direction's), the
    control frames that return the other direction's ACKs and credits, IDLEs and replays.

    Assumptions. The line is busy the whole sample (this direction limits the chain); data frames
    as :func:`burst_frames` fills them. A control frame goes when an update is pending and due:
    ``ack_interval`` cycles after the last one, or at once for a batch (half the replay window of
    frames, half a receive buffer of words); it then waits for the data frame on the line to end
    (on average the residual of a frame picked in proportion to its length) and for the
    registered decision (:data:`CONTROL_DECISION_CYCLES`). An update is pending after each frame
    the other direction delivers (its ACK, and the credits its words free when the node takes
    them, which go with it or the next): at most one control frame per such frame and one more.
    Without traffic the other way a refresh goes every ``refresh_interval``. An IDLE goes within
    ``idle_interval`` flits of the last, less a longest frame. Errors: each error event on this
    lane costs a round trip of replayed flits (go-back-N); lost control frames and replay
    timeouts are not modelled. The link's channels are the entries of both directions, its
    buffers the ones ``sized_config`` gives them."""
    traffic = [(words, bits) for words, bits in traffic if words]
    opposite = [(words, bits) for words, bits in opposite if words]
    if not traffic:
        return 0.0
    W, B = core.lane_width, core.burst_words
    widths = [bits for _, bits in traffic + opposite]
    depth, window = sized_buffers(widths, W, core.phy_latency, B, core.ack_interval)
    control = control_frame_flits(len(widths), depth, W)
    frames = data_flits(traffic, W, B)
    data = sum(flits for _, flits in frames)
    residual = sum(flits * flits / f for f, flits in frames) / (2 * data)
    longest = max(frame_flits(bits, W, B) for bits in widths)
    idle_share = 1 / (core.idle_interval - longest + residual)
    if opposite:
        returned = sum(f for f, _ in data_flits(opposite, W, B))
        interval = core.ack_interval + residual + CONTROL_DECISION_CYCLES
        batches = max(returned / max(1, window // 2), sum(words for words, _ in opposite) / max(1, depth // 2))
    else:
        returned, interval, batches = inf, core.refresh_interval + residual + CONTROL_DECISION_CYCLES, 0.0
    # control frames per sample: at least the batches, one per interval of the sample's line
    # time at most, and no more than the updates the other direction makes
    timed = data / (1 - control / interval - idle_share)
    flits = max(min(timed, (data + (returned + 1) * control) / (1 - idle_share)),
                (data + batches * control) / (1 - idle_share))
    if core.ber:
        trip = round_trip_cycles(longest, longest, control, core.phy_latency, core.ack_interval)
        flits *= 1 + error_events(core.ber, W) * trip
    return flits


def link_cycles_per_sample(links, core=LinkCore()):
    """Node cycles per sample the busiest direction of ``links`` ((forward, backward) traffic of
    every link, as :func:`sample_flits` takes it) allows: its line flits over the PHY's
    ``flits_per_cycle``. 0 without links."""
    return max((sample_flits(a, b, core) / core.flits_per_cycle
                for forward, backward in links for a, b in ((forward, backward), (backward, forward))),
               default=0.0)
