"""The link layer's parts (hw/link/layer.py wires them), each alone against the reference model
(hw/link/protocol.py) or the contract docs/link_protocol.md states for it."""

import random
from itertools import groupby

from hw.link.ack_tracker import AckTracker
from hw.link.arbiter import ChannelArbiter
from hw.link.credits import ReceiveBuffers, SendCredits
from hw.link.protocol import (K_IDLE, K_SOF, K_TS1, K_TS2, CtrlFrame, DataFrame, LinkConfig, encode_ctrl,
                              encode_data, parse_line)
from hw.link.receiver import LinkReceiver
from hw.link.sender import LinkSender
from hw.link.signatures import channel_ports
from hw.link.training import LinkTraining, TrainState
from sim.link import DEFAULT_CHANNELS
from sim.testbench import simulate

CONFIG = LinkConfig(DEFAULT_CHANNELS, receive_depth=4, replay_frames=4, replay_timeout=40, train_count=3,
                    train_timeout=30)


def test_training_needs_locked_ts_then_ts2_both_ways_and_retrains_on_two_ts1_or_lost_lock():
    dut = LinkTraining(CONFIG)
    seen = []

    async def flits(ctx, code, cycles, ts2_sent=0, locked=1):
        """Receive ``code`` for ``cycles``; note (state after, entering_up, retrain) each cycle."""
        ctx.set(dut.locked, locked)
        ctx.set(dut.ts2_sent, ts2_sent)
        ctx.set(dut.rx.valid, 1)
        ctx.set(dut.rx.payload.ctrl, 1)
        ctx.set(dut.rx.payload.data, code)
        for _ in range(cycles):
            _, _, entering, retrain = await ctx.tick().sample(dut.entering_up, dut.retrain)
            seen.append((ctx.get(dut.state), entering, retrain))

    async def bench(ctx):
        T, C, U = TrainState.TRAIN, TrainState.CONFIRM, TrainState.UP
        await flits(ctx, K_TS1, 6, locked=0)             # heard, but not locked
        assert {state for state, _, _ in seen} == {T}
        seen.clear()
        await flits(ctx, K_TS1, 1)                       # heard three TS1 already: to CONFIRM
        await flits(ctx, K_TS2, 5)                       # heard, but no TS2 sent: stays
        await flits(ctx, K_TS1, 4, ts2_sent=1)           # three sent (a TS1 keeps the count): UP
        assert seen == [(C, 0, 0)] * 9 + [(U, 1, 0)]
        seen.clear()
        await flits(ctx, K_IDLE, 3)
        await flits(ctx, K_TS1, 1)                       # one TS1 alone: a flipped IDLE
        await flits(ctx, K_IDLE, 3)
        await flits(ctx, K_TS1, 2)                       # two in a row: the partner retrains
        assert seen == [(U, 0, 0)] * 8 + [(T, 0, 1)]
        seen.clear()
        await flits(ctx, K_TS2, 4)                       # back up, then a loss of lock
        await flits(ctx, K_TS2, 4, ts2_sent=1)
        await flits(ctx, K_IDLE, 1, locked=0)
        assert seen[-2:] == [(U, 1, 0), (T, 0, 1)]
        seen.clear()
        await flits(ctx, K_TS1, 4)
        await flits(ctx, K_TS2, CONFIG.train_timeout + 1)  # the partner never hears us: timeout
        assert seen[3] == (C, 0, 0) and seen[-1] == (T, 0, 0)
        assert {state for state, _, _ in seen[3:-1]} == {C}

    simulate(dut, bench, deadline=500)


def test_receiver_accepts_in_order_naks_a_gap_or_damage_once_and_acks_duplicates():
    dut = LinkReceiver(CONFIG)
    rng = random.Random(5)
    words = [(c, rng.getrandbits(width)) for c, (_, width) in enumerate(CONFIG.channels)] * 2
    frames = [encode_data(CONFIG, c, seq, [word]) for seq, (c, word) in enumerate(words)]
    damaged = list(frames[2])
    damaged[2] = (0, damaged[2][1] ^ 0x0040)
    events = []

    async def watch(ctx):
        ports = channel_ports(CONFIG, dut.words)
        async for _, _, *sampled in ctx.tick().sample(dut.acks.ack, dut.acks.nak, dut.frame_received,
                                                      dut.frame_rejected, dut.ctrl.valid, dut.ctrl.payload,
                                                      *(p.valid for p in ports), *(p.payload for p in ports)):
            ack, nak, received, rejected, ctrl_valid, ctrl = sampled[:6]
            valids, payloads = sampled[6:6 + len(ports)], sampled[6 + len(ports):]
            events.extend(name for name, flag in (("received", received), ("ack", ack), ("rejected", rejected),
                                                  ("nak", nak)) if flag)
            if ctrl_valid:
                events.append(CtrlFrame(ctrl.ack_seq, bool(ctrl.nak), tuple(int(x) for x in ctrl.credit_limits)))
            events.extend(DataFrame(c, None, (int(payloads[c]),)) for c in range(len(ports)) if valids[c])

    async def bench(ctx):
        ctx.set(dut.link_up, 1)

        async def line(*frames):
            for flits in frames:
                for ctrl, data in flits:
                    ctx.set(dut.rx.valid, 1)
                    ctx.set(dut.rx.payload.ctrl, ctrl)
                    ctx.set(dut.rx.payload.data, data)
                    await ctx.tick()
            ctx.set(dut.rx.payload.ctrl, 1)
            ctx.set(dut.rx.payload.data, K_IDLE)
            await ctx.tick().repeat(3)
            got = list(events)
            events.clear()
            return got

        def word(seq):
            return DataFrame(words[seq][0], None, (words[seq][1],))

        assert await line(frames[0], frames[1]) == ["received", "ack", word(0), "received", "ack", word(1)]
        # Frame 2 damaged: rejected, a NAK; 3 after the gap: no second NAK for the same frame.
        assert await line(damaged, frames[3]) == ["rejected", "nak"]
        assert ctx.get(dut.acks.expected) == 2
        assert await line(frames[1]) == ["ack"]                  # a duplicate: our ACK was lost
        assert await line(frames[2], frames[3]) == ["received", "ack", word(2), "received", "ack", word(3)]
        assert await line(frames[5]) == ["nak"]                  # a gap: a NAK for 4
        assert await line(encode_ctrl(CONFIG, 9, True, (1, 2, 3))) == [CtrlFrame(9, True, (1, 2, 3))]
        assert await line(frames[4][:-1]) == ["rejected"]       # a lost flit (NAK already out)
        assert await line(frames[4]) == ["received", "ack", word(4)]
        ctx.set(dut.link_up, 0)                                  # training: nothing is taken
        assert await line(frames[5]) == []

    simulate(dut, bench, processes=[watch], deadline=500)


def test_receive_buffers_keep_order_and_advertise_the_words_taken():
    dut = ReceiveBuffers(CONFIG)
    rng = random.Random(2)
    sent = {c: [rng.getrandbits(w) for _ in range(3 * CONFIG.receive_depth)] for c, (_, w) in enumerate(CONFIG.channels)}
    got = {c: [] for c in sent}

    async def bench(ctx):
        ins, outs = channel_ports(CONFIG, dut.words), channel_ports(CONFIG, dut.rx)
        assert [ctx.get(dut.credit_limits[c]) for c in sent] == [CONFIG.receive_depth] * len(sent)
        written = {c: 0 for c in sent}
        taken = {c: 0 for c in sent}
        freed_seen = 0
        for _ in range(400):
            for c, port in enumerate(ins):
                # The partner keeps to the credits: a word only while the limit allows it.
                limit = ctx.get(dut.credit_limits[c])
                can = (limit - written[c]) % 2 ** CONFIG.credit_bits != 0 and written[c] < len(sent[c])
                write = can and rng.random() < 0.6
                ctx.set(port.valid, write)
                ctx.set(port.payload, sent[c][written[c]] if write else 0)
                written[c] += write
            for port in outs:
                ctx.set(port.ready, rng.random() < 0.5)
            _, _, freed, *sampled = await ctx.tick().sample(
                dut.freed, *(p.valid for p in outs), *(p.ready for p in outs), *(p.payload for p in outs))
            freed_seen += freed
            n = len(outs)
            for c in range(n):
                if sampled[c] and sampled[n + c]:
                    got[c].append(int(sampled[2 * n + c]))
                    taken[c] += 1
        await ctx.tick().repeat(2)
        # Freed a cycle after taken: every limit is the words taken plus the depth.
        for c in sent:
            assert ctx.get(dut.credit_limits[c]) == (taken[c] + CONFIG.receive_depth) % 2 ** CONFIG.credit_bits
        assert 0 < freed_seen <= sum(taken.values())

    simulate(dut, bench, deadline=1000)
    assert got == sent


def test_send_credits_count_words_sent_against_the_limits_received():
    config = LinkConfig(DEFAULT_CHANNELS, receive_depth=4, burst_words=4)
    dut = SendCredits(config)
    depth, wrap = config.receive_depth, 2 ** config.credit_bits

    async def send(ctx, channel, words):
        """A frame of ``words`` words of ``channel``."""
        ctx.set(dut.sent.payload.channel, channel)
        ctx.set(dut.sent.payload.words, words)
        ctx.set(dut.sent.valid, 1)
        await ctx.tick()
        ctx.set(dut.sent.valid, 0)

    def available(ctx):
        return [ctx.get(dut.available[c]) for c in range(3)]

    async def limits(ctx, values):
        ctx.set(dut.ctrl.payload.credit_limits, [v % wrap for v in values])
        ctx.set(dut.ctrl.valid, 1)
        await ctx.tick()
        ctx.set(dut.ctrl.valid, 0)

    async def bench(ctx):
        assert available(ctx) == [depth] * 3                     # every buffer empty at the start
        await send(ctx, 1, depth - 1)
        assert available(ctx) == [depth, 1, depth]
        await send(ctx, 1, 1)
        assert available(ctx) == [depth, 0, depth]               # psum's buffer is full
        await limits(ctx, (depth, depth + 2, depth))
        assert available(ctx) == [depth, 2, depth]              # two taken out
        await send(ctx, 1, 2)
        await send(ctx, 0, 1)
        await send(ctx, 0, depth - 1)
        assert available(ctx) == [0, 0, depth]
        # Cumulative limits wrap: around the counter's range and back, nothing changes.
        for _ in range(wrap // depth):
            await limits(ctx, (ctx.get(dut.ctrl.payload.credit_limits[0]) + depth, depth + 2, depth))
            assert available(ctx) == [depth, 0, depth]
            await send(ctx, 0, depth)
        assert available(ctx) == [0, 0, depth]

    simulate(dut, bench, deadline=500)


class _Window:
    """The sender's side of the ACK tracker's window, in Python: frames started and rewinds."""

    def __init__(self, dut):
        self.dut, self.next_seq, self.send_seq = dut, 0, 0
        self.rewinds, self.replays = [], 0

    async def cycle(self, ctx, start=False, ack=None, nak=False):
        """One cycle; ``start`` a new frame, ``ack`` a control frame received that ACKs (or NAKs)
        it. Returns the window's ``open`` as it stood."""
        window = self.dut.window
        ctx.set(window.next_seq, self.next_seq)
        ctx.set(window.send_seq, self.send_seq)
        ctx.set(window.starting, start)
        ctx.set(self.dut.ctrl.valid, ack is not None)
        ctx.set(self.dut.ctrl.payload.ack_seq, 0 if ack is None else ack % 2 ** CONFIG.seq_bits)
        ctx.set(self.dut.ctrl.payload.nak, nak)
        _, _, opened, rewind, seq, replay = await ctx.tick().sample(
            window.open, window.rewind.valid, window.rewind.payload, self.dut.replay)
        if start:
            self.next_seq += 1
            self.send_seq = self.next_seq
        if rewind:
            self.rewinds.append(int(seq))
            self.send_seq = int(seq)
        self.replays += replay
        return opened

    async def idle(self, ctx, cycles):
        for _ in range(cycles):
            await self.cycle(ctx)


def test_ack_tracker_window_naks_timeout_and_stale_acks():
    dut = AckTracker(CONFIG)
    window = _Window(dut)

    async def bench(ctx):
        ctx.set(dut.link_up, 1)
        for _ in range(CONFIG.replay_frames):                    # the window fills
            assert await window.cycle(ctx, start=True)
            await window.cycle(ctx)
        await window.idle(ctx, 1)
        assert not await window.cycle(ctx)
        await window.cycle(ctx, ack=1)                           # 0 and 1 acknowledged: room again
        await window.idle(ctx, 2)
        assert await window.cycle(ctx)
        await window.cycle(ctx, ack=5)                           # stale: beyond what was sent
        await window.cycle(ctx, ack=1, nak=True)                 # resend from 2
        await window.idle(ctx, 2)
        assert (window.rewinds, window.replays) == ([2], 1)
        # The replay timer: frames 2 and 3 outstanding, no ACK progress for replay_timeout cycles.
        await window.idle(ctx, CONFIG.replay_timeout)
        assert (window.rewinds, window.replays) == ([2, 2], 2)
        # About to replay 2 when an ACK of 2 arrives: the replay skips to 3 (no replay counted).
        await window.cycle(ctx, ack=2)
        await window.idle(ctx, 2)
        assert (window.rewinds, window.replays) == ([2, 2, 3], 2)
        ctx.set(dut.link_up, 0)                                  # no timeout while training
        await window.idle(ctx, 2 * CONFIG.replay_timeout)
        ctx.set(dut.entering_up, 1)                              # re-trained: replay from 3
        await window.cycle(ctx)
        ctx.set(dut.entering_up, 0)
        assert (window.rewinds, window.replays) == ([2, 2, 3, 3], 2)
        await window.cycle(ctx, ack=3)                           # all acknowledged (the replay skips)
        ctx.set(dut.link_up, 1)
        await window.idle(ctx, 2 * CONFIG.replay_timeout)        # nothing outstanding: no timeout
        assert (window.rewinds, window.replays) == ([2, 2, 3, 3, 4], 2)

    simulate(dut, bench, deadline=1000)


def test_arbiter_grants_bursts_round_robin_of_the_words_with_credit_while_the_window_is_open():
    config = LinkConfig(DEFAULT_CHANNELS, burst_words=3)
    dut = ChannelArbiter(config)
    rng = random.Random(4)
    offered = {c: [rng.getrandbits(w) for _ in range(4)] for c, (_, w) in enumerate(config.channels)}
    credits = [4, 2, 4]                           # psum: credits for two words
    taken = []                                    # (channel, words) per frame

    async def feed(ctx):
        """Every channel's words, each offered until taken (the node's side)."""
        ports = channel_ports(config, dut.tx)
        queues = {c: list(words) for c, words in offered.items()}
        while any(queues.values()):
            for c, port in enumerate(ports):
                ctx.set(port.valid, bool(queues[c]))
                ctx.set(port.payload, queues[c][0] if queues[c] else 0)
            _, _, *handshakes = await ctx.tick().sample(*(p.valid for p in ports), *(p.ready for p in ports))
            for c in range(len(ports)):
                if handshakes[c] and handshakes[len(ports) + c]:
                    queues[c].pop(0)
        for port in ports:
            ctx.set(port.valid, 0)

    async def take(ctx, cycles):
        """A sender (with the partner's credits) that takes the grant when ready: its first word
        at the start, the others a flit apart after the header, then the CRC."""
        for _ in range(cycles):
            ctx.set(dut.available, credits)
            if not ctx.get(dut.ready):
                await ctx.tick()
                continue
            grant, words = ctx.get(dut.grant), ctx.get(dut.words)
            assert ctx.get(dut.word_flits) == config.payload_flits(grant)
            assert ctx.get(dut.flits) == words * config.payload_flits(grant)
            credits[grant] -= words
            ctx.set(dut.select, grant)
            got = []
            for k in range(words):
                got.append(ctx.get(dut.word))
                ctx.set(dut.take, k == 0)
                ctx.set(dut.pop, 1)
                await ctx.tick()
                ctx.set(dut.pop, 0)
                ctx.set(dut.take, 0)
                ctx.set(dut.available, credits)
                if k == 0:
                    await ctx.tick().repeat(2)
            taken.append((grant, got))
            await ctx.tick().repeat(2)

    async def bench(ctx):
        ctx.set(dut.window_open, 1)
        await take(ctx, 60)
        assert {c: sum(len(ws) for g, ws in taken if g == c) for c in range(3)} == {0: 4, 1: 2, 2: 4}
        ctx.set(dut.window_open, 0)               # the replay window is full
        credits[1] += 2
        await take(ctx, 20)
        assert sum(len(ws) for _, ws in taken) == 10
        ctx.set(dut.window_open, 1)
        await take(ctx, 40)

    simulate(dut, bench, processes=[feed], deadline=500)
    # Round robin from the channel after the last (0 at reset); each frame takes what waits (a
    # word alone at first, as it arrives: nothing waits for a burst to fill), at most three.
    assert [c for c, _ in taken][:3] == [1, 2, 0]
    assert all(1 <= len(ws) <= 3 for _, ws in taken) and max(len(ws) for _, ws in taken) > 1
    assert taken[-1][0] == 1
    for c, words in offered.items():
        assert [word for channel, ws in taken if channel == c for word in ws] == words


def _line_frames(config, line):
    return [frame for what, frame in parse_line(config, line) if what == "frame"]


def test_sender_trains_frames_words_replays_identically_and_sends_acks_and_credits():
    dut = LinkSender(CONFIG)
    rng = random.Random(9)
    words = [(c, rng.getrandbits(width)) for c, (_, width) in enumerate(CONFIG.channels)]
    late_word = rng.getrandbits(CONFIG.channels[1][1])
    line = []

    async def record(ctx):
        async for _, _, ctrl, data in ctx.tick().sample(dut.line.ctrl, dut.line.data):
            line.append((int(ctrl), int(data)))

    async def bench(ctx):
        window = dut.window
        ctx.set(dut.available, [4, 4, 4])
        ctx.set(window.open, 1)
        ctx.set(dut.credit_limits, [4, 5, 6])
        ctx.set(dut.acks.expected, 7)
        ctx.set(dut.state, TrainState.TRAIN)
        await ctx.tick().repeat(4)
        ctx.set(dut.state, TrainState.CONFIRM)
        ts2 = 0
        for _ in range(4):
            ts2 += (await ctx.tick().sample(dut.ts2_sent))[2]
        assert ts2 == 4
        ctx.set(dut.state, TrainState.UP)
        for c, word in words:                                    # one word per channel
            port = channel_ports(CONFIG, dut.tx)[c]
            ctx.set(port.payload, word)
            ctx.set(port.valid, 1)
            await ctx.tick()
            ctx.set(port.valid, 0)
        await ctx.tick().repeat(40)
        assert ctx.get(window.next_seq) == ctx.get(window.send_seq) == 3
        # Go back to frame 1 (a rewind from the ACK tracker): 1 and 2 again, an IDLE first.
        ctx.set(window.rewind.payload, 1)
        ctx.set(window.rewind.valid, 1)
        await ctx.tick()
        ctx.set(window.rewind.valid, 0)
        await ctx.tick().repeat(30)
        for request, expected, limits in ((dut.acks.nak, 7, [4, 5, 6]), (dut.acks.ack, 8, [4, 5, 6]),
                                          (dut.credits_freed, 8, [5, 5, 6])):
            ctx.set(dut.acks.expected, expected)                 # one control frame per request
            ctx.set(dut.credit_limits, limits)
            ctx.set(request, 1)
            await ctx.tick()
            ctx.set(request, 0)
            await ctx.tick().repeat(20)
        ctx.set(dut.available, [4, 0, 4])                        # psum has no credit: its word waits
        psum = channel_ports(CONFIG, dut.tx)[1]
        ctx.set(psum.payload, late_word)
        ctx.set(psum.valid, 1)
        await ctx.tick()
        ctx.set(psum.valid, 0)
        await ctx.tick().repeat(30)
        assert ctx.get(window.next_seq) == 3
        ctx.set(dut.available, [4, 4, 4])
        await ctx.tick().repeat(30)

    simulate(dut, bench, processes=[record], deadline=500)
    # Before the first frame, after the line registers' reset values: TS1 and TS2 while the
    # training asked for them, then IDLE.
    before = [flit for flit in line[:line.index((1, K_SOF))] if flit != (0, 0)]
    assert [(flit, len(list(run))) for flit, run in groupby(before)][:2] == [((1, K_TS1), 4), ((1, K_TS2), 4)]
    assert set(before[8:]) == {(1, K_IDLE)}
    frames = _line_frames(CONFIG, line)
    data_frames = [DataFrame(c, seq, (word,)) for seq, (c, word) in enumerate(words)]
    assert frames == [*data_frames, *data_frames[1:], CtrlFrame(6, True, (4, 5, 6)), CtrlFrame(7, False, (4, 5, 6)),
                      CtrlFrame(7, False, (5, 5, 6)), DataFrame(1, 3, (late_word,))]
    # Bit for bit the reference encoding, the replays too.
    text = "".join(map(str, line))
    for frame in data_frames:
        assert text.count("".join(map(str, encode_data(CONFIG, frame.channel, frame.seq, frame.words)))) \
            == (1 if frame.seq == 0 else 2)
    assert "".join(map(str, encode_ctrl(CONFIG, 6, True, (4, 5, 6)))) in text
