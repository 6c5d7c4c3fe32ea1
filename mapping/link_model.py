"""The link core's frame arithmetic: line flits per word, round trips, buffer depths, efficiency.

One source for the link protocol's sizing (docs/link_protocol.md): ``hw/link/protocol.py``
builds its ``LinkConfig`` formulas from these functions, and the mapping's performance model
(mapping/perf.py) prices every link's traffic with them. Pure arithmetic on bit widths and cycle
counts, in flits (one lane word per link-clock cycle).

A data frame carrying a ``bits``-wide word is SOF, header, ceil(bits / lane) payload flits and a
CRC flit. Under load the receiver sends a control frame (ACK and credits) at most every
``ack_interval`` cycles, and the sender an IDLE every ``idle_interval`` flits; both take line
time from data. The line code is the PHY's: a device's ``link_gbps`` (mapping/devices.py) is
already after 8b/10b, so it counts flit bits.
"""

from math import ceil

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


def payload_flits(bits, lane_width):
    return ceil(bits / lane_width)


def frame_flits(bits, lane_width):
    """Line flits of a frame whose payload is ``bits`` wide."""
    return FRAME_OVERHEAD_FLITS + payload_flits(bits, lane_width)


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


def frame_efficiency(bits, lane_width):
    """Payload bits per line bit of back-to-back frames of ``bits``-wide words."""
    return bits / (frame_flits(bits, lane_width) * lane_width)


def line_flits(traffic, lane_width, control_frame, ack_interval=ACK_INTERVAL, idle_interval=IDLE_INTERVAL):
    """Line flits that carry ``traffic`` ((words, bits per word) pairs) on a saturated link:
    their data frames, plus the control frames (one per ``ack_interval``) and IDLEs (one per
    ``idle_interval``) sent in the same time."""
    data = sum(words * frame_flits(bits, lane_width) for words, bits in traffic if words)
    return data / (1 - control_frame / ack_interval - 1 / idle_interval)


def efficiency(traffic, lane_width, control_frame, **intervals):
    """Payload bits per line bit of ``traffic`` on a saturated link."""
    flits = line_flits(traffic, lane_width, control_frame, **intervals)
    return sum(words * bits for words, bits in traffic) / (flits * lane_width) if flits else 0.0
