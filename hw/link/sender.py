"""The go-back-N sender: which frame goes next (a control frame, a replay or a channel's word),
its framing and CRC, and the replay buffer that keeps every data frame until it is ACKed."""

from amaranth.hdl import Array, Assert, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..base.counter import saturating_increment
from .protocol import ControlCode, FrameKind, LinkConfig
from .arbiter import ChannelArbiter
from .signatures import (AckRequestSignature, ChannelsSignature, ReplayWindowSignature, credit_limits_layout,
                         flit_layout, header_layout, sent_stream)
from .training import TrainState


class TxMode(enum.Enum, shape=2):
    DATA = 0
    REPLAY = 1
    CTRL = 2


class LinkSender(wiring.Component):
    """Puts a flit on ``line`` every cycle: while the link trains (``state``) TS1 or TS2
    (``ts2_sent`` counts the latter), once it is up frames, else IDLE.

    A frame is, in this order: a control frame when one is urgent (a NAK, an ACK or credit
    update older than ``ack_interval``, ``ack_batch`` frames to ACK or ``credit_batch`` words
    freed, a refresh due) or pending with nothing else to send; a replay from
    ``window.send_seq``; a data frame of the next channel in round-robin order with words on
    ``tx``, ``available`` credits and the window open, carrying as many of its waiting words as
    it has credits for, up to ``burst_words``. ``sent`` names the channel and words of each data
    frame started (``window.next_seq`` is its sequence number); ``window.rewind`` moves
    ``send_seq`` back.

    The control frames carry ``acks.expected`` - 1 (an ACK, or a NAK when one is requested)
    and ``credit_limits``; updates are requested by ``acks``, ``credits_freed`` (words freed)
    and ``resync`` (re-trained: an ACK and the credits again).
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "tx": In(ChannelsSignature(config.channels)),
            "line": Out(flit_layout(config.lane_width)),
            "state": In(TrainState),
            "ts2_sent": Out(1),
            "acks": In(AckRequestSignature(config)),
            "credit_limits": In(credit_limits_layout(config)),
            "credits_freed": In(range(len(config.channels) + 1)),
            "resync": In(1),
            "available": In(credit_limits_layout(config)),
            "window": Out(ReplayWindowSignature(config)),
            "sent": Out(sent_stream(config)),
            "frame_replayed": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        W, N, S, K = cfg.lane_width, len(cfg.channels), cfg.seq_bits, cfg.credit_bits
        state = self.state
        word_flits = [cfg.payload_flits(c) for c in range(N)]
        max_flits = cfg.max_payload_flits

        window = self.window
        next_seq = window.next_seq  # sequence number of the next new frame
        send_seq = window.send_seq  # next frame to put on the line (behind next_seq while replaying)
        nak_pending, ack_pending, credit_pending = Signal(), Signal(), Signal()
        ctrl_timer = Signal(range(cfg.refresh_interval + 1))
        since_idle = Signal(range(cfg.idle_interval + 1))

        # The replay buffer: a ring of flits (header and payload of each data frame, one after
        # another, so a frame takes what it needs, not a slot for the longest burst) and where
        # each frame starts in it, by sequence number.
        slot_bits = (cfg.replay_frames - 1).bit_length()
        m.submodules.replay = replay = Memory(shape=W, depth=cfg.replay_flits, init=[])
        replay_write = replay.write_port()
        replay_read = replay.read_port(transparent_for=())
        ring_bits = (cfg.replay_flits - 1).bit_length()
        m.submodules.starts = starts = Memory(shape=ring_bits, depth=cfg.replay_frames, init=[])
        starts_write, starts_replay, starts_oldest = (starts.write_port(), starts.read_port(domain="comb"),
                                                      starts.read_port(domain="comb"))
        write_ptr = Signal(ring_bits)   # the next flit written
        frame_base = Signal(ring_bits)  # where the frame on the line starts in the ring

        busy = Signal()
        mode = Signal(TxMode)
        index = Signal(range(max_flits + 3))     # flit of the frame on the line (0 = SOF)
        frame_payload = Signal(range(max_flits + 1))
        frame_seq = Signal(S)
        # A data frame's words, one after another from its channel's queue: which channel, the
        # flits of one word, the flit of the word on the line, the words still to come.
        frame_channel = Signal(cfg.channel_bits)
        frame_word_flits = Signal(range(max(word_flits) + 1))
        word_flit = Signal(range(max(word_flits)))
        words_left = Signal(range(cfg.burst_words))
        # A frame's header and payload (still to send, low flit first) are loaded in every idle
        # cycle with both kinds' candidates and chosen by ``mode`` on the way out, so the start
        # decision reaches ``mode`` and a few counters, not the enables of these registers.
        ctrl_header, data_header = Signal(header_layout(cfg)), Signal(header_layout(cfg))
        ctrl_word, data_word = Signal(N * K), Signal(max(word_flits) * W)
        emit = Signal(flit_layout(W))
        # The flit leaves through two registers: ``sent``, from which the CRC takes it (not from
        # the replay memory's output: that read and the CRC in one cycle held a one-board chain
        # of speed grade 6 to 60 MHz, 7.7 ns of logic), and the line's, which takes the CRC into
        # the frame's last flit a cycle after the CRC took the flit before it.
        sent, crc_slot, crc_start, crc_valid = Signal(flit_layout(W)), Signal(), Signal(), Signal()
        sent_crc_slot, sent_start, sent_valid = Signal(), Signal(), Signal()
        m.submodules.crc = crc = cfg.crc.create()
        m.d.sync += [sent.eq(emit), sent_crc_slot.eq(crc_slot), sent_start.eq(crc_start), sent_valid.eq(crc_valid),
                     self.line.data.eq(Mux(sent_crc_slot, crc.crc, sent.data)), self.line.ctrl.eq(sent.ctrl)]
        m.d.comb += [crc.start.eq(sent_start), crc.valid.eq(sent_valid), crc.data.eq(sent.data)]
        m.d.comb += [starts_replay.addr.eq(send_seq[:slot_bits]), starts_oldest.addr.eq(window.oldest[:slot_bits]),
                     replay_read.addr.eq(Mux(busy, frame_base + index, starts_replay.data))]
        # Room in the ring for a longest frame more, from the oldest unacknowledged frame's start
        # to the end of the frame on the line (known from its start: a frame's room is checked
        # before its flits are written).
        data_end = Mux(busy & (mode == TxMode.DATA), frame_base + frame_payload + 1, write_ptr)
        in_ring = Mux(window.oldest == next_seq, 0, (data_end - starts_oldest.data)[:ring_bits])
        ring_room = in_ring <= cfg.replay_flits - (cfg.burst_words * max(word_flits) + 1)

        # Which channel's word goes next, registered (hw/link/arbiter.py), a frame start taking it.
        m.submodules.arbiter = arbiter = ChannelArbiter(cfg)
        wiring.connect(m, wiring.flipped(self.tx), arbiter.tx)
        m.d.comb += [arbiter.available.eq(self.available), arbiter.window_open.eq(window.open & ring_room),
                     arbiter.select.eq(Mux(busy, frame_channel, arbiter.grant))]
        grant, any_eligible = arbiter.grant, arbiter.ready

        update_pending = ack_pending | credit_pending
        # Coalescing: an update waits for a batch (half the partner's replay window of frames to
        # ACK, or half a receive buffer of credits), for ``ack_interval`` or for a line with
        # nothing else on it, whichever comes first; a NAK goes at once.
        acks_waiting = Signal(range(cfg.ack_batch + 1))
        freed_waiting = Signal(range(cfg.credit_batch + N + 1))
        batch_due = (acks_waiting == cfg.ack_batch) | (freed_waiting >= cfg.credit_batch)
        # The decision below reads its timers' thresholds as registered flags: each flag is
        # loaded with its threshold of both of the timer's next values (restarted, or one
        # more), computed beside the decision, which only selects one (with the comparisons in
        # front of it, the decision into the frame registers' clock enables and the credit
        # counts was an ECP5-85 node's worst link path at 125 MHz).
        starting_ctrl, emitting_idle, starting_data = Signal(), Signal(), Signal()
        idle_limit = cfg.idle_interval - (max_flits + 3)
        flags = {}
        for name, timer, limit, restart, threshold in (
                ("ack_due", ctrl_timer, cfg.refresh_interval, starting_ctrl, lambda t: t >= cfg.ack_interval),
                ("refresh_due", ctrl_timer, cfg.refresh_interval, starting_ctrl, lambda t: t == cfg.refresh_interval),
                ("idle_due", since_idle, cfg.idle_interval, emitting_idle, lambda t: t >= idle_limit)):
            flags[name] = flag = Signal(name=name, init=bool(threshold(0)))
            counted = Mux(timer == limit, timer, timer + 1)
            m.d.sync += [flag.eq(Mux(restart, bool(threshold(0)), threshold(counted))),
                         Assert(flag == threshold(timer), f"link layer: {name} disagrees with its timer")]
        idle_due = flags["idle_due"]
        # The rest of the decision's inputs are registered too, a cycle late: the comparison of
        # the sequence numbers and the control frame's triggers (with them, the decision into
        # the staged words' valids and the credit counts' enables was eleven LUTs deep, node 0's
        # latest link inputs at 125 MHz). Late to open only delays a frame; late to close cannot
        # start a wrong one, since a frame keeps the sender busy for three cycles after its start
        # and ``send_seq`` moves otherwise only by a rewind, after which the sender waits a cycle
        # (``rewound``) for ``replaying`` to see it.
        urgent_ctrl, ctrl_pending, replaying, rewound = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [urgent_ctrl.eq(nak_pending | (update_pending & flags["ack_due"]) | batch_due | flags["refresh_due"]),
                     ctrl_pending.eq(update_pending), replaying.eq(send_seq != next_seq), rewound.eq(0)]
        with m.If(~busy & ~rewound):
            m.d.sync += Assert(replaying == (send_seq != next_seq), "link layer: replaying disagrees")
        with m.If(starting_data):
            m.d.sync += Assert(send_seq == next_seq, "link layer: a new frame while replaying")

        saturating_increment(m, ctrl_timer, cfg.refresh_interval)  # reset below when one starts

        def start_frame(new_mode):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(ControlCode.SOF)]
            m.d.sync += [busy.eq(1), index.eq(1), mode.eq(new_mode)]

        with m.If(~busy):
            m.d.sync += [ctrl_header.ctrl.kind.eq(FrameKind.CTRL), ctrl_header.ctrl.nak.eq(nak_pending),
                         ctrl_header.ctrl.ack_seq.eq(self.acks.expected - 1),
                         data_header.data.kind.eq(FrameKind.DATA), data_header.data.channel.eq(grant),
                         data_header.data.count.eq(arbiter.words - 1), data_header.data.seq.eq(next_seq),
                         ctrl_word.eq(self.credit_limits),
                         data_word.eq(arbiter.word), frame_channel.eq(grant), frame_word_flits.eq(arbiter.word_flits),
                         words_left.eq(arbiter.words - 1), word_flit.eq(0)]
        with m.Elif(index != 1):
            m.d.sync += [ctrl_word.eq(ctrl_word[W:]), data_word.eq(data_word[W:]), word_flit.eq(word_flit + 1)]
            # The last flit of a word: the burst's next word follows from its channel's queue.
            with m.If(word_flit == frame_word_flits - 1):
                m.d.sync += word_flit.eq(0)
                with m.If((mode == TxMode.DATA) & (words_left != 0)):
                    m.d.comb += arbiter.pop.eq(1)
                    m.d.sync += [data_word.eq(arbiter.word), words_left.eq(words_left - 1)]

        with m.If(busy):
            last = index == frame_payload + 2
            with m.If(index == 1):
                m.d.comb += emit.data.eq(Mux(mode == TxMode.REPLAY, replay_read.data,
                                             Mux(mode == TxMode.CTRL, ctrl_header, data_header)))
                with m.If(mode == TxMode.REPLAY):
                    replayed = header_layout(cfg)(replay_read.data).data
                    with m.Switch(replayed.channel):
                        for c in range(N):
                            with m.Case(c):
                                payloads = Array((k + 1) * word_flits[c] for k in range(2 ** cfg.burst_bits))
                                m.d.sync += frame_payload.eq(payloads[replayed.count])
            with m.Elif(~last):
                m.d.comb += emit.data.eq(Mux(mode == TxMode.REPLAY, replay_read.data,
                                             Mux(mode == TxMode.CTRL, ctrl_word[:W], data_word[:W])))
            with m.Else():
                m.d.comb += crc_slot.eq(1)  # the CRC goes in on the way out
                m.d.sync += busy.eq(0)
            m.d.comb += [crc_start.eq(index == 1), crc_valid.eq(~last),
                         replay_write.addr.eq(write_ptr), replay_write.data.eq(emit.data),
                         replay_write.en.eq((mode == TxMode.DATA) & ~last)]
            with m.If(replay_write.en):
                m.d.sync += write_ptr.eq(write_ptr + 1)
            m.d.sync += index.eq(index + 1)
        with m.Elif(state == TrainState.TRAIN):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(ControlCode.TS1)]
        with m.Elif(state == TrainState.CONFIRM):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(ControlCode.TS2), self.ts2_sent.eq(1)]
        with m.Elif(rewound):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(ControlCode.IDLE)]
        with m.Elif(~idle_due & urgent_ctrl | ~idle_due & ~replaying & ~any_eligible & ctrl_pending):
            start_frame(TxMode.CTRL)
            m.d.comb += starting_ctrl.eq(1)
            m.d.sync += [frame_payload.eq(cfg.ctrl_payload_flits), nak_pending.eq(0), ack_pending.eq(0),
                         credit_pending.eq(0), ctrl_timer.eq(0), acks_waiting.eq(0), freed_waiting.eq(0)]
        with m.Elif(~idle_due & replaying):
            start_frame(TxMode.REPLAY)
            m.d.sync += [frame_seq.eq(send_seq), send_seq.eq(send_seq + 1), frame_base.eq(starts_replay.data)]
            m.d.comb += self.frame_replayed.eq(1)
        with m.Elif(~idle_due & any_eligible):
            start_frame(TxMode.DATA)
            m.d.comb += [starting_data.eq(1), self.sent.valid.eq(1), window.starting.eq(1), arbiter.take.eq(1),
                         arbiter.pop.eq(1)]
            m.d.comb += [starts_write.addr.eq(next_seq[:slot_bits]), starts_write.data.eq(write_ptr),
                         starts_write.en.eq(1)]
            m.d.sync += [frame_seq.eq(next_seq), next_seq.eq(next_seq + 1), send_seq.eq(next_seq + 1),
                         frame_base.eq(write_ptr), frame_payload.eq(arbiter.flits),
                         Assert(arbiter.flits == arbiter.word_flits * arbiter.words,
                                "link layer: the frame length is not its words'")]
        with m.Else():
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(ControlCode.IDLE)]
        m.d.comb += [self.sent.payload.channel.eq(grant), self.sent.payload.words.eq(arbiter.words)]

        m.d.comb += emitting_idle.eq(emit.ctrl & (emit.data == ControlCode.IDLE))
        with m.If(emitting_idle):
            m.d.sync += since_idle.eq(0)
        with m.Else():
            saturating_increment(m, since_idle, cfg.idle_interval)
        # Set after the clears above: an update arriving while a control frame starts is kept
        # (an ACK lost so waited for the next refresh, 512 cycles, as long as the partner's
        # replay timeout, which then replayed frames that had arrived).
        with m.If((self.credits_freed != 0) | self.resync):
            m.d.sync += credit_pending.eq(1)
        with m.If(self.acks.ack | self.resync):
            m.d.sync += ack_pending.eq(1)
        with m.If(self.acks.ack):
            m.d.sync += acks_waiting.eq(Mux(starting_ctrl | (acks_waiting != cfg.ack_batch),
                                            Mux(starting_ctrl, 0, acks_waiting) + 1, acks_waiting))
        with m.If(self.credits_freed != 0):
            m.d.sync += freed_waiting.eq(Mux(starting_ctrl | (freed_waiting < cfg.credit_batch),
                                             Mux(starting_ctrl, 0, freed_waiting) + self.credits_freed, freed_waiting))
        with m.If(self.acks.nak):
            m.d.sync += nak_pending.eq(1)
        # After the frame starts above: a rewind wins, and the sender waits a cycle (``rewound``).
        with m.If(window.rewind.valid):
            m.d.sync += [rewound.eq(1), send_seq.eq(window.rewind.payload)]
        return m
