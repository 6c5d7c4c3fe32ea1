"""The link layer: logical channels multiplexed into frames over one lane, with per-channel
credits, CRC, sequence numbers, ACK/NAK and go-back-N replay, and link training.

Everything here runs in one clock domain (the link clock, ``sync`` inside this component);
:class:`hw.link.endpoint.LinkEndpoint` puts it between the node's clock and the PHY's.
The frame format and every rule are in :mod:`hw.link.protocol` (the reference model).
"""

from amaranth.hdl import Array, Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..base.handshake import SkidBuffer
from .protocol import (KIND_BITS, KIND_CTRL, KIND_DATA, K_IDLE, K_SOF, K_TS1, K_TS2, LinkConfig)


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


class ChannelsSignature(wiring.Signature):
    """One stream per logical channel, named and sized from the link's configuration."""

    def __init__(self, channels):
        for name, _ in channels:
            if not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"channel name '{name}' is not a valid member name")
        super().__init__({name: Out(stream.Signature(width)) for name, width in channels})


def channel_ports(config, interface):
    """The channel streams of a ChannelsSignature ``interface``, in ``config.channels`` order."""
    return [getattr(interface, name) for name, _ in config.channels]


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


class TrainState(enum.Enum, shape=2):
    TRAIN = 0    # sending TS1 until the partner's training is heard
    CONFIRM = 1  # sending TS2 until the partner has heard us too
    UP = 2


class TxMode(enum.Enum, shape=2):
    DATA = 0
    REPLAY = 1
    CTRL = 2


def _saturating_increment(m, counter, limit):
    with m.If(counter != limit):
        m.d.sync += counter.eq(counter + 1)


class LinkLayer(wiring.Component):
    """One endpoint of a link (both directions), everything in the link clock domain (``sync``)."""

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__(LinkSignature(config))

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        W, N, S, K = cfg.lane_width, len(cfg.channels), cfg.seq_bits, cfg.credit_bits
        CB = cfg.channel_bits
        tx_ports, rx_ports = channel_ports(cfg, self.tx), channel_ports(cfg, self.rx)
        payload_flits = [cfg.payload_flits(c) for c in range(N)]
        max_flits = cfg.max_payload_flits

        # The counters count a cycle late, from registered events, so their adders stay off the
        # paths that decide (an ACK's window check on into ``replays`` was a one-board chain's
        # worst path on an ECP5 of speed grade 6: 5 ns of logic, 9.7 ns of routing).
        events = {name: Signal(name=f"{name}_event") for name in COUNTER_NAMES}

        def increment(name):
            m.d.comb += events[name].eq(1)

        # ---- training -------------------------------------------------------------------------
        state = Signal(TrainState)
        rx, rx_valid, locked = self.phy.rx, self.phy.rx_valid, self.phy.rx_locked
        rx_ctrl = rx_valid & rx.ctrl
        rx_data = rx_valid & ~rx.ctrl
        rx_ts1 = rx_ctrl & (rx.data == K_TS1)
        rx_ts2 = rx_ctrl & (rx.data == K_TS2)
        heard = Signal(range(cfg.train_count + 1))  # consecutive training flits received
        said = Signal(range(cfg.train_count + 1))   # TS2 flits sent in CONFIRM
        train_timer = Signal(range(cfg.train_timeout + 1))
        entering_up = Signal()
        m.d.comb += self.link_up.eq(state == TrainState.UP)

        with m.Switch(state):
            with m.Case(TrainState.TRAIN):
                with m.If(rx_ts1 | rx_ts2):
                    _saturating_increment(m, heard, cfg.train_count)
                with m.Elif(rx_valid):
                    m.d.sync += heard.eq(0)
                with m.If(locked & (heard == cfg.train_count)):
                    m.d.sync += [state.eq(TrainState.CONFIRM), heard.eq(0), said.eq(0),
                                 train_timer.eq(0)]
            with m.Case(TrainState.CONFIRM):
                with m.If(rx_ts2):
                    _saturating_increment(m, heard, cfg.train_count)
                with m.Elif(rx_valid & ~rx_ts1):
                    m.d.sync += heard.eq(0)
                _saturating_increment(m, train_timer, cfg.train_timeout)
                with m.If(~locked | (train_timer == cfg.train_timeout)):
                    m.d.sync += [state.eq(TrainState.TRAIN), heard.eq(0)]
                with m.Elif((heard == cfg.train_count) & (said == cfg.train_count)):
                    m.d.sync += [state.eq(TrainState.UP), heard.eq(0)]
                    m.d.comb += entering_up.eq(1)
            with m.Case(TrainState.UP):
                # Two TS1 in a row: one bit turns an IDLE (K28.5, 0xBC) into a TS1 (K28.1, 0x3C)
                # on a line without 8b/10b (the header-pin PHY), while a partner that retrains
                # sends TS1 back to back until it hears this end's.
                with m.If(rx_ts1):
                    _saturating_increment(m, heard, cfg.train_count)
                with m.Elif(rx_valid):
                    m.d.sync += heard.eq(0)
                with m.If(~locked | rx_ts1 & (heard != 0)):
                    m.d.sync += [state.eq(TrainState.TRAIN), heard.eq(0)]
                    increment("retrains")

        # ---- receive buffers and credits ---------------------------------------------------
        # The sender may send a channel's word while its cumulative count of words sent differs
        # from the limit last advertised: words the receiver has freed plus its buffer depth.
        credit_limit = Array(Signal(K, init=cfg.receive_depth, name=f"credit_limit_{c}") for c in range(N))
        words_sent = Array(Signal(K, name=f"words_sent_{c}") for c in range(N))
        words_freed = [Signal(K, name=f"words_freed_{c}") for c in range(N)]
        advertised = Cat((words_freed[c] + cfg.receive_depth)[:K] for c in range(N))
        buffers, taken = [], []
        for c, (name, width) in enumerate(cfg.channels):
            buffer = SyncFIFOBuffered(width=width, depth=cfg.receive_depth)
            m.submodules[f"rx_buffer_{name}"] = buffer
            buffers.append(buffer)
            # The consumer's ready stops at the skid's registers instead of running on into the
            # buffer's read logic and the credit counters (from a node's EB line buffer into
            # ``credit_pending``: an ECP5-85 node's worst path at 125 MHz). A word is freed
            # when the consumer takes it, a cycle later, so the buffer and the skid together
            # hold no more than the credits allow.
            skid = m.submodules[f"rx_skid_{name}"] = SkidBuffer(width)
            m.d.comb += [skid.i.payload.eq(buffer.r_data), skid.i.valid.eq(buffer.r_rdy),
                         buffer.r_en.eq(skid.i.ready), rx_ports[c].payload.eq(skid.o.payload),
                         rx_ports[c].valid.eq(skid.o.valid), skid.o.ready.eq(rx_ports[c].ready)]
            taken.append(Signal(name=f"taken_{name}"))
            m.d.sync += taken[c].eq(rx_ports[c].valid & rx_ports[c].ready)
            with m.If(taken[c]):
                m.d.sync += words_freed[c].eq(words_freed[c] + 1)

        # ---- receiver ------------------------------------------------------------------------
        in_frame = Signal()
        count = Signal(range(max_flits + 4))     # data flits since SOF, saturating
        header = Signal(W)
        # Every flit received is shifted in at the top, so the shift register's enable is the
        # PHY's valid alone (a register of the elastic buffer's), not the frame decode: at a
        # frame's end its top flits are the payload and the CRC.
        body = Signal((max_flits + 1) * W)
        with m.If(rx_valid):
            m.d.sync += body.eq(Cat(body[W:], rx.data))
        m.submodules.rx_crc = rx_crc = cfg.crc.create()
        m.d.comb += [rx_crc.data.eq(rx.data), rx_crc.valid.eq(rx_data & in_frame),
                     rx_crc.start.eq(count == 0)]
        with m.If(rx_data & in_frame):
            _saturating_increment(m, count, max_flits + 3)
            with m.If(count == 0):
                m.d.sync += header.eq(rx.data)
        with m.If(rx_ctrl):
            m.d.sync += [in_frame.eq(rx.data == K_SOF), count.eq(0)]

        frame_end = Signal()
        m.d.comb += frame_end.eq(rx_ctrl & in_frame & (state == TrainState.UP))
        kind = header[:KIND_BITS]
        channel = header[KIND_BITS:KIND_BITS + CB]
        seq = header[KIND_BITS + CB:]
        right_length = Signal()
        with m.Switch(channel):
            for c in range(N):
                with m.Case(c):
                    m.d.comb += right_length.eq(count == payload_flits[c] + 2)
        data_ok = frame_end & rx_crc.match_detected & (kind == KIND_DATA) & right_length
        ctrl_ok = (frame_end & rx_crc.match_detected & (kind == KIND_CTRL)
                   & (count == cfg.ctrl_payload_flits + 2))

        expected = Signal(S)      # next sequence number to accept
        nak_sent = Signal()       # a NAK for `expected` is out; no second until it arrives
        nak_pending = Signal()
        ack_pending = Signal()
        credit_pending = Signal()
        ahead = Signal(S)
        m.d.comb += ahead.eq(seq - expected)

        # Requests, raised into ``ack_pending`` and ``nak_pending`` after the sender's decision
        # below, which clears them when a control frame starts: that frame's header was taken
        # before this cycle's frame counted, so a request of the same cycle waits for the next.
        ack_request, nak_request = Signal(), Signal()

        def request_nak():
            with m.If(~nak_sent):
                m.d.comb += nak_request.eq(1)
                m.d.sync += nak_sent.eq(1)

        commit = Signal()
        with m.If(data_ok):
            with m.If(ahead == 0):
                m.d.comb += commit.eq(1)
                m.d.comb += ack_request.eq(1)
                m.d.sync += [expected.eq(expected + 1), nak_sent.eq(0)]
                increment("frames_received")
            with m.Elif(ahead < cfg.seq_window):  # a frame before it was lost
                request_nak()
            with m.Else():                        # a replayed duplicate: our ACK was lost
                m.d.comb += ack_request.eq(1)
        with m.Elif(frame_end & ~ctrl_ok):
            increment("crc_errors")
            request_nak()
        # A frame's word enters its receive buffer a cycle after its CRC matched: the decision
        # (the elastic buffer's valid, the CRC, the sequence check) stops at a register instead
        # of running on into the write enable of every RAM cell of the buffer (8.3 ns of routing,
        # the CI bitstream's worst path). The credits count words taken out, so they are unchanged.
        for c, (_, width) in enumerate(cfg.channels):
            start = (max_flits - payload_flits[c]) * W
            m.d.sync += [buffers[c].w_data.eq(body[start:start + width]),
                         buffers[c].w_en.eq(commit & (channel == c))]
            m.d.sync += Assert(~buffers[c].w_en | buffers[c].w_rdy, f"receive buffer of {cfg.channels[c][0]} overflows")

        # ---- sender: go-back-N state ----------------------------------------------------------
        next_seq = Signal(S)   # sequence number of the next new frame
        send_seq = Signal(S)   # next frame to put on the line (behind next_seq while replaying)
        oldest = Signal(S)     # oldest unacknowledged frame
        in_flight = Signal(S)  # next_seq - oldest, a register (below)
        replay_timer = Signal(range(cfg.replay_timeout + 1))
        ctrl_timer = Signal(range(cfg.refresh_interval + 1))
        since_idle = Signal(range(cfg.idle_interval + 1))

        index_bits = (max(payload_flits)).bit_length()  # header and payload flits of one frame
        slot_bits = (cfg.replay_frames - 1).bit_length()
        m.submodules.replay = replay = Memory(shape=W, depth=cfg.replay_frames << index_bits, init=[])
        replay_write = replay.write_port()
        replay_read = replay.read_port(transparent_for=())

        busy = Signal()
        mode = Signal(TxMode)
        index = Signal(range(max_flits + 3))     # flit of the frame on the line (0 = SOF)
        frame_payload = Signal(range(max_flits + 1))
        frame_seq = Signal(S)
        # A frame's header and payload (still to send, low flit first) are loaded in every idle
        # cycle with both kinds' candidates and chosen by ``mode`` on the way out, so the start
        # decision reaches ``mode`` and a few counters, not the enables of these registers.
        ctrl_header, data_header = Signal(W), Signal(W)
        ctrl_word, data_word = Signal(N * K), Signal(max_flits * W)
        emit = Signal(flit_layout(W))
        # The flit leaves through two registers: ``sent``, from which the CRC takes it (not from
        # the replay memory's output: that read and the CRC in one cycle held a one-board chain
        # of speed grade 6 to 60 MHz, 7.7 ns of logic), and the PHY's, which takes the CRC into
        # the frame's last flit a cycle after the CRC took the flit before it.
        sent, crc_slot, crc_start, crc_valid = Signal(flit_layout(W)), Signal(), Signal(), Signal()
        sent_crc_slot, sent_start, sent_valid = Signal(), Signal(), Signal()
        m.submodules.tx_crc = tx_crc = cfg.crc.create()
        m.d.sync += [sent.eq(emit), sent_crc_slot.eq(crc_slot), sent_start.eq(crc_start), sent_valid.eq(crc_valid),
                     self.phy.tx.data.eq(Mux(sent_crc_slot, tx_crc.crc, sent.data)),
                     self.phy.tx.ctrl.eq(sent.ctrl)]
        m.d.comb += [tx_crc.start.eq(sent_start), tx_crc.valid.eq(sent_valid), tx_crc.data.eq(sent.data)]
        m.d.comb += replay_read.addr.eq(Mux(busy, Cat(index[:index_bits], frame_seq[:slot_bits]),
                                            Cat(Const(0, index_bits), send_seq[:slot_bits])))

        # Each channel's next word waits in a register of the sender's: the node sees that
        # register's emptiness as its ready, and a frame start takes the word from it, so the
        # credit, window and arbitration logic below reaches neither the node's handshakes nor a
        # buffer's read enable (through a two-word FIFO's read, 7.9 ns of routing, the CI
        # bitstream's worst path; before that FIFO, a one-board chain's into an FP engine's
        # enable). A frame takes at least three cycles, so refilled the cycle after a start, a
        # channel keeps its rate.
        staged = [Signal.like(tx_ports[c].payload, name=f"staged_{c}") for c in range(N)]
        staged_valid = Signal(N)
        for c in range(N):
            m.d.comb += tx_ports[c].ready.eq(~staged_valid[c])
            # Loaded while empty, whatever the node's valid: that valid (from deep in the node)
            # reaches one flip-flop instead of every enable of the word.
            with m.If(~staged_valid[c]):
                m.d.sync += [staged[c].eq(tx_ports[c].payload), staged_valid[c].eq(tx_ports[c].valid)]

        # Round-robin among channels with a word, a credit and room in the replay window.
        last_grant = Signal(range(N))
        # Each channel's credit check, a cycle late like ``room`` below (the count compared into
        # the staged word's valid was the Versa node 1's worst path, 7.8 ns of routing): only
        # late to open, since the cycle after a frame starts is busy.
        has_credit = Signal(N)
        m.d.sync += has_credit.eq(Cat((credit_limit[c] != words_sent[c]) for c in range(N)))
        eligible = staged_valid & has_credit
        # The replay window's room, a cycle late (registered: the subtraction and compare ran into
        # the node's tx buffer's clock enable, 15 ns of routing on a one-board chain of speed
        # grade 6). Only late to open: a DATA frame starts at most every third cycle, and the
        # cycle after one starts is busy, by when ``room`` has seen its ``next_seq`` (and
        # ``has_credit`` its ``words_sent``).
        room = Signal()
        m.d.sync += room.eq(in_flight < cfg.replay_frames)
        # The arbitration's result, registered too (from the staged valids through the round
        # robin into the start decision and back into the valids' and counts' enables: an
        # ECP5-85 node's worst path at 125 MHz, six LUTs over 7.5 ns of routing). Only late to
        # open as well: a frame keeps the sender busy for three cycles after its start, by when
        # the registered grant has seen the cleared valid, the new count and ``last_grant``.
        grant = Signal(CB)
        # The granted channel's frame length, loaded with the grant: a copy that feeds the frame
        # length alone, next to it (from ``grant``, which the staged words' select pulls away,
        # node 1's one late input at 125 MHz, 0.7 ns logic and 7.5 ns routing).
        granted_flits = Signal.like(frame_payload)
        any_eligible = Signal()
        m.d.sync += any_eligible.eq(eligible.any() & room)
        with m.Switch(last_grant):
            for last in range(N):
                with m.Case(last):
                    order = [(last + 1 + k) % N for k in range(N)]
                    for c in reversed(order):
                        with m.If(eligible[c]):
                            m.d.sync += [grant.eq(c), granted_flits.eq(payload_flits[c])]
        with m.If(~busy & (state == TrainState.UP) & any_eligible):
            m.d.sync += Assert(staged_valid.bit_select(grant, 1) & (credit_limit[grant] != words_sent[grant])
                               & (in_flight < cfg.replay_frames), "link layer: a stale grant")

        update_pending = ack_pending | credit_pending
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
        m.d.sync += [urgent_ctrl.eq(nak_pending | (update_pending & flags["ack_due"]) | flags["refresh_due"]),
                     ctrl_pending.eq(update_pending), replaying.eq(send_seq != next_seq), rewound.eq(0)]
        with m.If(~busy & ~rewound):
            m.d.sync += Assert(replaying == (send_seq != next_seq), "link layer: replaying disagrees")
        with m.If(starting_data):
            m.d.sync += Assert(send_seq == next_seq, "link layer: a new frame while replaying")

        def rewind(seq):
            """Replay from ``seq``; the sender waits a cycle for ``replaying`` to follow."""
            return [rewound.eq(1), send_seq.eq(seq)]

        _saturating_increment(m, ctrl_timer, cfg.refresh_interval)  # reset below when one starts

        def start_frame(new_mode):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(K_SOF)]
            m.d.sync += [busy.eq(1), index.eq(1), mode.eq(new_mode)]

        with m.If(~busy):
            m.d.sync += [ctrl_header.eq(Cat(Const(KIND_CTRL, KIND_BITS), nak_pending, (expected - 1)[:S])),
                         data_header.eq(Cat(Const(KIND_DATA, KIND_BITS), grant, next_seq)),
                         ctrl_word.eq(advertised)]
            with m.Switch(grant):
                for c in range(N):
                    with m.Case(c):
                        m.d.sync += data_word.eq(staged[c])
        with m.Elif(index != 1):
            m.d.sync += [ctrl_word.eq(ctrl_word[W:]), data_word.eq(data_word[W:])]

        with m.If(busy):
            last = index == frame_payload + 2
            with m.If(index == 1):
                m.d.comb += emit.data.eq(Mux(mode == TxMode.REPLAY, replay_read.data,
                                             Mux(mode == TxMode.CTRL, ctrl_header, data_header)))
                with m.If(mode == TxMode.REPLAY):
                    with m.Switch(replay_read.data[KIND_BITS:KIND_BITS + CB]):
                        for c in range(N):
                            with m.Case(c):
                                m.d.sync += frame_payload.eq(payload_flits[c])
            with m.Elif(~last):
                m.d.comb += emit.data.eq(Mux(mode == TxMode.REPLAY, replay_read.data,
                                             Mux(mode == TxMode.CTRL, ctrl_word[:W], data_word[:W])))
            with m.Else():
                m.d.comb += crc_slot.eq(1)  # the CRC goes in on the way out
                m.d.sync += busy.eq(0)
            m.d.comb += [crc_start.eq(index == 1), crc_valid.eq(~last),
                         replay_write.addr.eq(Cat((index - 1)[:index_bits], frame_seq[:slot_bits])),
                         replay_write.data.eq(emit.data),
                         replay_write.en.eq((mode == TxMode.DATA) & ~last)]
            m.d.sync += index.eq(index + 1)
        with m.Elif(state == TrainState.TRAIN):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(K_TS1)]
        with m.Elif(state == TrainState.CONFIRM):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(K_TS2)]
            _saturating_increment(m, said, cfg.train_count)
        with m.Elif(rewound):
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(K_IDLE)]
        with m.Elif(~idle_due & urgent_ctrl | ~idle_due & ~replaying & ~any_eligible & ctrl_pending):
            start_frame(TxMode.CTRL)
            m.d.comb += starting_ctrl.eq(1)
            m.d.sync += [frame_payload.eq(cfg.ctrl_payload_flits), nak_pending.eq(0), ack_pending.eq(0),
                         credit_pending.eq(0), ctrl_timer.eq(0)]
        with m.Elif(~idle_due & replaying):
            start_frame(TxMode.REPLAY)
            m.d.sync += [frame_seq.eq(send_seq), send_seq.eq(send_seq + 1)]
            increment("frames_replayed")
        with m.Elif(~idle_due & any_eligible):
            start_frame(TxMode.DATA)
            m.d.comb += starting_data.eq(1)
            m.d.sync += [frame_seq.eq(next_seq), next_seq.eq(next_seq + 1), send_seq.eq(next_seq + 1),
                         last_grant.eq(grant)]
            with m.Switch(grant):
                for c in range(N):
                    with m.Case(c):
                        m.d.sync += [staged_valid[c].eq(0), words_sent[c].eq(words_sent[c] + 1)]
            m.d.sync += [frame_payload.eq(granted_flits),
                         Assert(granted_flits == Array(payload_flits)[grant], "link layer: the frame length is another channel's")]
            increment("frames_sent")
        with m.Else():
            m.d.comb += [emit.ctrl.eq(1), emit.data.eq(K_IDLE)]

        m.d.comb += emitting_idle.eq(emit.ctrl & (emit.data == K_IDLE))
        with m.If(emitting_idle):
            m.d.sync += since_idle.eq(0)
        with m.Else():
            _saturating_increment(m, since_idle, cfg.idle_interval)
        # Set after the clears above: an update arriving while a control frame starts is kept
        # (an ACK lost so waited for the next refresh, 512 cycles, as long as the partner's
        # replay timeout, which then replayed frames that had arrived).
        with m.If(Cat(taken).any()):
            m.d.sync += credit_pending.eq(1)
        with m.If(ack_request):
            m.d.sync += ack_pending.eq(1)
        with m.If(nak_request):
            m.d.sync += nak_pending.eq(1)

        # ---- acknowledgements from the partner ---------------------------------------------
        ctrl_payload_start = (max_flits - cfg.ctrl_payload_flits) * W
        # Registered: the frame check and the window update are each a cycle's logic. The
        # window's differences are registers too, loaded from the next value of ``oldest`` (the
        # subtractions in front of the comparisons that gate the replay timer's enable were an
        # ECP5-85 node's worst link paths at 125 MHz).
        ack_valid = Signal()
        ack_seq = Signal(S)
        nak = Signal()
        acked_seq = header[KIND_BITS + 1:KIND_BITS + 1 + S]
        m.d.sync += [ack_valid.eq(ctrl_ok), ack_seq.eq(acked_seq), nak.eq(header[KIND_BITS])]
        newly_acked = Signal(S, init=1)  # ack_seq + 1 - oldest
        acknowledged = Signal()  # the registered ACK moves ``oldest``
        oldest_next = Mux(acknowledged, ack_seq + 1, oldest)
        m.d.sync += [newly_acked.eq(acked_seq + 1 - oldest_next),
                     in_flight.eq(Mux(starting_data, next_seq + 1 - oldest_next, next_seq - oldest_next)),
                     Assert(newly_acked == (ack_seq + 1 - oldest)[:S], "link layer: newly_acked disagrees"),
                     Assert(in_flight == (next_seq - oldest)[:S], "link layer: in_flight disagrees")]
        with m.If(state == TrainState.UP):
            with m.If(in_flight != 0):
                _saturating_increment(m, replay_timer, cfg.replay_timeout)
            with m.If(replay_timer == cfg.replay_timeout):
                m.d.sync += [*rewind(oldest), replay_timer.eq(0)]
                increment("replays")
        with m.Else():
            # Held at zero until the link is up, from the state register alone: zeroed on the
            # way into UP, the training's decision ran into the timer's reset (node 0's worst
            # path at 125 MHz, 1.3 ns logic, 7.6 ns routing).
            m.d.sync += replay_timer.eq(0)
        with m.If(ctrl_ok):
            for c in range(N):
                limit = body[ctrl_payload_start + c * K:ctrl_payload_start + (c + 1) * K]
                m.d.sync += credit_limit[c].eq(limit)
        with m.If(ack_valid):
            with m.If(newly_acked <= in_flight):  # not a stale ACK
                m.d.comb += acknowledged.eq(1)
                m.d.sync += oldest.eq(ack_seq + 1)
                with m.If(newly_acked != 0):
                    m.d.sync += replay_timer.eq(0)
                with m.If(nak):
                    m.d.sync += [*rewind(ack_seq + 1), replay_timer.eq(0)]
                    increment("replays")
                with m.Elif((send_seq - oldest)[:S] < newly_acked):  # replaying what is now acked
                    m.d.sync += rewind(ack_seq + 1)
        with m.If(entering_up):
            # Re-trained: replay whatever was unacknowledged and tell the partner where we are.
            m.d.sync += [*rewind(oldest), ack_pending.eq(1), credit_pending.eq(1)]

        for name, event in events.items():
            counter, counted = getattr(self.counters, name), Signal(name=f"{name}_counted")
            m.d.sync += [counted.eq(event), counter.eq(counter + counted)]
        return m

