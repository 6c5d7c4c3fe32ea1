"""Two link endpoints over the simulation PHY with random traffic on every channel, both ways.

    python -m sim.link --ber 1e-4 [--lane-width W --latency L --frames N --seed S]

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

from hw.link.layer import COUNTER_NAMES, LinkLayer
from hw.link.protocol import LinkConfig
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
             offer=1.0, stall=0.0, deadline=None, progress=None):
    """Run two LinkLayers joined by two simulated lanes until every channel of both endpoints
    has delivered ``words`` words (or ``deadline`` cycles pass).

    ``offer``: probability a sender has a word on a cycle; ``stall``: probability a receiver
    holds ready low. Returns a LinkRun.
    """
    rng = random.Random(seed)
    endpoints = [LinkLayer(config), LinkLayer(config)]
    top = Module()
    top.domains.sync = ClockDomain()
    top.submodules.a, top.submodules.b = endpoints
    sim = Simulator(top)
    sim.add_clock(1e-8)
    lanes = [SimulatedLane(config.lane_width, latency, errors[i], seed=seed * 2 + i + 1) for i in range(2)]
    for i, lane in enumerate(lanes):
        far = endpoints[1 - i].phy
        sim.add_process(lane.process(endpoints[i].phy.tx, far.rx, far.rx_valid, far.rx_locked))

    names = [name for name, _ in config.channels]
    widths = [width for _, width in config.channels]
    deliveries = {(e, name): Delivery() for e in range(2) for name in names}
    result = LinkRun(0, deliveries, [], 0, lanes)
    # Each word: a per-channel serial number in the low bits, random bits above (all distinct).
    def next_word(e, c, serial):
        serial_bits = min(widths[c], 20)
        high = rng.getrandbits(widths[c] - serial_bits) if widths[c] > serial_bits else 0
        return high << serial_bits | serial

    async def traffic(ctx):
        senders = [(e, c, endpoints[e].channel_ports(endpoints[e].tx)[c]) for e in range(2) for c in range(len(names))]
        receivers = [(e, c, endpoints[1 - e].channel_ports(endpoints[1 - e].rx)[c]) for e in range(2) for c in range(len(names))]
        serial = {(e, c): 0 for e, c, _ in senders}
        current = {}
        limit = deadline or 400 * words * sum(config.frame_flits(c) for c in range(len(names)))
        started = time.monotonic()
        cycle = 0
        while cycle < limit:
            for e, c, port in senders:
                key = (e, c)
                if key not in current and serial[key] < words and rng.random() < offer:
                    current[key] = next_word(e, c, serial[key])
                    serial[key] += 1
                ctx.set(port.valid, key in current)
                ctx.set(port.payload, current.get(key, 0))
            readies = [not (stall and rng.random() < stall) for _ in receivers]
            for ready, (_, _, port) in zip(readies, receivers):
                ctx.set(port.ready, ready)
            signals = [p.ready for _, _, p in senders] + [p.valid for _, _, p in receivers] + \
                      [p.payload for _, _, p in receivers]
            sampled = (await ctx.tick().sample(*signals))[2:]
            cycle += 1
            n = len(senders)
            for (e, c, _), taken in zip(senders, sampled[:n]):
                if taken and (e, c) in current:
                    deliveries[(e, names[c])].sent.append(current.pop((e, c)))
            for k, (e, c, _) in enumerate(receivers):
                if readies[k] and sampled[n + k]:
                    deliveries[(e, names[c])].received.append(int(sampled[2 * n + k]))
                    result.payload_bits += widths[c]
            if all(len(d.received) >= words for d in deliveries.values()):
                break
            if progress and cycle % 20000 == 0:
                progress(cycle, sum(len(d.received) for d in deliveries.values()), time.monotonic() - started)
        result.cycles = cycle
        result.counters = [{name: int(ctx.get(getattr(ep.counters, name))) for name in COUNTER_NAMES}
                           for ep in endpoints]

    sim.add_testbench(traffic)
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
        config = LinkConfig(DEFAULT_CHANNELS, lane_width=args.lane_width)
    except ValueError as error:
        raise SpecError(str(error)) from None
    lock_losses = ((args.lock_loss, 200),) if args.lock_loss is not None else ()
    errors = (LaneErrors(args.ber, args.burst, lock_losses), LaneErrors(args.ber, args.burst))
    words = max(1, args.frames // len(config.channels))

    def progress(cycle, delivered, seconds):
        print(f"  cycle {cycle}: {delivered} of {2 * words * len(config.channels)} words delivered "
              f"({seconds:.0f} s)", file=sys.stderr, flush=True)

    run = run_link(config, words, errors, latency=args.latency, seed=args.seed, stall=args.stall,
                   progress=progress)
    for name, counters in zip("AB", run.counters):
        print(f"endpoint {name}: " + " ".join(f"{k} {v}" for k, v in counters.items()))
    print(run.summary(config.lane_width))
    lost, duplicated, reordered = run.totals()
    return 0 if run.delivered == run.sent and not (lost or duplicated or reordered) else 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
