"""The host protocol between ``python -m boards.host`` and a board's host interface
(boards/host_interface.py), over the board's UART.

Every message, either way, is one frame::

    0xA5 | command | length (2 bytes, little endian) | payload (length bytes) | CRC (2 bytes, big endian)

The CRC is CRC-16/IBM-3740 (also called CCITT-FALSE: polynomial 0x1021, initial value
0xFFFF, not reflected) over command, length and payload, from Amaranth's CRC catalogue;
the hardware runs the same algorithm (``amaranth.lib.crc``) over the whole frame and
checks that the residue is zero, which is why the CRC goes most significant byte first.

The board answers every frame: with ``command | REPLY`` and the command's reply
payload, or with ``NAK`` and one byte saying why (:class:`NakReason`). The host sends
the next frame only after the answer, so the board never has two frames to buffer.
Words are 16-bit two's complement, little endian; counters unsigned little endian.
"""

import struct
from dataclasses import dataclass

from amaranth.lib import enum
from amaranth.lib.crc import catalog

SYNC = 0xA5
REPLY = 0x80
NAK = 0xFF
HEADER_BYTES = 4          # sync, command, length
MAX_PAYLOAD = 512         # bytes a frame may carry: the board's frame buffer

CRC = catalog.CRC16_IBM_3740(data_width=8)


class Command(enum.IntEnum, shape=8):
    """The commands (host to board) and their payloads; an answer's code is the command's
    ``| REPLY`` (so ints). WRITE and READ go on past a row's last lane to lane 0 of the next
    address."""
    INFO = 0x00    # -> first node's index in the chain, nodes held (1 byte each), then each
                   #    node's number of weight memories (1 byte each)
    WRITE = 0x01   # node, memory (1 byte each), address, first lane (2 bytes each), words -> nothing
    READ = 0x02    # node, memory, address, first lane, count (2 bytes) -> count words
    LABEL = 0x03   # label words, one per sample, into node 0 (refused by a board without it)
    IMAGE = 0x04   # pixel words (channels of a pixel, pixels in raster order) into node 0
    START = 0x05   # samples of the run, mini-batch updates it makes (4 bytes each) -> nothing
    STOP = 0x06    # resets every node (weights keep their values) -> nothing
    STATUS = 0x07  # -> Status


WRITE_HEADER, READ_HEADER = 6, 8


class NakReason(enum.Enum, shape=8):
    """Why the board refused a frame: the one byte of a NAK's payload."""
    CRC_ERROR = 1       # the host sends the frame again
    FRAME_TOO_LONG = 2  # more than MAX_PAYLOAD bytes
    UNKNOWN_COMMAND = 3
    BAD_ARGUMENT = 4


def nak_reason(payload):
    """A NAK's payload in words: its reason, "reason N" for a byte that is none, "no reason"."""
    if not payload:
        return "no reason"
    try:
        return NakReason(payload[0]).name.lower().replace("_", " ")
    except ValueError:
        return f"reason {payload[0]}"


def crc16(data):
    return CRC.compute(bytes(data))


def frame(command, payload=b""):
    body = bytes([command]) + struct.pack("<H", len(payload)) + bytes(payload)
    return bytes([SYNC]) + body + struct.pack(">H", crc16(body))


class ProtocolError(Exception):
    pass


def parse_frames(data):
    """Whole frames at the start of ``data``: ([(command, payload)], bytes left over).
    Raises ProtocolError on a frame whose CRC does not match or a byte that starts no frame."""
    frames = []
    while len(data) >= HEADER_BYTES:
        if data[0] != SYNC:
            raise ProtocolError(f"expected a frame, got byte 0x{data[0]:02x}")
        length = struct.unpack_from("<H", data, 2)[0]
        end = HEADER_BYTES + length + 2
        if len(data) < end:
            break
        body, check = data[1:end - 2], struct.unpack_from(">H", data, end - 2)[0]
        if crc16(body) != check:
            raise ProtocolError(f"reply with a bad CRC (command 0x{body[0]:02x})")
        frames.append((body[0], bytes(body[3:])))
        data = data[end:]
    return frames, data


def words(values):
    return struct.pack(f"<{len(values)}h", *values)


def unwords(payload):
    return list(struct.unpack(f"<{len(payload) // 2}h", payload))


# STATUS reply: the fields in order, (name, bytes).
# ``links_up``: bit 0 the link to the upstream board is up, bit 1 the downstream one (a side
# without a board is up).
STATUS_FIELDS = (("training", 1), ("error", 1), ("links_up", 1), ("frame_errors", 4), ("loss_squares", 8),
                 ("loss_samples", 4))
NODE_STATUS_FIELDS = (("samples", 4), ("updates", 4), ("cycles", 4), ("link_retries", 4),
                      ("link_crc_errors", 4))


def status_bytes(nodes):
    return sum(size for _, size in STATUS_FIELDS) + nodes * sum(size for _, size in NODE_STATUS_FIELDS)


@dataclass
class Status:
    """What STATUS reports. ``cycles``: per node, the cycle (counted from START) of its latest
    weight update. ``loss_squares``: sum over the samples the last node has scored of
    sum_c (y_c - onehot_c << act_frac)^2, exact, in activation words; ``loss_samples``
    those samples. ``frame_errors``: frames the board refused (bad CRC, too long).
    ``links_up``: bit 0 the link to the upstream board, bit 1 the downstream one
    (``boards.client.Client.status`` of a chain across boards: a list, one per board)."""
    training: bool
    error: bool
    links_up: object
    frame_errors: int
    loss_squares: int
    loss_samples: int
    nodes: list  # one dict per node, NODE_STATUS_FIELDS

    @classmethod
    def unpack(cls, payload, nodes):
        if len(payload) != status_bytes(nodes):
            raise ProtocolError(f"status of {len(payload)} bytes, expected {status_bytes(nodes)} "
                                f"for {nodes} nodes")
        values, offset = {}, 0
        for name, size in STATUS_FIELDS:
            values[name] = int.from_bytes(payload[offset:offset + size], "little")
            offset += size
        per_node = []
        for _ in range(nodes):
            node = {}
            for name, size in NODE_STATUS_FIELDS:
                node[name] = int.from_bytes(payload[offset:offset + size], "little")
                offset += size
            per_node.append(node)
        return cls(bool(values["training"]), bool(values["error"]), values["links_up"], values["frame_errors"],
                   values["loss_squares"], values["loss_samples"], per_node)

    def loss(self, act_frac):
        """Mean loss of the samples scored, 0.5 * sum((y - onehot)^2) as mapping.golden reports it."""
        return self.loss_squares / 2 ** (2 * act_frac + 1) / max(self.loss_samples, 1)
