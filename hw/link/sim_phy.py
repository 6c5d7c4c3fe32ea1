"""The simulation PHY: a lane with a latency, random bit errors (single or in bursts) and
losses of lock, all from a seeded generator so that a run reproduces exactly.

It drives :class:`hw.link.signatures.PhySignature` ports from an Amaranth simulator process, one flit
per cycle of the sending endpoint's link clock; the receiving side sees it on that (forwarded)
clock, as a board's receiver sees a recovered clock.
"""

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LaneErrors:
    """Errors one direction of a lane suffers.

    ``ber``: probability that an error event starts at a given line bit (W data bits plus the
    control flag per flit). ``burst``: bits an event spans; the first and last are flipped, the
    ones between at random. ``lock_losses``: (first cycle, cycles) during which the receiver
    has lost lock and sees noise.
    """
    ber: float = 0.0
    burst: int = 1
    lock_losses: tuple = ()


@dataclass
class SimulatedLane:
    """One direction of a simulated lane: ``latency`` cycles, ``errors``, seeded with ``seed``."""
    lane_width: int
    latency: int = 8
    errors: LaneErrors = field(default_factory=LaneErrors)
    seed: int = 0

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)
        self.line_bits = self.lane_width + 1
        self.cycle = 0
        self.bit_errors = 0
        self.corrupted_flits = 0
        self._pending = 0  # bits of the current burst still to corrupt
        self._to_next_error = self._gap()
        self._line = deque([(1, 0)] * self.latency)  # link powered up: nothing locked yet

    def _gap(self):
        return self.rng.geometric(self.errors.ber) - 1 if self.errors.ber > 0 else np.inf

    def _error_mask(self):
        """The XOR mask for the next flit's line bits (bit W is the control flag)."""
        mask = 0
        position = 0
        while position < self.line_bits:
            if self._pending:
                take = min(self._pending, self.line_bits - position)
                for k in range(take):
                    last = self._pending - k == 1
                    if last or self.rng.random() < 0.5:
                        mask |= 1 << (position + k)
                self._pending -= take
                position += take
                continue
            if self._to_next_error >= self.line_bits - position:
                self._to_next_error -= self.line_bits - position
                break
            position += int(self._to_next_error)
            mask |= 1 << position
            self._pending = self.errors.burst - 1
            position += 1
            self._to_next_error = self._gap()
        return mask

    def locked(self):
        return not any(start <= self.cycle < start + length
                       for start, length in self.errors.lock_losses)

    def step(self, ctrl, data):
        """Put one flit on the line; returns (ctrl, data, locked) at the far end this cycle."""
        self._line.append((ctrl, data))
        ctrl, data = self._line.popleft()
        locked = self.locked()
        self.cycle += 1
        if not locked:
            noise = int(self.rng.integers(0, 1 << self.line_bits))
            return noise >> self.lane_width, noise & ((1 << self.lane_width) - 1), False
        mask = self._error_mask()
        if mask:
            self.bit_errors += bin(mask).count("1")
            self.corrupted_flits += 1
        word = (ctrl << self.lane_width | data) ^ mask
        return word >> self.lane_width, word & ((1 << self.lane_width) - 1), True

    def process(self, tx, rx_flit, rx_valid, rx_locked, domain="sync"):
        """A simulator process carrying flits from ``tx`` (a flit view) to the receiver's ports."""
        width = self.lane_width

        async def run(ctx):
            ctx.set(rx_valid, 1)
            async for _, _, flit in ctx.tick(domain).sample(tx.as_value()):
                ctrl, data, locked = self.step(flit >> width, flit & ((1 << width) - 1))
                ctx.set(rx_flit.as_value(), ctrl << width | data)
                ctx.set(rx_locked, locked)
        return run
