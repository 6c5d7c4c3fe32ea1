"""A lossy lane in gateware, for chains over link cores on the Verilator backend.

:mod:`hw.link.sim_phy` drives lanes from Python processes, which only Amaranth's simulator
runs; this model is logic, so a chain over link cores compiles with Verilator as it is. Each
direction of a link is two parts: :class:`SenderErrors` at the sending end, which makes the same
errors the Python lane makes from a xorshift32 generator per direction (seeded, so a run
reproduces), and then a pure delay of ``latency`` cycles (as
:class:`~hw.link.onchip_phy.OnChipPhy`). The errors come before the delay so that a chain
cut at its lanes (one process per part, sim/distributed.py) carries only the delay between
processes: each sender's errors are drawn in its own model, the same cycle as in one model.

- an error event in a flit with probability ``1 - (1 - ber) ** L`` (``L`` = lane width + 1 line
  bits, the control flag included), compared against 32 random bits; it starts at a random bit
  of the flit and spans ``burst`` bits, the first and last flipped and the ones between at
  random. Where the Python lane lets a burst run on into the next flit and can start two
  events in one flit, this one cuts the burst at the flit's end and starts at most one: at
  the rates tested (``ber`` up to 1e-4, so under 1% of 33-bit flits) the two differ in a
  fraction ``ber * L / 2`` of events.
- a loss of lock, (first cycle, cycles) counted on the sender's cycles: the receiver sees
  ``rx_locked`` low and random flits ``latency`` cycles later.

Everything runs in the domain the model is elaborated in: the link cores, the nodes and the
lanes on one clock (the Verilator harness drives one).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..base.checks import positive, refuse
from .signatures import flit_layout

_XORSHIFT_SEED_MIX = 0x9E3779B9  # spreads small seeds over the state; never gives state 0 below


def xorshift32(m, seed, name):
    """A xorshift32 generator (Marsaglia's 13, 17, 5): a new 32-bit value every cycle."""
    state = Signal(32, init=((seed * _XORSHIFT_SEED_MIX) & 0xFFFFFFFF) or 1, name=name)
    x = state ^ (state << 13)[:32]
    x = x ^ (x >> 17)
    x = x ^ (x << 5)[:32]
    m.d.sync += state.eq(x)
    return state


def event_threshold(ber, line_bits):
    """32-bit threshold below which a random word starts an error event in a flit."""
    return min(round((1 - (1 - ber) ** line_bits) * 2 ** 32), 2 ** 32 - 1)


def line_layout(lane_width):
    """What a lane carries each cycle: the flit as it arrives and the receiver's lock."""
    return data.StructLayout({"flit": flit_layout(lane_width), "locked": 1})


# The line before its first flit arrives: no data, locked (the lane's registers at reset).
IDLE_LOCKED = 1


class SenderErrors(wiring.Component):
    """The sending end of one direction: ``tx`` (the sending endpoint's flit) in, ``line`` out
    the same cycle, the flit with its errors and the lock the receiver will see."""

    def __init__(self, lane_width, *, ber=0.0, burst=1, lock_loss=None, seed=1):
        if not 0 <= ber < 1:
            refuse(self, f"ModelLane: ber = {ber} must be at least 0 and below 1")
        line_bits = lane_width + 1
        if not 1 <= burst <= line_bits:
            refuse(self, f"ModelLane: burst = {burst} must be from 1 to the {line_bits} bits of a flit")
        self.lane_width, self.ber, self.burst = lane_width, ber, burst
        self.lock_loss, self.seed, self.line_bits = lock_loss, seed, line_bits
        super().__init__({"tx": In(flit_layout(lane_width)), "line": Out(line_layout(lane_width))})

    def elaborate(self, platform):
        m = Module()
        bits = self.line_bits
        event, where, middle = (xorshift32(m, self.seed * 3 + k, f"random{k}") for k in range(3))
        mask = Signal(bits)
        if self.ber > 0:
            ends = (1 << (self.burst - 1)) | 1
            between = ((1 << self.burst) - 1) & ~ends
            span = Const(ends, self.burst) | (middle[:self.burst] & between)
            start = (where[:16] * bits)[16:]  # a bit of the flit, uniformly enough
            m.d.comb += mask.eq(Mux(event < event_threshold(self.ber, bits), (span << start)[:bits], 0))

        locked = Signal(init=1)
        if self.lock_loss is not None:
            first, cycles = self.lock_loss
            cycle = Signal(range(first + cycles + 1))
            with m.If(cycle != first + cycles):
                m.d.sync += cycle.eq(cycle + 1)
            m.d.comb += locked.eq((cycle < first) | (cycle >= first + cycles))
        noise = Cat(event, where)[:bits]
        m.d.comb += [self.line.flit.eq(Mux(locked, Cat(self.tx.data, self.tx.ctrl) ^ mask, noise)),
                     self.line.locked.eq(locked)]
        return m


class ModelLane(wiring.Component):
    """One direction: ``tx`` (the sending endpoint's flit) in, ``rx`` with ``rx_valid`` and
    ``rx_locked`` out at the receiving endpoint, ``latency`` cycles later: :class:`SenderErrors`
    (``errors``: its ``ber``, ``burst``, ``lock_loss``, ``seed``), then ``latency`` registers of
    its line."""

    def __init__(self, lane_width, *, latency=4, **errors):
        positive(self, "ModelLane", latency=latency)
        self.errors = SenderErrors(lane_width, **errors)
        self.lane_width, self.latency = lane_width, latency
        layout = flit_layout(lane_width)
        super().__init__({"tx": In(layout), "rx": Out(layout), "rx_valid": Out(1),
                          "rx_locked": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.errors = errors = self.errors
        m.d.comb += errors.tx.eq(self.tx)
        line = errors.line
        for k in range(self.latency):
            stage = Signal(line_layout(self.lane_width), init={"locked": IDLE_LOCKED}, name=f"stage{k}")
            m.d.sync += stage.eq(line)
            line = stage
        m.d.comb += [self.rx.eq(line.flit), self.rx_valid.eq(1), self.rx_locked.eq(line.locked)]
        return m


def lane_errors(link, end, *, ber=0.0, burst=1, lock_loss=None, seed=0):
    """:class:`SenderErrors`' parameters for link ``link``'s lane sent from end ``end`` (0:
    upstream): seeded from ``seed``, the link and the direction; ``lock_loss``: (link, first
    cycle, cycles) during which both lanes of that link lose lock."""
    loss = tuple(lock_loss[1:]) if lock_loss is not None and lock_loss[0] == link else None
    return {"ber": ber, "burst": burst, "lock_loss": loss, "seed": seed * 100 + 2 * link + end + 1}


def model_phy(lane_width, *, latency=4, **errors):
    """A ``phy(m, link)`` for :func:`hw.link.chain.link_chain`: two :class:`ModelLane` per link,
    their errors from :func:`lane_errors` (``errors``: its ``ber``, ``burst``, ``lock_loss``, ``seed``)."""
    def join(m, link):
        ends = (link.upstream, link.downstream)
        for end in (0, 1):
            lane = m.submodules[f"link{link.index}_lane{end}"] = ModelLane(
                lane_width, latency=latency, **lane_errors(link.index, end, **errors))
            sender, receiver = ends[end].phy, ends[1 - end].phy
            m.d.comb += [lane.tx.eq(sender.tx), receiver.rx.eq(lane.rx), receiver.rx_valid.eq(lane.rx_valid),
                         receiver.rx_locked.eq(lane.rx_locked)]
    return join
