"""The sender's channel arbiter: each channel's next word in a register, and a registered
round-robin grant among the channels with a word, a credit and room in the replay window."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .protocol import LinkConfig
from .signatures import ChannelsSignature, channel_ports


class ChannelArbiter(wiring.Component):
    """Takes a word of each channel from ``tx`` into a register of its own (``waiting`` bit c:
    channel c's register is full); ``ready`` with ``grant``, the next channel in round-robin
    order after the last one taken whose word waits with a ``credit`` while ``window_open``,
    its frame's payload ``flits`` and its ``word``. ``take``: a frame of ``grant`` starts, its
    register empties.

    Every output but ``word`` is a register, loaded a cycle after its inputs: late to open
    only, since a frame keeps the sender busy for three cycles after it takes one.
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "tx": In(ChannelsSignature(config.channels)),
            "credit": In(len(config.channels)),
            "window_open": In(1),
            "take": In(1),
            "waiting": Out(len(config.channels)),
            "ready": Out(1),
            "grant": Out(config.channel_bits),
            "flits": Out(range(config.max_payload_flits + 1)),
            "word": Out(config.max_payload_flits * config.lane_width),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        N = len(cfg.channels)
        tx_ports = channel_ports(cfg, self.tx)
        grant, staged_valid = self.grant, self.waiting
        # Each channel's next word waits in a register of the sender's: the node sees that
        # register's emptiness as its ready, and a frame start takes the word from it, so the
        # credit, window and arbitration logic below reaches neither the node's handshakes nor a
        # buffer's read enable (through a two-word FIFO's read, 7.9 ns of routing, the CI
        # bitstream's worst path; before that FIFO, a one-board chain's into an FP engine's
        # enable). A frame takes at least three cycles, so refilled the cycle after a start, a
        # channel keeps its rate.
        staged = [Signal.like(tx_ports[c].payload, name=f"staged_{c}") for c in range(N)]
        for c in range(N):
            m.d.comb += tx_ports[c].ready.eq(~staged_valid[c])
            # Loaded while empty, whatever the node's valid: that valid (from deep in the node)
            # reaches one flip-flop instead of every enable of the word.
            with m.If(~staged_valid[c]):
                m.d.sync += [staged[c].eq(tx_ports[c].payload), staged_valid[c].eq(tx_ports[c].valid)]
        # The last channel's word also for the grant values that name none: one multiplexer
        # input fewer.
        with m.Switch(grant):
            for c in range(N - 1):
                with m.Case(c):
                    m.d.comb += self.word.eq(staged[c])
            with m.Default():
                m.d.comb += self.word.eq(staged[N - 1])

        last_grant = Signal(range(N))
        # Each channel's credit check, a cycle late like ``room`` below (the count compared into
        # the staged word's valid was the Versa node 1's worst path, 7.8 ns of routing).
        has_credit = Signal(N)
        m.d.sync += has_credit.eq(self.credit)
        eligible = staged_valid & has_credit
        # The replay window's room, a cycle late (registered: the subtraction and compare ran into
        # the node's tx buffer's clock enable, 15 ns of routing on a one-board chain of speed
        # grade 6). A DATA frame starts at most every third cycle, and the cycle after one starts
        # is busy, by when ``room`` has seen its sequence number (and ``has_credit`` its count of
        # words sent).
        room = Signal()
        m.d.sync += room.eq(self.window_open)
        # The arbitration's result, registered too (from the staged valids through the round
        # robin into the start decision and back into the valids' and counts' enables: an
        # ECP5-85 node's worst path at 125 MHz, six LUTs over 7.5 ns of routing): by the end of
        # a frame's three busy cycles the registered grant has seen the cleared valid, the new
        # count and ``last_grant``. The granted channel's frame length is loaded with the grant:
        # a copy that feeds the frame length alone, next to it (from ``grant``, which the staged
        # words' select pulls away, node 1's one late input at 125 MHz, 0.7 ns logic and 7.5 ns
        # routing).
        m.d.sync += self.ready.eq(eligible.any() & room)
        with m.Switch(last_grant):
            for last in range(N):
                with m.Case(last):
                    order = [(last + 1 + k) % N for k in range(N)]
                    for c in reversed(order):
                        with m.If(eligible[c]):
                            m.d.sync += [grant.eq(c), self.flits.eq(cfg.payload_flits(c))]
        with m.If(self.take):
            m.d.sync += last_grant.eq(grant)
            with m.Switch(grant):
                for c in range(N):
                    with m.Case(c):
                        m.d.sync += staged_valid[c].eq(0)
        return m
