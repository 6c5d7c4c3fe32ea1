"""The sender's channel arbiter: each channel's next words in a queue of its own, and a
registered round-robin grant among the channels with a word, a credit and room in the replay
window, with the words of the burst it may start."""

from amaranth.hdl import Array, Assert, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .protocol import LinkConfig
from .signatures import ChannelsSignature, channel_ports, credit_limits_layout


class ChannelArbiter(wiring.Component):
    """Takes up to ``burst_words`` words of each channel from ``tx`` into a queue of its own;
    ``ready`` with ``grant``, the next channel in round-robin order after the last one taken
    with a word waiting and ``available`` credits while ``window_open``, ``words``: as many of
    its waiting words as it has credits for, up to a burst (never more: a frame starts with the
    words there are), ``word_flits`` the payload flits of one of them and ``flits`` of all.
    ``take``: a frame of ``grant`` starts. ``word`` is the next word of channel ``select``,
    ``pop`` takes it from its queue.

    Every output but ``word`` is a register, loaded a cycle after its inputs: late to open
    only, since a frame keeps the sender busy for three cycles after it takes one and the words
    of a burst leave its queue before its last two flits.
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "tx": In(ChannelsSignature(config.channels)),
            "available": In(credit_limits_layout(config)),
            "window_open": In(1),
            "take": In(1),
            "select": In(config.channel_bits),
            "pop": In(1),
            "ready": Out(1),
            "grant": Out(config.channel_bits),
            "words": Out(range(config.burst_words + 1)),
            "word_flits": Out(range(config.max_word_flits + 1)),
            "flits": Out(range(config.burst_words * config.max_word_flits + 1)),
            "word": Out(config.max_word_flits * config.lane_width),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        N, B = len(cfg.channels), cfg.burst_words
        tx_ports = channel_ports(cfg, self.tx)
        grant = self.grant
        # A queue of a burst's words per channel: the node sees its room as its ready, and a
        # frame takes words from its output register, so the credit, window and arbitration
        # logic below reaches neither the node's handshakes nor a buffer's read enable (through
        # a two-word FIFO's read, 7.9 ns of routing, the CI bitstream's worst path). The words of
        # a burst follow each other out as fast as the sender sends them (one a flit at most).
        queues = []
        for c, (name, width) in enumerate(cfg.channels):
            queue = m.submodules[f"queue_{name}"] = SyncFIFOBuffered(width=width, depth=B)
            queues.append(queue)
            m.d.comb += [queue.w_data.eq(tx_ports[c].payload), queue.w_en.eq(tx_ports[c].valid),
                         tx_ports[c].ready.eq(queue.w_rdy),
                         queue.r_en.eq(self.pop & (self.select == c))]
        # The last channel's word also for the select values that name none: one multiplexer
        # input fewer.
        with m.Switch(self.select):
            for c in range(N - 1):
                with m.Case(c):
                    m.d.comb += self.word.eq(queues[c].r_data)
            with m.Default():
                m.d.comb += self.word.eq(queues[N - 1].r_data)

        last_grant = Signal(range(N))
        # Each channel's credits, a cycle late like ``room`` below (the count compared into the
        # staged word's valid was the Versa node 1's worst path, 7.8 ns of routing).
        available = Signal.like(self.available)
        m.d.sync += available.eq(self.available)
        words = [Mux(queues[c].r_level < available[c], queues[c].r_level, available[c]) for c in range(N)]
        eligible = [w != 0 for w in words]
        # The replay window's room, a cycle late (registered: the subtraction and compare ran into
        # the node's tx buffer's clock enable, 15 ns of routing on a one-board chain of speed
        # grade 6). A DATA frame starts at most every fourth cycle, and the cycle after one starts
        # is busy, by when ``room`` has seen its sequence number (and ``available`` its words).
        room = Signal()
        m.d.sync += room.eq(self.window_open)
        # The arbitration's result, registered too (from the staged valids through the round
        # robin into the start decision and back into the valids' and counts' enables: an
        # ECP5-85 node's worst path at 125 MHz, six LUTs over 7.5 ns of routing): by the end of
        # a frame's busy cycles the registered grant has seen the emptied queue, the new count and
        # ``last_grant``. The granted burst's lengths are loaded with the grant.
        m.d.sync += self.ready.eq(Cat(eligible).any() & room)
        with m.Switch(last_grant):
            for last in range(N):
                with m.Case(last):
                    order = [(last + 1 + k) % N for k in range(N)]
                    for c in reversed(order):
                        with m.If(eligible[c]):
                            flits = cfg.payload_flits(c)
                            m.d.sync += [grant.eq(c), self.words.eq(words[c]), self.word_flits.eq(flits),
                                         self.flits.eq(Array(k * flits for k in range(B + 1))[words[c]])]
        with m.If(self.take):
            m.d.sync += [last_grant.eq(grant),
                         Assert((self.words != 0) & (self.words <= Array(q.r_level for q in queues)[grant])
                                & (self.words <= self.available[grant]) & room, "link layer: a stale grant")]
        return m
