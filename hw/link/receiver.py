"""The frame receiver: frames out of the received flits, their CRC, length and sequence
checks, and the decision to ACK or NAK."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..base.counter import saturating_increment
from .protocol import ControlCode, FrameKind, LinkConfig
from .signatures import (AckRequestSignature, ChannelsSignature, channel_ports, credit_limits_layout, ctrl_frame_stream, flit_stream,
                         header_layout)


class LinkReceiver(wiring.Component):
    """Frames from ``rx`` while ``link_up``: a data frame whose CRC matches, of the length its
    channel's frames have, with the next sequence number (``expected``), leaves as its word on
    that channel of ``words`` a cycle later; a control frame that checks leaves on ``ctrl`` in
    the cycle its end is seen.

    Requests for the sender (``acks``): an ACK for a frame accepted or a replayed duplicate (the
    partner missed our ACK), a NAK for a frame rejected or one after a gap, once per ``expected``. Events for the counters: ``frame_received``, ``frame_rejected``.
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "rx": In(flit_stream(config.lane_width)),
            "link_up": In(1),
            "words": Out(ChannelsSignature(config.channels, always_ready=True)),
            "ctrl": Out(ctrl_frame_stream(config)),
            "acks": Out(AckRequestSignature(config)),
            "frame_received": Out(1),
            "frame_rejected": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        W, N = cfg.lane_width, len(cfg.channels)
        payload_flits = [cfg.payload_flits(c) for c in range(N)]
        max_flits = cfg.max_payload_flits
        rx, rx_valid = self.rx.payload, self.rx.valid
        rx_ctrl = rx_valid & rx.ctrl
        rx_data = rx_valid & ~rx.ctrl

        in_frame = Signal()
        count = Signal(range(max_flits + 4))     # data flits since SOF, saturating
        header = Signal(header_layout(cfg))
        # Every flit received is shifted in at the top, so the shift register's enable is the
        # PHY's valid alone (a register of the elastic buffer's), not the frame decode: at a
        # frame's end its top flits are the payload and the CRC.
        body = Signal((max_flits + 1) * W)
        with m.If(rx_valid):
            m.d.sync += body.eq(Cat(body[W:], rx.data))
        m.submodules.crc = crc = cfg.crc.create()
        m.d.comb += [crc.data.eq(rx.data), crc.valid.eq(rx_data & in_frame), crc.start.eq(count == 0)]
        with m.If(rx_data & in_frame):
            saturating_increment(m, count, max_flits + 3)
            with m.If(count == 0):
                m.d.sync += header.eq(rx.data)
        with m.If(rx_ctrl):
            m.d.sync += [in_frame.eq(rx.data == ControlCode.SOF), count.eq(0)]

        frame_end = Signal()
        m.d.comb += frame_end.eq(rx_ctrl & in_frame & self.link_up)
        channel, seq = header.data.channel, header.data.seq
        right_length = Signal()
        with m.Switch(channel):
            for c in range(N):
                with m.Case(c):
                    m.d.comb += right_length.eq(count == payload_flits[c] + 2)
        data_ok = frame_end & crc.match_detected & (header.data.kind == FrameKind.DATA) & right_length
        ctrl_ok = (frame_end & crc.match_detected & (header.ctrl.kind == FrameKind.CTRL)
                   & (count == cfg.ctrl_payload_flits + 2))
        ctrl_payload_start = (max_flits - cfg.ctrl_payload_flits) * W
        m.d.comb += [self.ctrl.valid.eq(ctrl_ok), self.ctrl.payload.ack_seq.eq(header.ctrl.ack_seq),
                     self.ctrl.payload.nak.eq(header.ctrl.nak),
                     self.ctrl.payload.credit_limits.eq(
                         body[ctrl_payload_start:ctrl_payload_start + credit_limits_layout(cfg).size])]

        expected = self.acks.expected  # next sequence number to accept
        nak_sent = Signal()       # a NAK for `expected` is out; no second until it arrives
        ahead = Signal(cfg.seq_bits)
        m.d.comb += ahead.eq(seq - expected)

        def request_nak():
            with m.If(~nak_sent):
                m.d.comb += self.acks.nak.eq(1)
                m.d.sync += nak_sent.eq(1)

        commit = Signal()
        with m.If(data_ok):
            with m.If(ahead == 0):
                m.d.comb += [commit.eq(1), self.acks.ack.eq(1), self.frame_received.eq(1)]
                m.d.sync += [expected.eq(expected + 1), nak_sent.eq(0)]
            with m.Elif(ahead < cfg.seq_window):  # a frame before it was lost
                request_nak()
            with m.Else():                        # a replayed duplicate: our ACK was lost
                m.d.comb += self.acks.ack.eq(1)
        with m.Elif(frame_end & ~ctrl_ok):
            m.d.comb += self.frame_rejected.eq(1)
            request_nak()
        # A frame's word leaves a cycle after its CRC matched: the decision (the elastic
        # buffer's valid, the CRC, the sequence check) stops at a register instead of running on
        # into the write enable of every RAM cell of a receive buffer (8.3 ns of routing, the CI
        # bitstream's worst path).
        for c, port in enumerate(channel_ports(cfg, self.words)):
            start = (max_flits - payload_flits[c]) * W
            m.d.sync += [port.payload.eq(body[start:start + len(port.payload)]),
                         port.valid.eq(commit & (channel == c))]
        return m
