"""ACK tracking: the sender's window of unacknowledged frames, moved by the partner's ACKs,
and when to go back and replay (a NAK, the replay timeout, an ACK past the replay, retraining)."""

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..base.counter import saturating_increment
from .protocol import LinkConfig
from .signatures import ReplayWindowSignature, ctrl_frame_stream


class AckTracker(wiring.Component):
    """The oldest unacknowledged frame against the sender's sequence numbers (``window``):
    ``window.open`` while fewer than ``replay_frames`` frames are unacknowledged, and
    ``window.rewind`` to make the sender replay. ``replay`` pulses (an event for the counters)
    for a NAK or a replay timeout. While ``link_up`` the replay timer runs with frames
    outstanding; ``entering_up`` (re-trained) replays everything unacknowledged.
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "ctrl": In(ctrl_frame_stream(config)),
            "link_up": In(1),
            "entering_up": In(1),
            "window": In(ReplayWindowSignature(config)),
            "replay": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        S = cfg.seq_bits
        window = self.window
        next_seq, send_seq = window.next_seq, window.send_seq
        oldest = window.oldest  # oldest unacknowledged frame
        in_flight = Signal(S)  # next_seq - oldest, a register (below)
        replay_timer = Signal(range(cfg.replay_timeout + 1))
        m.d.comb += window.open.eq(in_flight < cfg.replay_frames)

        def rewind(seq):
            m.d.comb += [window.rewind.valid.eq(1), window.rewind.payload.eq(seq)]

        # Registered: the frame check and the window update are each a cycle's logic. The
        # window's differences are registers too, loaded from the next value of ``oldest`` (the
        # subtractions in front of the comparisons that gate the replay timer's enable were an
        # ECP5-85 node's worst link paths at 125 MHz).
        ack_valid = Signal()
        ack_seq = Signal(S)
        nak = Signal()
        acked_seq = self.ctrl.payload.ack_seq
        m.d.sync += [ack_valid.eq(self.ctrl.valid), ack_seq.eq(acked_seq), nak.eq(self.ctrl.payload.nak)]
        newly_acked = Signal(S, init=1)  # ack_seq + 1 - oldest
        acknowledged = Signal()  # the registered ACK moves ``oldest``
        oldest_next = Mux(acknowledged, ack_seq + 1, oldest)
        m.d.sync += [newly_acked.eq(acked_seq + 1 - oldest_next),
                     in_flight.eq(Mux(window.starting, next_seq + 1 - oldest_next, next_seq - oldest_next)),
                     Assert(newly_acked == (ack_seq + 1 - oldest)[:S], "link layer: newly_acked disagrees"),
                     Assert(in_flight == (next_seq - oldest)[:S], "link layer: in_flight disagrees")]
        with m.If(self.link_up):
            with m.If(in_flight != 0):
                saturating_increment(m, replay_timer, cfg.replay_timeout)
            with m.If(replay_timer == cfg.replay_timeout):
                m.d.sync += replay_timer.eq(0)
                rewind(oldest)
                m.d.comb += self.replay.eq(1)
        with m.Else():
            # Held at zero until the link is up, from the state register alone: zeroed on the
            # way into UP, the training's decision ran into the timer's reset (node 0's worst
            # path at 125 MHz, 1.3 ns logic, 7.6 ns routing).
            m.d.sync += replay_timer.eq(0)
        with m.If(ack_valid):
            with m.If(newly_acked <= in_flight):  # not a stale ACK
                m.d.comb += acknowledged.eq(1)
                m.d.sync += oldest.eq(ack_seq + 1)
                with m.If(newly_acked != 0):
                    m.d.sync += replay_timer.eq(0)
                with m.If(nak):
                    m.d.sync += replay_timer.eq(0)
                    rewind(ack_seq + 1)
                    m.d.comb += self.replay.eq(1)
                with m.Elif((send_seq - oldest)[:S] < newly_acked):  # replaying what is now acked
                    rewind(ack_seq + 1)
        with m.If(self.entering_up):
            # Re-trained: replay whatever was unacknowledged.
            rewind(oldest)
        return m
