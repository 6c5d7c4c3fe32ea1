"""The link core against its reference model (hw.link.protocol), layer by layer, and end to end
over the simulation PHY with errors, loss of lock, back-pressure and separate clocks."""

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from hw.link.endpoint import CounterSynchronizer
from hw.link.serdes import CommaAligner
from hw.link.layer import LinkLayer, channel_ports
from hw.link.protocol import (K_IDLE, K_SOF, K_TS1, K_TS2, CtrlFrame, DataFrame, LinkConfig,
                              decode_frame, encode_ctrl, encode_data, frame_efficiency, parse_line,
                              receive_depth, replay_frames, round_trip_cycles)
from hw.link.sim_phy import LaneErrors, SimulatedLane
from sim.link import DEFAULT_CHANNELS, Delivery, run_link

# Short training so the layer-level tests spend their cycles on frames.
QUICK = dict(train_count=4, train_timeout=256)


def test_reference_frames_round_trip_and_reject_any_one_corrupted_flit():
    config = LinkConfig(DEFAULT_CHANNELS, burst_words=4)
    rng = random.Random(3)
    sent = [DataFrame(c, rng.getrandbits(config.seq_bits), tuple(rng.getrandbits(w) for _ in range(1 + c)))
            for c, (_, w) in enumerate(config.channels)]
    frames = [encode_data(config, f.channel, f.seq, f.words) for f in sent]
    assert [len(flits) for flits in frames] == [3 + 4, 3 + 2 * 6, 3 + 3 * 2]
    frames.append(encode_ctrl(config, 5, True, (1, 2, 3)))
    for flits in frames:
        body = [data for _, data in flits[1:]]
        frame = decode_frame(config, body)
        assert frame is not None
        for position in range(len(body)):
            for bit in range(config.lane_width):
                damaged = list(body)
                damaged[position] ^= 1 << bit
                assert decode_frame(config, damaged) is None
        assert decode_frame(config, body[:-2] + body[-1:]) is None  # a lost flit
    assert decode_frame(config, [d for _, d in frames[-1][1:]]) == CtrlFrame(5, True, (1, 2, 3))
    assert [decode_frame(config, [d for _, d in flits[1:]]) for flits in frames[:-1]] == sent
    # A word more or less than the header counts: refused.
    psum = [d for _, d in frames[1][1:]]
    assert decode_frame(config, psum[:-7] + psum[-1:]) is None
    with pytest.raises(ValueError, match=r"^a data frame carries 1 to 4 words, not 5$"):
        encode_data(config, 0, 0, [0] * 5)


def test_sizing_formulas_by_hand():
    # 16-bit lane, channels of 64/96/32 bits: frames of 7, 9 and 5 flits; a control frame carries
    # three 8-bit credit limits in 2 flits, so 5 flits.
    config = LinkConfig(DEFAULT_CHANNELS)
    assert [config.frame_flits(c) for c in range(3)] == [7, 9, 5]
    assert config.frame_flits(None) == 5
    assert config.seq_bits == 12 and config.credit_bits == 6
    # psum alone, PHY latency 8: 9 + 1 + 2 * (8 + 1 + 7) + 9 + 64 + 5 + 2 = 122 cycles
    assert round_trip_cycles(config, 8, 1) == 122
    assert receive_depth(config, 8, 1) == 15          # ceil(122 / 9) + 1
    assert replay_frames(config, 8) == 32             # ceil(122 / 5) + 1 = 26, next power of two
    assert frame_efficiency(config, 1) == pytest.approx(96 / 144)


def test_config_refusals():
    with pytest.raises(ValueError, match="lane width 12 not supported"):
        LinkConfig(DEFAULT_CHANNELS, lane_width=12)
    with pytest.raises(ValueError, match="channel names must be distinct"):
        LinkConfig((("a", 8), ("a", 8)))
    with pytest.raises(ValueError, match="replay_frames must be a power of two from 2 to 2048"):
        LinkConfig(DEFAULT_CHANNELS, replay_frames=24)
    with pytest.raises(TypeError, match=r"^burst_words must be a positive integer, not '4'$"):
        LinkConfig(DEFAULT_CHANNELS, burst_words="4")
    with pytest.raises(ValueError, match=r"^burst_words must be a positive integer, not 0$"):
        LinkConfig(DEFAULT_CHANNELS, burst_words=0)
    # The word count takes header bits from the sequence number: 8 - 2 - 2 - 3 leaves 1.
    with pytest.raises(ValueError, match=r"^3 channels leave 1 sequence bits in a 8-bit header with bursts of 8 "
                                         r"words; use a wider lane or shorter bursts$"):
        LinkConfig(DEFAULT_CHANNELS, lane_width=8, burst_words=8)


def _single_layer(config, drive):
    """Simulate one LinkLayer whose line input ``drive(ctx, layer, line)`` controls; ``line``
    collects every flit the layer sends as (ctrl, data)."""
    layer = LinkLayer(config)
    top = Module()
    top.domains.sync = ClockDomain()
    top.submodules.layer = layer
    sim = Simulator(top)
    sim.add_clock(1e-8)
    line = []

    async def record(ctx):
        async for _, _, ctrl, data in ctx.tick().sample(layer.phy.tx.ctrl, layer.phy.tx.data):
            line.append((int(ctrl), int(data)))

    async def testbench(ctx):
        await drive(ctx, layer, line)

    sim.add_process(record)
    sim.add_testbench(testbench)
    sim.run()
    return line


async def _train(ctx, layer, config):
    """Play the partner's side of training from the reference codes."""
    ctx.set(layer.phy.rx_locked, 1)
    ctx.set(layer.phy.rx_valid, 1)
    ctx.set(layer.phy.rx.ctrl, 1)
    for code in (K_TS1, K_TS2):
        ctx.set(layer.phy.rx.data, code)
        await ctx.tick().repeat(config.train_count + 2)
    ctx.set(layer.phy.rx.data, K_IDLE)
    await ctx.tick().until(layer.link_up)


async def _send_line(ctx, layer, flits):
    for ctrl, data in flits:
        ctx.set(layer.phy.rx.ctrl, ctrl)
        ctx.set(layer.phy.rx.data, data)
        await ctx.tick()
    ctx.set(layer.phy.rx.ctrl, 1)
    ctx.set(layer.phy.rx.data, K_IDLE)


def test_transmitter_frames_match_the_reference_encoder():
    """Words offered on every channel with random gaps leave as exactly the reference model's
    frames (CRC included), sequence numbers 0, 1, 2... in round-robin order of the offers, each
    a burst of the words waiting when it started (up to 3)."""
    config = LinkConfig(DEFAULT_CHANNELS, burst_words=3, **QUICK)
    rng = random.Random(7)
    words = {c: [rng.getrandbits(w) for _ in range(5)] for c, (_, w) in enumerate(config.channels)}

    async def drive(ctx, layer, line):
        await _train(ctx, layer, config)
        ports = channel_ports(config, layer.tx)
        queues = {c: list(ws) for c, ws in words.items()}
        for _ in range(400):
            for c, port in enumerate(ports):
                ctx.set(port.valid, bool(queues[c]) and rng.random() < 0.7)
                ctx.set(port.payload, queues[c][0] if queues[c] else 0)
            sampled = (await ctx.tick().sample(*(p.valid for p in ports), *(p.ready for p in ports)))[2:]
            for c in range(len(ports)):
                if sampled[c] and sampled[len(ports) + c]:
                    queues[c].pop(0)

    line = _single_layer(config, drive)
    up = max(i for i, (ctrl, data) in enumerate(line) if ctrl and data == K_TS2) + 1
    frames = [frame for what, frame in parse_line(config, line[up:]) if what == "frame"]
    assert None not in frames
    data_frames = [f for f in frames if isinstance(f, DataFrame)]
    assert [f.seq for f in data_frames] == list(range(len(data_frames)))
    sizes = {len(f.words) for f in data_frames}
    assert sizes <= {1, 2, 3} and max(sizes) > 1
    for c, ws in words.items():
        assert [w for f in data_frames if f.channel == c for w in f.words] == ws
    # Control frames: nothing received, so ACK of sequence -1 (all ones) and full credits.
    for f in frames:
        if isinstance(f, CtrlFrame):
            assert f == CtrlFrame(2 ** config.seq_bits - 1, False, (config.receive_depth,) * 3)
    # Every flit a data frame put on the line is the reference encoding of that frame.
    on_line = "".join(map(str, line))
    for f in data_frames:
        assert "".join(map(str, encode_data(config, f.channel, f.seq, f.words))) in on_line


def test_receiver_delivers_good_frames_in_order_and_naks_a_damaged_one():
    """Reference frames 0..3 (bursts of 1 to 3 words) with frame 2 damaged: 0 and 1 are
    delivered, 3 is refused (out of order), a NAK of 1 goes out; after 2 and 3 are replayed all
    four are delivered and ACKed."""
    config = LinkConfig(DEFAULT_CHANNELS, burst_words=3, **QUICK)
    words = [(0, [0x1111, 0x5555]), (1, [0x2222]), (2, [0x3333, 0x6666, 0x7777]), (0, [0x4444])]
    frames = [encode_data(config, c, seq, ws) for seq, (c, ws) in enumerate(words)]
    damaged = list(frames[2])
    damaged[3] = (0, damaged[3][1] ^ 0x0100)
    delivered = {c: [] for c in range(3)}

    async def drive(ctx, layer, line):
        await _train(ctx, layer, config)
        ports = channel_ports(config, layer.rx)

        async def collect(cycles):
            for port in ports:
                ctx.set(port.ready, 1)
            for _ in range(cycles):
                sampled = (await ctx.tick().sample(*(p.valid for p in ports), *(p.payload for p in ports)))[2:]
                for c in range(3):
                    if sampled[c]:
                        delivered[c].append(int(sampled[3 + c]))
            for port in ports:
                ctx.set(port.ready, 0)

        for flits in (frames[0], frames[1], damaged, frames[3], [(1, K_IDLE)]):
            await _send_line(ctx, layer, flits)
        await collect(150)
        assert delivered == {0: [0x1111, 0x5555], 1: [0x2222], 2: []}
        assert layer.counters.crc_errors.shape().width == 32
        assert ctx.get(layer.counters.crc_errors) == 1
        for flits in (frames[2], frames[3], [(1, K_IDLE)]):
            await _send_line(ctx, layer, flits)
        await collect(150)

    line = _single_layer(config, drive)
    assert delivered == {0: [0x1111, 0x5555, 0x4444], 1: [0x2222], 2: [0x3333, 0x6666, 0x7777]}
    ctrl = [f for what, f in parse_line(config, line) if what == "frame" and isinstance(f, CtrlFrame)]
    acks = [(f.ack_seq, f.nak) for f in ctrl]
    assert (1, True) in acks                       # NAK: got 0..1, resend from 2
    assert acks.index((1, True)) < acks.index((3, False))
    assert acks[-1] == (3, False)
    # The credit limits count the seven words taken out of the buffers.
    assert ctrl[-1].credit_limits == (config.receive_depth + 3, config.receive_depth + 1,
                                      config.receive_depth + 3)


def _check_exact(run, words, config):
    assert run.totals() == (0, 0, 0)
    for delivery in run.deliveries.values():
        assert delivery.received == delivery.sent and len(delivery.sent) == words
    frames = [counters["frames_sent"] for counters in run.counters]
    assert [counters["frames_received"] for counters in run.counters[::-1]] == frames
    assert all(words * len(config.channels) / config.burst_words <= n <= words * len(config.channels) for n in frames)


def test_exact_delivery_with_bit_errors_bursts_and_backpressure_on_every_channel():
    config = LinkConfig(DEFAULT_CHANNELS, burst_words=4, **QUICK)
    errors = (LaneErrors(ber=1e-3), LaneErrors(ber=2e-4, burst=12))
    run = run_link(config, 40, errors, latency=5, seed=11, offer=0.6, stall=0.3)
    _check_exact(run, 40, config)
    assert all(c["replays"] > 0 and c["crc_errors"] > 0 for c in run.counters)
    assert all(c["retrains"] == 0 for c in run.counters)


def test_one_ts1_in_a_row_leaves_the_link_up_two_retrain_it():
    """An IDLE with bit 7 flipped reads as TS1 (K28.5 = 0xBC, K28.1 = 0x3C): one such flit
    between IDLEs leaves the link UP; TS1 twice in a row (a partner retraining) takes it back to
    training, which it shows by sending TS1."""
    config = LinkConfig(DEFAULT_CHANNELS, **QUICK)
    up_after = {}

    async def drive(ctx, layer, line):
        await _train(ctx, layer, config)
        await ctx.tick().repeat(20)
        await _send_line(ctx, layer, [(1, K_TS1)])
        await ctx.tick().repeat(20)
        up_after["one"] = (ctx.get(layer.link_up), ctx.get(layer.counters.retrains))
        await _send_line(ctx, layer, [(1, K_TS1), (1, K_TS1)])
        await ctx.tick().repeat(20)
        up_after["two"] = (ctx.get(layer.link_up), ctx.get(layer.counters.retrains))

    line = _single_layer(config, drive)
    assert up_after == {"one": (1, 0), "two": (0, 1)}
    assert line[-1] == (1, K_TS1)


def test_loss_of_lock_retrains_and_loses_nothing():
    config = LinkConfig(DEFAULT_CHANNELS, **QUICK)
    errors = (LaneErrors(lock_losses=((700, 150),)), LaneErrors())
    run = run_link(config, 60, errors, latency=8, seed=2)
    _check_exact(run, 60, config)
    # B lost lock and retrained; A followed when it heard B's TS1.
    assert [c["retrains"] for c in run.counters] == [1, 1]


def test_no_head_of_line_blocking_between_channels():
    """psum's receiver never takes a word: act and weights still deliver everything, and psum's
    sender stops after exactly the words psum's receive buffer holds, and one more waiting in
    the sender's register for a credit."""
    config = LinkConfig(DEFAULT_CHANNELS, receive_depth=6, **QUICK)
    run = run_link(config, 50, latency=6, seed=4, stall={"psum": 1.0})
    for (_, name), delivery in run.deliveries.items():
        if name == "psum":
            assert delivery.received == [] and len(delivery.sent) == 6 + 1
        else:
            assert delivery.received == delivery.sent and len(delivery.sent) == 50


def test_receive_depth_from_the_round_trip_keeps_one_channel_at_line_rate():
    """A lone channel with the depth receive_depth() gives sends back to back: its efficiency is
    the frame efficiency less the control frames (at most one 5-flit frame per ack_interval);
    with a quarter of that depth it waits for credits."""
    channels = (("psum", 96),)
    latency = 20
    base = LinkConfig(channels, **QUICK)
    depth = receive_depth(base, latency, 0)
    full = run_link(LinkConfig(channels, receive_depth=depth, replay_frames=replay_frames(base, latency), **QUICK),
                    300, latency=latency)
    starved = run_link(LinkConfig(channels, receive_depth=depth // 4, replay_frames=replay_frames(base, latency),
                                  **QUICK), 300, latency=latency)
    ceiling = frame_efficiency(base, 0)   # 96 / (9 * 16)
    # Training and the pipeline tail cost a little; the control frames take 4 flits (8-bit
    # credit limit in one flit) per 64 cycles.
    assert ceiling * (1 - 4 / 64) * 0.9 < full.efficiency(16) <= ceiling
    assert starved.efficiency(16) < 0.6 * full.efficiency(16)


def test_endpoints_on_different_clocks():
    """Nodes at 100 and 77 MHz, link clocks 125 MHz and 0.05 % slower, BER 1e-4 both ways."""
    config = LinkConfig(DEFAULT_CHANNELS, **QUICK)
    run = run_link(config, 40, (LaneErrors(1e-4), LaneErrors(1e-4)), latency=6, seed=5,
                   stall=0.2, clocks=(10e-9, 1 / 77e6, 8e-9, 8.004e-9))
    _check_exact(run, 40, config)


@pytest.mark.parametrize("i_period, o_period", [(8e-9, 5e-9), (5e-9, 13e-9)])
def test_counter_synchronizer_reads_the_values_the_counter_held_in_order(i_period, o_period):
    """A 4-bit counter (so it wraps) stepping on random cycles of its clock, read on another,
    faster or slower: every value read is one the counter held, in the order it held them, and
    the last is its final value."""
    top = Module()
    top.domains.i = ClockDomain()
    top.domains.o = ClockDomain()
    top.submodules.dut = dut = CounterSynchronizer(4, i_domain="i", o_domain="o")
    held, read, rng = [0], [], random.Random(3)

    async def count(ctx):
        for _ in range(200):
            if rng.random() < 0.6:
                held.append((held[-1] + 1) % 16)
                ctx.set(dut.i, held[-1])
            await ctx.tick("i")

    async def sample(ctx):
        async for _ in ctx.tick("o"):
            read.append(ctx.get(dut.o))

    sim = Simulator(top)
    sim.add_clock(i_period, domain="i")
    sim.add_clock(o_period, domain="o")
    sim.add_testbench(count)
    sim.add_testbench(sample, background=True)
    sim.run_until(200 * i_period + 10 * o_period)
    position = 0
    for value in read:  # each value read is one held at or after the last one read
        while held[position] != value:
            position += 1
            assert position < len(held), f"{value} read out of order"
    assert read[-1] == held[-1] and len(held) > 100


def test_delivery_score_counts_each_fault():
    delivery = Delivery(sent=[1, 2, 3, 4], received=[1, 3, 2, 2])
    assert delivery.score() == (1, 1, 1)


def test_simulated_lane_error_rate_and_lock_loss():
    lane = SimulatedLane(16, latency=3, errors=LaneErrors(ber=1e-3, lock_losses=((100, 10),)), seed=1)
    out = [lane.step(0, 0) for _ in range(20000)]
    assert out[0] == (1, 0, True)                      # the line before anything was sent
    assert [locked for _, _, locked in out[100:110]] == [False] * 10
    rate = lane.bit_errors / ((20000 - 10) * 17)
    assert rate == pytest.approx(1e-3, rel=0.1)


def test_comma_aligner_moves_straddling_flits_back_into_line():
    """Flits IDLE, 0x7856, SOF arriving one byte late (each SERDES word holds the high byte of
    one flit and the low byte of the next): once the comma is seen in byte 1, the aligner pairs
    each word's byte 0 with the previous word's byte 1 and the link sees whole flits again."""
    aligner = CommaAligner()
    sim = Simulator(aligner)
    sim.add_clock(1e-8)
    words = [(0xBC12, 0b10), (0x5600, 0b00), (0xFB78, 0b10), (0x0000, 0b00)]
    seen = []

    async def bench(ctx):
        for data, k in words:
            ctx.set(aligner.data, data)
            ctx.set(aligner.k, k)
            seen.append((ctx.get(aligner.aligned), ctx.get(aligner.flit.ctrl), ctx.get(aligner.flit.data)))
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    # Before the comma: passed through, and a K character in byte 1 is flagged as control.
    assert seen == [(0, 1, 0xBC12), (1, 1, K_IDLE), (1, 0, 0x7856), (1, 1, K_SOF)]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sim.link", *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])


def test_cli_ends_with_the_delivery_line():
    result = _cli("--ber", "1e-4", "--frames", "120", "--latency", "4", "--seed", "3")
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"sent 240 delivered 240 lost 0 duplicated 0 reordered 0 efficiency 0\.\d{3}", last)


@pytest.mark.parametrize("args, message", [
    (("--lane-width", "12"), "error: lane width 12 not supported (one of 8, 16, 32)"),
    (("--ber", "1.5"), "error: --ber and --stall are probabilities below 1"),
    (("--frames", "0"), "error: argument --frames: must be at least 1, got 0"),
    (("--latency", "x"), "error: argument --latency: invalid value 'x'"),
])
def test_cli_refuses_bad_options_in_one_line(args, message):
    result = _cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip() == message and result.stdout == ""
