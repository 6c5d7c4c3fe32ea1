"""A chain of nodes over link cores simulated in parts, one process (MPI rank) per part, bit-exact
with the whole chain in one process (issue 44).

The chain is cut at its lanes. A part is a run of adjacent nodes (``split``: of about equal
cost) compiled as its own Verilator model (``ChainTop(part=...)``): its nodes, the link cores
between them with their lanes in logic, and, on each side where the chain goes on, its own
endpoint of the link and the errors of the lane it sends on (``hw.link.model_phy.SenderErrors``).
What crosses between parts is each lane's pure delay of ``latency`` cycles: the sender's line
(the flit with its errors, the lock the receiver sees) each cycle, which the receiver takes in
``latency`` cycles later. Errors are drawn at the sender in both the one-process chain
(``ModelLane``: errors, then the delay) and here, so both see the same lines on the same cycles.

The latency is the lookahead (as FireSim's link latency, SST's and dist-gem5's minimum
partition latency): in a window of ``window <= latency`` cycles a part needs only what its
neighbours sent in earlier windows. Each window, every part runs its cycles, then the parts
exchange the lines they sent in it (``exchange``), a window of cycles per lane.

Stopping on the one-process cycle: the chain is done on the first cycle every node has applied
its last update. Each part runs the window until its own nodes are done (the harness's stop
targets); the exchange also finds the latest such cycle over all parts (an allreduce, in flight
with the lines), and if every part is done every part runs exactly up to it, else to the
window's end: no part ever runs past the cycle the one process stops on, so the weights, cycles
and link counters read after it are the same.

Transports: ``Loopback`` runs every part in this process (the logic, without MPI; ``Late``
delivers every lane a window late, a broken transport the comparison must catch);
``MpiTransport`` one part per rank over mpi4py (non-blocking sends and receives of numpy buffers
between neighbours).
"""

import sys
import time
from dataclasses import dataclass

import numpy as np

from hw.link.model_phy import IDLE_LOCKED
from hw.memory.update_gate import COUNT_BITS
from mapping.errors import SpecError
from sim.chain import (counters_by_link, finish_run, initial_copy, make_feed, read_counters, read_weights,
                       write_weights)
from sim.chain_top import ChainTop
from sim.verilated import VerilatedModel

_NOT_DONE = 2 ** 62  # a part's "done at" while its nodes still have updates to apply
_NEVER = 2 ** COUNT_BITS  # a stop target no update count reaches


def split(mapping, parts):
    """``parts`` runs of adjacent nodes (ranges of node indices) of about equal cost: the split
    whose costliest part is cheapest, a node's cost its multipliers (a model's size and
    simulation time grow with its arithmetic); one line refused if the chain has fewer nodes."""
    count = len(mapping.nodes)
    if not 1 <= parts <= count:
        raise SpecError(f"{parts} parts for a chain of {count} nodes: from 1 to one part per node")
    costs = [1 + sum(s.multipliers for s in cfg.slices) for cfg in mapping.nodes]
    prefix = np.concatenate([[0], np.cumsum(costs)])
    # best[k][j]: the least costliest part splitting nodes 0..j-1 into k parts; cut[k][j] its last cut
    best = [[float("inf")] * (count + 1) for _ in range(parts + 1)]
    cut = [[0] * (count + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for k in range(1, parts + 1):
        for j in range(k, count + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    ranges, j = [], count
    for k in range(parts, 0, -1):
        ranges.append(range(cut[k][j], j))
        j = cut[k][j]
    return ranges[::-1]


def check_window(window, latency):
    """Refuse a window the lanes' latency does not cover (one line)."""
    if not 1 <= window <= latency:
        raise SpecError(f"--window {window}: must be from 1 to the lane latency of {latency} cycles "
                        f"(the lookahead: a part needs its neighbours' lines from {latency} cycles before)")


class Loopback:
    """Every part in this process: a lane's window goes straight to its receiver."""
    rank, size = 0, 1

    def exchange(self, sent, done, whole):
        """{lane: the window of lines it carried} of the local senders, the latest cycle a local
        part's nodes were done on, whether every local part ran the whole window -> the local
        receivers' lanes, the latest such cycle of every part, whether every part did."""
        return sent, done, whole

    def gather(self, value):
        return [value]

    def wait_for_all(self):
        pass


class Late(Loopback):
    """A broken transport: every lane's window arrives a window late (lines of zeros first)."""

    def __init__(self):
        self.held = None

    def exchange(self, sent, done, whole):
        held = self.held or {lane: np.zeros_like(rows) for lane, rows in sent.items()}
        self.held = {lane: rows.copy() for lane, rows in sent.items()}
        return held, done, whole


def mpi_transport():
    """An :class:`MpiTransport` when this process is one of several MPI ranks (started by
    ``mpiexec`` or ``srun``), else None (mpi4py initialises MPI when it is imported)."""
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MpiTransport(MPI) if MPI.COMM_WORLD.Get_size() > 1 else None


def mpi_rank():
    """This process's MPI rank if it started MPI, else 0."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi.COMM_WORLD.Get_rank() if mpi is not None and mpi.Is_initialized() else 0


class MpiTransport:
    """One part per MPI rank: lanes to and from the neighbouring ranks."""

    def __init__(self, mpi):
        self.mpi, self.comm = mpi, mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.state, self.reduced = np.zeros(2, np.int64), np.zeros(2, np.int64)
        self.senders, self.receivers, self.inbox = {}, {}, {}

    def route(self, ranges):
        """Every cut lane's sending and receiving rank, part ``k`` (nodes ``ranges[k]``) on rank ``k``."""
        for k, nodes in enumerate(ranges[:-1]):
            link = nodes.stop - 1
            self.senders[link, 0] = self.receivers[link, 1] = k
            self.senders[link, 1] = self.receivers[link, 0] = k + 1

    def exchange(self, sent, done, whole):
        """The lines to and from the neighbours and the parts' state (an allreduce of the max of
        ``done`` and of not ``whole``), all in flight at once."""
        self.state[:] = done, not whole
        requests = [self.comm.Iallreduce(self.state, self.reduced, op=self.mpi.MAX)]
        for lane, rank in self.senders.items():
            if self.receivers[lane] == self.rank:
                if lane not in self.inbox:
                    self.inbox[lane] = np.zeros_like(next(iter(sent.values())))
                requests.append(self.comm.Irecv(self.inbox[lane], source=rank, tag=_tag(lane)))
        for lane, rows in sent.items():
            requests.append(self.comm.Isend(rows, dest=self.receivers[lane], tag=_tag(lane)))
        self.mpi.Request.Waitall(requests)
        return self.inbox, int(self.reduced[0]), not self.reduced[1]

    def gather(self, value):
        return self.comm.gather(value, root=0)

    def wait_for_all(self):
        """A barrier that sleeps while it waits: a rank with nothing to do leaves the CPU to the
        ones still working (MPICH's blocking calls spin)."""
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(0.005)


def _tag(lane):
    link, end = lane
    return 2 * link + end


@dataclass
class PartStats:
    """Where one part's wall time went."""
    nodes: range
    cycles: int = 0
    windows: int = 0
    simulate: float = 0.0   # in its model
    exchange: float = 0.0   # in the transport (waiting for the other parts included)
    wall: float = 0.0       # the whole window loop
    cpu: float = 0.0


class Part:
    """One part's compiled model and the lanes it sends and receives."""

    def __init__(self, mapping, nodes, links, profile="fast", threads=1):
        self.top = top = ChainTop(mapping, None, 0.0, links, gateware_links=True, part=nodes)
        self.rams = list(top.param_rams())
        paths = [f"{name}.{path}" for name, *_, ram in self.rams for path in ram.memory_paths]
        ports = [f"link{c.link}_{c.side}_line_{way}" for c in top.lanes.cuts for way in ("in", "out")]
        self.model = VerilatedModel(top, paths, profile=profile, threads=threads, lines=ports, recipe=top.recipe)
        self.latency, self.lane_width = links.latency, links.lane_width
        self.sends = {}     # lane -> its line port here
        self.receives = {}  # lane -> its line port here
        for c in top.lanes.cuts:
            sending = 0 if c.side == "up" else 1
            self.sends[c.link, sending] = f"link{c.link}_{c.side}_line_out"
            self.receives[c.link, 1 - sending] = f"link{c.link}_{c.side}_line_in"
        self.used = False

    def start(self, params, feed, window):
        """A fresh model (the build reused) with ``params``' weights, fed ``feed``, exchanging
        every ``window`` cycles; every received lane's delay line full of idle lines."""
        if self.used:
            self.model.restart()
        self.used, self.window, self.done = True, window, _NOT_DONE
        self.stats = PartStats(self.top.part)
        self.buffers = self.model.lines(window)
        idle = IDLE_LOCKED << (self.lane_width + 1)  # no flit, locked: the lane's registers at reset
        self.delayed = {}  # lane -> the lines it carries into the next ``latency`` cycles here
        for lane, port in self.receives.items():
            words = self.buffers[port].shape[1]
            self.delayed[lane] = np.tile(np.frombuffer(idle.to_bytes(4 * words, "little"), np.uint32),
                                         (self.latency, 1))
        write_weights(self.model, self.rams, params)
        self.model.set("total_samples", feed.samples)
        if self.top.part.start == 0:
            self.model.push("act", feed.pixels)
            self.model.push("label", feed.labels)
        self.model.stop_when({f"updates_{n}": feed.updates for n in range(len(self.top.nodes))})
        for n in range(len(self.top.nodes)):
            self.model.record(f"entered_{n}")

    def begin_window(self, first):
        """Cycles ``first`` .. ``first + window - 1``: each received lane's next window of lines."""
        for lane, port in self.receives.items():
            self.buffers[port][:] = self.delayed[lane][:self.window]
        self.model.window(first, self.window)

    def run_until_done(self, end):
        """Up to cycle ``end`` or the cycle its own nodes are done, whichever comes first."""
        if self.done == _NOT_DONE:
            self.model.run(end - self.model.cycle)
            if self.model.cycle < end:  # (done on the window's last cycle: the next one stops at once)
                self.done = self.model.cycle
                self.model.stop_when({"updates_0": _NEVER})  # from now on it runs where it is told

    def run_to(self, end):
        self.model.run(end - self.model.cycle)
        assert self.model.cycle == end, f"part {self.top.part} stopped at {self.model.cycle}, not {end}"

    def sent(self):
        return {lane: self.buffers[port] for lane, port in self.sends.items()}

    def receive(self, lanes):
        for lane, rows in self.delayed.items():
            self.delayed[lane] = np.concatenate([rows[self.window:], lanes[lane]])

    def result(self, params):
        """What rank 0 needs of this part: final words, input events, link counters, stats."""
        final = initial_copy(params)
        read_weights(self.model, self.rams, final)
        events = {self.top.part.start + n: list(self.model.events(f"entered_{n}"))
                  for n in range(len(self.top.nodes))}
        return final, events, read_counters(self.model, self.top), self.stats

    def close(self):
        self.model.close()


def run_windows(parts, transport, deadline, progress=None, total_beats=1):
    """Every local part window by window until the whole chain is done: the cycle it is done on.

    One exchange per window carries the lines and each part's state: the cycle its nodes were
    done on (or not yet) and whether it ran the whole window. A part whose nodes are done waits
    where it is, since the chain may be done before the window's end; only in those last
    windows does a second exchange follow, of the lines once every part has run the window."""
    window = parts[0].window
    cycle, drawn = 0, 0.0
    started, cpu = time.monotonic(), time.process_time()
    while True:
        end = cycle + window
        t0 = time.perf_counter()
        for part in parts:
            part.begin_window(cycle)
            part.run_until_done(end)
        t1 = time.perf_counter()
        sent = {lane: rows for part in parts for lane, rows in part.sent().items()}
        whole = all(part.model.cycle == end for part in parts)
        received, done_at, whole = transport.exchange(sent, max(part.done for part in parts), whole)
        t2 = time.perf_counter()
        stop = done_at != _NOT_DONE
        cycle = done_at if stop else end
        for part in parts:
            part.run_to(cycle)
        t3 = time.perf_counter()
        if not (stop or whole):  # a part sent a window it had not run to its end
            received, _, _ = transport.exchange(sent, done_at, True)
        t4 = time.perf_counter()
        for part in parts:
            part.stats.simulate += (t1 - t0) + (t3 - t2)
            part.stats.exchange += (t2 - t1) + (t4 - t3)
            part.stats.windows += 1
        if stop:
            break
        if cycle >= deadline:
            raise AssertionError(f"simulation still running after {deadline} cycles")
        for part in parts:
            part.receive(received)
        if progress is not None and parts[0].top.part.start == 0 and t4 - drawn > 0.25:
            drawn = t4
            progress(parts[0].model.taken("act") / total_beats, cycle)
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    for part in parts:
        part.stats.cycles, part.stats.wall, part.stats.cpu = cycle, wall, cpu / len(parts)
    return cycle


@dataclass
class Distributed:
    """How to cut the chain: ``parts`` runs of nodes, ``window`` cycles per exchange (at most
    the lanes' latency), over ``transport`` (None: ``Loopback``, every part in this process;
    with an ``MpiTransport`` this rank's part only)."""
    parts: int
    window: int
    transport: object = None


def build_parts(mapping, links, distributed, profile="fast", threads=1):
    """This process's :class:`Part` of ``mapping``'s chain over ``links`` cut as ``distributed``
    says (every part with the ``Loopback`` transport)."""
    if links.node_mhz is not None:
        raise SpecError("a distributed chain runs every node on one clock (nodes on clocks of their own, "
                        "windows in link periods, are not built)")
    ranges = split(mapping, distributed.parts)
    transport = distributed.transport or Loopback()
    if transport.size > 1:
        if transport.size != len(ranges):
            raise SpecError(f"{transport.size} MPI ranks for {len(ranges)} parts: one part per rank")
        transport.route(ranges)
    local = ranges if transport.size == 1 else [ranges[transport.rank]]
    return [Part(mapping, nodes, links, profile, threads) for nodes in local]


def train_distributed(network, mapping, inputs, labels, params, links, distributed, *, deadline=200_000,
                      progress=None, profile="fast", threads=1, parts=None):
    """``sim.chain.train_chain`` on Verilator over ``links`` (a ``LinkedChain``, one clock),
    the chain cut into ``distributed.parts``: on rank 0 the ChainRun (with ``stats``, each
    part's ``PartStats``), None on the other ranks. ``parts``: this process's parts from
    ``build_parts`` (their builds reused, kept open), else built and closed here."""
    check_window(distributed.window, links.latency)
    transport = distributed.transport or Loopback()
    owned = parts is None
    if owned:
        parts = build_parts(mapping, links, distributed, profile, threads)
    feed = make_feed(mapping, inputs, labels, deadline)
    try:
        for part in parts:
            part.start(params, feed, distributed.window)
        transport.wait_for_all()  # the parts' builds take different times: wait without spinning
        if progress is not None:
            progress(0.0, 0)
        cycles = run_windows(parts, transport, deadline, progress, max(1, len(feed.pixels)))
        results = [part.result(params) for part in parts]
    finally:
        if owned:
            for part in parts:
                part.close()
    gathered = transport.gather(results)
    if transport.rank != 0:
        return None
    results = [result for rank in gathered for result in rank]
    final, events, counters = initial_copy(params), {}, {}
    for weights, part_events, part_counters, _ in results:
        for layer, (w, b) in weights.items():
            initial_w, initial_b = params[layer]
            moved = w != initial_w  # each word lives in one part: the others keep its initial value
            final[layer][0][moved] = w[moved]
            if b is not None:
                final[layer][1][b != initial_b] = b[b != initial_b]
        events.update(part_events)
        counters.update(part_counters)
    stats = [stats for *_, stats in results]
    run = finish_run(network, mapping, inputs, labels, params, final, cycles,
                     [events[n] for n in range(len(mapping.nodes))], max(s.wall for s in stats),
                     sum(s.cpu for s in stats), counters_by_link(counters))
    run.stats = stats
    return run


def same_run(a, b):
    """Where two runs of the same chain differ (final words, cycles, samples' entry cycles, link
    counters), as one line, or None."""
    if a.cycles != b.cycles:
        return f"cycles {a.cycles} against {b.cycles}"
    for layer, (w, bias) in a.params.items():
        if not np.array_equal(w, b.params[layer][0]) or (bias is not None and not np.array_equal(bias,
                                                                                               b.params[layer][1])):
            return f"{layer}'s final words"
    if a.sample_starts != b.sample_starts:
        return "the cycles samples entered the nodes"
    if list(a.link_counters) != list(b.link_counters):
        return f"link counters {list(a.link_counters)} against {list(b.link_counters)}"
    return None


def speed_report(run, one_process=None):
    """The speed line: simulated cycles per second per part, time per exchange, and the
    parallel efficiency (against ``one_process``'s rate when given, else the share of the
    wall time the parts spent simulating)."""
    stats = run.stats
    windows = stats[0].windows
    alone = ", ".join(f"{s.cycles / s.simulate / 1000:.0f}k" for s in stats)
    exchange = sum(s.exchange for s in stats) / len(stats) / max(1, windows)
    line = (f"speed: {len(stats)} parts, simulated cycles/s per part {run.cycles / run.seconds / 1000:.0f}k "
            f"(in their models alone {alone}); {windows} windows of {-(-run.cycles // max(1, windows))} cycles, "
            f"{exchange * 1e6:.0f} us per exchange; ")
    if one_process is not None:
        speedup = one_process.seconds / run.seconds if run.seconds else 0.0
        return line + (f"{speedup:.2f}x the one process's {one_process.cycles_per_second:,.0f} cycles/s, "
                       f"parallel efficiency {speedup / len(stats):.0%}")
    busy = sum(s.simulate for s in stats) / sum(s.wall for s in stats)
    return line + f"parallel efficiency {busy:.0%} (the parts' time in simulation)"
