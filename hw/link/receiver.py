"""The frame receiver: frames out of the received flits, their CRC, length and sequence
checks, and the decision to ACK or NAK."""

from amaranth.hdl import Array, Assert, Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..base.counter import saturating_increment
from .protocol import ControlCode, FrameKind, LinkConfig
from .signatures import (AckRequestSignature, ChannelsSignature, channel_ports, credit_limits_layout, ctrl_frame_stream, flit_stream,
                         header_layout)


class LinkReceiver(wiring.Component):
    """Frames from ``rx`` while ``link_up``: a data frame whose CRC matches, of the length its
    header's channel and word count give, with the next sequence number (``expected``), leaves
    as its words, one a cycle, on that channel of ``words`` from the next cycle; a control
    frame that checks leaves on ``ctrl`` in the cycle its end is seen.

    Requests for the sender (``acks``): an ACK for a frame accepted or a replayed duplicate (the
    partner missed our ACK), a NAK for a frame rejected or one after a gap, once per ``expected``.
    Events for the counters: ``frame_received``, ``frame_rejected``.
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
        W, N, B = cfg.lane_width, len(cfg.channels), cfg.burst_words
        word_flits = [cfg.payload_flits(c) for c in range(N)]
        max_flits = cfg.max_payload_flits
        rx, rx_valid = self.rx.payload, self.rx.valid
        rx_ctrl = rx_valid & rx.ctrl
        rx_data = rx_valid & ~rx.ctrl

        in_frame = Signal()
        count = Signal(range(max_flits + 4))     # data flits since SOF, saturating
        header = Signal(header_layout(cfg))
        # Every flit received is shifted in at the top, so the shift register's enable is the
        # PHY's valid alone (a register of the elastic buffer's), not the frame decode: at a
        # control frame's end its top flits are the payload and the CRC, at a word's last flit
        # (with the flit arriving) that word's.
        body_flits = max(cfg.ctrl_payload_flits, max(word_flits)) + 1
        body = Signal(body_flits * W)
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
        channel, seq, words = header.data.channel, header.data.seq, header.data.count + 1
        right_length = Signal()
        # Frame lengths by word count from tables (a product here took a DSP block on an ECP5).
        with m.Switch(channel):
            for c in range(N):
                with m.Case(c):
                    lengths = Array((k + 1) * word_flits[c] + 2 for k in range(2 ** cfg.burst_bits))
                    m.d.comb += right_length.eq((count == lengths[header.data.count]) & (header.data.count < B))
        data_ok = frame_end & crc.match_detected & (header.data.kind == FrameKind.DATA) & right_length
        ctrl_ok = (frame_end & crc.match_detected & (header.ctrl.kind == FrameKind.CTRL)
                   & (count == cfg.ctrl_payload_flits + 2))
        ctrl_payload_start = (body_flits - 1 - cfg.ctrl_payload_flits) * W
        m.d.comb += [self.ctrl.valid.eq(ctrl_ok), self.ctrl.payload.ack_seq.eq(header.ctrl.ack_seq),
                     self.ctrl.payload.nak.eq(header.ctrl.nak),
                     self.ctrl.payload.credit_limits.eq(
                         body[ctrl_payload_start:ctrl_payload_start + credit_limits_layout(cfg).size])]

        # A frame's words go into a ring as they arrive, behind the words of the frames accepted
        # (``commit``), and count only once its CRC and sequence number check: a frame of a
        # burst's words is seen whole only at its end. The ring holds a burst arriving and one
        # accepted still leaving (one word a cycle, faster than frames of at least three flits
        # more than their words bring them), so its words never overtake those leaving.
        ring_bits = (2 * B - 1).bit_length()
        max_width = max(width for _, width in cfg.channels)
        entry = data.StructLayout({"word": max_width, "channel": cfg.channel_bits})
        m.submodules.ring = ring = Memory(shape=entry, depth=2 ** ring_bits, init=[])
        ring_write, ring_read = ring.write_port(), ring.read_port(domain="comb")
        commit, read = Signal(ring_bits), Signal(ring_bits)
        word_flit = Signal(range(max(word_flits)))
        words_seen = Signal(range(B + 1))       # words of this frame so far, saturating
        frame_word_flits = Signal(range(max(word_flits) + 1))
        last_flits = Cat(body, rx.data)
        word_in = Signal(max_width)
        with m.Switch(channel):
            for c in range(N):
                with m.Case(c):
                    start = (body_flits + 1 - word_flits[c]) * W
                    m.d.comb += [frame_word_flits.eq(word_flits[c]),
                                 word_in.eq(last_flits[start:start + cfg.channels[c][1]])]
        word_done = rx_data & in_frame & (count != 0) & (word_flit == frame_word_flits - 1)
        m.d.comb += [ring_write.addr.eq(commit + words_seen), ring_write.data.word.eq(word_in),
                     ring_write.data.channel.eq(channel), ring_write.en.eq(word_done & (words_seen != B))]
        with m.If(rx_data & in_frame):
            with m.If(count == 0):
                m.d.sync += [word_flit.eq(0), words_seen.eq(0)]
            with m.Elif(word_done):
                m.d.sync += word_flit.eq(0)
                saturating_increment(m, words_seen, B)
            with m.Else():
                m.d.sync += word_flit.eq(word_flit + 1)

        expected = self.acks.expected  # next sequence number to accept
        nak_sent = Signal()       # a NAK for `expected` is out; no second until it arrives
        ahead = Signal(cfg.seq_bits)
        m.d.comb += ahead.eq(seq - expected)

        def request_nak():
            with m.If(~nak_sent):
                m.d.comb += self.acks.nak.eq(1)
                m.d.sync += nak_sent.eq(1)

        with m.If(data_ok):
            with m.If(ahead == 0):
                m.d.comb += [self.acks.ack.eq(1), self.frame_received.eq(1)]
                m.d.sync += [expected.eq(expected + 1), nak_sent.eq(0), commit.eq(commit + words)]
            with m.Elif(ahead < cfg.seq_window):  # a frame before it was lost
                request_nak()
            with m.Else():                        # a replayed duplicate: our ACK was lost
                m.d.comb += self.acks.ack.eq(1)
        with m.Elif(frame_end & ~ctrl_ok):
            m.d.comb += self.frame_rejected.eq(1)
            request_nak()
        # The accepted words leave one a cycle, read from the ring's registered pointers: the
        # decision (the elastic buffer's valid, the CRC, the sequence check) stops at ``commit``
        # instead of running on into the write enable of every RAM cell of a receive buffer
        # (8.3 ns of routing, the CI bitstream's worst path).
        leaving = Signal()
        m.d.comb += [ring_read.addr.eq(read), leaving.eq(read != commit)]
        m.d.sync += Assert((commit - read)[:ring_bits] <= B, "link layer: the receiver's ring overflows")
        with m.If(leaving):
            m.d.sync += read.eq(read + 1)
        for c, port in enumerate(channel_ports(cfg, self.words)):
            m.d.comb += [port.payload.eq(ring_read.data.word), port.valid.eq(leaving & (ring_read.data.channel == c))]
        return m
