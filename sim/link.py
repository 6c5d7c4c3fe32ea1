"""Two link endpoints over the simulation PHY with random traffic on every channel, both ways.

    python -m sim.link --ber 1e-4 [--lane-width W --burst-words B --ack-interval A --latency L --frames N --seed S]

ends with one line ``sent N delivered N lost 0 duplicated 0 reordered 0 efficiency E``, where E
is the payload bits delivered per raw line bit (lane width times link-clock cycles, both
directions). The same harness runs the link tests.
"""

import argparse
import random
import sys
import time
from dataclasses import dataclass, field

from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from hw.link.endpoint import LinkEndpoint
from hw.link.layer import COUNTER_NAMES, LinkLayer
from hw.link.signatures import channel_ports
from hw.link.protocol import BURST_WORDS, LinkConfig, sized_config
from hw.link.sim_phy import LaneErrors, SimulatedLane
from mapping.errors import SpecError, run_cli

# The channels of one FPDeep link direction at a small size: activations (16 bits x 4), partial
# sums (48 bits x 2), a weight-balancing stream (16 bits x 2).
DEFAULT_CHANNELS = (("act", 64), ("psum", 96), ("weights", 32))


@dataclass
class Delivery:
    """What one channel's receiver saw against what its sender sent, in order."""
    sent: list = field(default_factory=list)
    received: list = field(default_factory=list)

    def score(self):
        """(lost, duplicated, reordered): every word is distinct, so each is counted exactly."""
        position = {word: i for i, word in enumerate(self.sent)}
        seen = set()
        duplicated = reordered = 0
        last = -1
        for word in self.received:
            if word in seen:
                duplicated += 1
                continue
            seen.add(word)
            index = position.get(word, -1)
            if index < last:
                reordered += 1
            last = max(last, index)
        lost = sum(1 for word in self.sent if word not in seen)
        return lost, duplicated, reordered


@dataclass
class LinkRun:
    cycles: int
    deliveries: dict        # (endpoint, channel name) -> Delivery
    counters: list          # per endpoint: {counter name: value}
    payload_bits: int
    lanes: list

    @property
    def sent(self):
        return sum(len(d.sent) for d in self.deliveries.values())

    @property
    def delivered(self):
        return sum(len(d.received) for d in self.deliveries.values())

    def totals(self):
        lost = duplicated = reordered = 0
        for delivery in self.deliveries.values():
            a, b, c = delivery.score()
            lost, duplicated, reordered = lost + a, duplicated + b, reordered + c
        return lost, duplicated, reordered

    def efficiency(self, lane_width):
        return self.payload_bits / (2 * self.cycles * lane_width)

    def summary(self, lane_width):
        lost, duplicated, reordered = self.totals()
        return (f"sent {self.sent} delivered {self.delivered} lost {lost} duplicated {duplicated} "
                f"reordered {reordered} efficiency {self.efficiency(lane_width):.3f}")


def run_link(config, words, errors=(LaneErrors(), LaneErrors()), latency=8, seed=0,
             offer=1.0, stall=0.0, clocks=None, deadline=None, progress=None):
    """Run two link endpoints joined by two simulated lanes until every channel of both has
    delivered ``words`` words (or an endpoint's node clock has run ``deadline`` cycles).

    ``clocks``: None for two LinkLayers on one clock, or (node A, node B, link A, link B) clock
    periods in seconds for two LinkEndpoints, each lane on its sender's link clock.
    ``offer``: probability a sender has a word on a cycle; ``stall``: probability a receiver
    holds ready low (one for all channels, or a dict by channel name). Returns a LinkRun.
    """
    rng = random.Random(seed)
    top = Module()
    if clocks is None:
        endpoints = [LinkLayer(config), LinkLayer(config)]
        node_domains = link_domains = ["sync", "sync"]
        top.domains.sync = ClockDomain()
    else:
        node_domains, link_domains = ["node_a", "node_b"], ["link_a", "link_b"]
        for name in node_domains + link_domains:
            top.domains += ClockDomain(name)
        # Each receiver runs on the clock its partner forwards: the partner's link clock.
        endpoints = [LinkEndpoint(config, node_domains[i], link_domains[i], link_domains[1 - i])
                     for i in range(2)]
    top.submodules.a, top.submodules.b = endpoints
    sim = Simulator(top)
    if clocks is None:
        sim.add_clock(1e-8)
    else:
        for domain, period in zip(node_domains + link_domains, clocks):
            sim.add_clock(period, domain=domain)
    lanes = [SimulatedLane(config.lane_width, latency, errors[i], seed=seed * 2 + i + 1) for i in range(2)]
    for i, lane in enumerate(lanes):
        far = endpoints[1 - i].phy
        sim.add_process(lane.process(endpoints[i].phy.tx, far.rx, far.rx_valid, far.rx_locked,
                                     link_domains[i]))

    names = [name for name, _ in config.channels]
    widths = [width for _, width in config.channels]
    deliveries = {(e, name): Delivery() for e in range(2) for name in names}
    result = LinkRun(0, deliveries, [], 0, lanes)
    limit = deadline or 400 * words * sum(config.frame_flits(c) for c in range(len(names)))
    finished = []
    stalls = [stall.get(name, 0.0) if isinstance(stall, dict) else stall for name in names]

    def next_word(c, serial):
        """A per-channel serial number in the low bits, random bits above: all words distinct."""
        serial_bits = min(widths[c], 20)
        high = rng.getrandbits(widths[c] - serial_bits) if widths[c] > serial_bits else 0
        return high << serial_bits | serial

    def traffic(e):
        ep = endpoints[e]
        senders = list(enumerate(channel_ports(config, ep.tx)))
        receivers = list(enumerate(channel_ports(config, ep.rx)))   # words the partner sent
        sent = [deliveries[(e, name)].sent for name in names]
        received = [deliveries[(1 - e, name)].received for name in names]

        async def run(ctx):
            current = {}
            started = time.monotonic()
            for cycle in range(limit):
                for c, port in senders:
                    if c not in current and len(sent[c]) < words and rng.random() < offer:
                        current[c] = next_word(c, len(sent[c]))
                    ctx.set(port.valid, c in current)
                    ctx.set(port.payload, current.get(c, 0))
                readies = [not (stalls[c] and rng.random() < stalls[c]) for c, _ in receivers]
                for ready, (_, port) in zip(readies, receivers):
                    ctx.set(port.ready, ready)
                signals = ([p.ready for _, p in senders] + [p.valid for _, p in receivers]
                           + [p.payload for _, p in receivers])
                sampled = (await ctx.tick(node_domains[e]).sample(*signals))[2:]
                n = len(senders)
                for c, taken in enumerate(sampled[:n]):
                    if taken and c in current:
                        sent[c].append(current.pop(c))
                for c in range(n):
                    if readies[c] and sampled[n + c]:
                        received[c].append(int(sampled[2 * n + c]))
                        result.payload_bits += widths[c]
                if all(len(r) >= words or stalls[c] == 1 for c, r in enumerate(received)) and \
                        all(len(s) >= words or stalls[c] == 1 for c, s in enumerate(sent)):
                    break
                if progress and e == 0 and cycle % 10000 == 9999:
                    progress(cycle + 1, result.delivered, time.monotonic() - started)
            for _, port in senders:
                ctx.set(port.valid, 0)
            for _, port in receivers:
                ctx.set(port.ready, 0)
            finished.append(e)
            if len(finished) == 2:
                result.cycles = sum(lane.cycle for lane in lanes) // 2
                result.counters = [{name: int(ctx.get(getattr(p.counters, name))) for name in COUNTER_NAMES}
                                   for p in endpoints]
        return run

    for e in range(2):
        sim.add_testbench(traffic(e))
    sim.run()
    return result


def _positive(kind, minimum=0):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid value '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value
    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SpecError(message)


def main(argv=None):
    parser = _Parser(prog="python -m sim.link", description=__doc__.splitlines()[0])
    parser.add_argument("--ber", type=_positive(float), default=0.0, help="bit-error rate of each direction")
    parser.add_argument("--burst", type=_positive(int, 1), default=1, help="bits per error event")
    parser.add_argument("--lane-width", type=int, default=16, help="flit width: 8, 16 or 32")
    parser.add_argument("--burst-words", type=_positive(int, 1), default=BURST_WORDS,
                        help="most words of one channel in a data frame")
    parser.add_argument("--ack-interval", type=_positive(int, 1), default=LinkConfig.ack_interval,
                        help="cycles a pending ACK or credit update waits at most under load")
    parser.add_argument("--latency", type=_positive(int, 1), default=8, help="PHY latency in link cycles")
    parser.add_argument("--frames", type=_positive(int, 1), default=2000,
                        help="data frames (words) each endpoint sends, spread over its channels")
    parser.add_argument("--lock-loss", type=_positive(int), default=None, metavar="CYCLE",
                        help="endpoint B loses lock for 200 cycles at this cycle")
    parser.add_argument("--stall", type=_positive(float), default=0.0,
                        help="probability a receiving channel holds ready low on a cycle")
    parser.add_argument("--seed", type=_positive(int), default=1)
    args = parser.parse_args(argv)
    if args.ber >= 1 or args.stall >= 1:
        raise SpecError("--ber and --stall are probabilities below 1")
    try:
        config = sized_config(DEFAULT_CHANNELS, args.lane_width, args.latency, args.burst_words, args.ack_interval)
    except ValueError as error:
        raise SpecError(str(error)) from None
    lock_losses = ((args.lock_loss, 200),) if args.lock_loss is not None else ()
    errors = (LaneErrors(args.ber, args.burst, lock_losses), LaneErrors(args.ber, args.burst))
    words = max(1, args.frames // len(config.channels))

    def progress(cycle, delivered, seconds):
        print(f"  cycle {cycle}: {delivered} of {2 * words * len(config.channels)} words delivered "
              f"({seconds:.0f} s)", file=sys.stderr, flush=True)

    print(f"{config.lane_width}-bit lane, latency {args.latency}, bursts of up to {config.burst_words} words: "
          f"receive buffers of {config.receive_depth} words, replay window of {config.replay_frames} frames "
          f"in a ring of {config.replay_flits} flits",
          file=sys.stderr)
    run = run_link(config, words, errors, latency=args.latency, seed=args.seed, stall=args.stall,
                   progress=progress)
    for name, counters in zip("AB", run.counters):
        print(f"endpoint {name}: " + " ".join(f"{k} {v}" for k, v in counters.items()))
    print(run.summary(config.lane_width))
    lost, duplicated, reordered = run.totals()
    return 0 if run.delivered == run.sent and not (lost or duplicated or reordered) else 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
