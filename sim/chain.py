"""Train a network on a simulated chain of nodes and compare with the golden model.

Shared by the chain tests, the benchmarks and ``python -m sim.train``: builds the
nodes of a mapping as one ``ChainTop`` (sim/chain_top.py), streams images and labels
into node 0, runs until every node has applied every mini-batch update, and reads the
final weights back out of the LPRAMs, bias RAMs and BPRAMs. Two backends drive the same
ports the same way, cycle by cycle: Amaranth's simulator (the reference) and Verilator
(sim/verilated.py), so both count the same cycles and train the same words.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from hw.base.layouts import packed_words
from hw.memory.param_ram import memory_contents, store_contents
from mapping import golden, numerics
from mapping.mapper import GENERATOR_OPTIONS
from sim.chain_links import decode_counters
from sim.chain_top import ChainTop
from sim.testbench import simulate
from sim.verilated import VerilatedModel


CHAIN = "ecp5-85:2+ecp5-45:2"  # the default chain of python -m hw.build
# micro on two 45F with at most 24 multipliers per node: node 0 (conv1's two output channels,
# its update in one lane) is the bitstream CI builds (tests/test_board_build.py), and
# sim/test_chain.py trains the chain.
CI_BITSTREAM = {"cluster": "lfe5um5g-45f:2", "max_multipliers": 24}
# Of the block RAM: node 3 of CHAIN keeps fc rows 2..5 on node 0, 6..7 on node 1 and 8..9 on
# node 2 (nodes 1 and 2 relay node 0's streams, node 2 node 1's) and the chain still runs at
# the unbalanced chain's 80 cycles per sample.
BALANCED_BRAM = 0.065
# The generator's mapping options with the weight update that stops the engines, for tests
# whose chain must not change with --update auto's choice (the overlapped update has tests of
# its own; the CI bitstream's chain and the command-line tools take auto's).
STOPPING_UPDATE_OPTIONS = {**GENERATOR_OPTIONS, "update": "stop"}


@dataclass
class ChainRun:
    params: dict            # final words per layer, golden layout
    cycles: int             # cycles until the last update of the last node
    sample_starts: dict     # node -> cycle at which each sample's first input beat entered
    golden: dict            # golden.train's final params
    record: object          # golden.TrainRecord
    seconds: float = 0.0    # wall-clock time of the simulation alone (build and golden model excluded)
    cpu_seconds: float = 0.0  # the process's CPU time in it (what a busy shared machine does not skew)
    link_counters: list = ()  # over links: per link, (upstream, downstream) endpoint counters
    # with trace_updates: (node, layer) -> the cycles each of the slice's updates started and
    # ended (its update gate's update_start and update_done)
    update_windows: dict = field(default_factory=dict)

    @property
    def cycles_per_second(self):
        return self.cycles / self.seconds if self.seconds else 0.0

    @property
    def cycles_per_cpu_second(self):
        return self.cycles / self.cpu_seconds if self.cpu_seconds else 0.0


def memory_row(words):
    """Signed 16-bit words as one memory row (an unsigned int, word 0 in the low bits)."""
    return packed_words([words])[0]


def _lanes(value, lanes):
    """A memory row (an unsigned int of ``lanes`` 16-bit words) as signed words."""
    words = [(value >> (numerics.WORD_BITS * k)) & 0xFFFF for k in range(lanes)]
    return [w - 0x10000 if w & 0x8000 else w for w in words]


def input_beats(config):
    """Beats of one sample on a node's up.act port."""
    first = config.slices[0]
    _, h, w = first.flatten_from if first.flatten_from is not None and first.first else first.in_shape
    return h * w


def assert_bit_exact(final, expected, initial):
    """Every ``final`` weight and bias equals the golden model's ``expected`` one (and training
    moved most of them from ``initial``)."""
    changed = sum(int((expected[layer][0] != w).sum()) for layer, (w, _) in initial.items())
    assert changed > 0.5 * sum(w.size for w, _ in initial.values()), "training barely moved the weights"
    for layer, (weights, bias) in expected.items():
        np.testing.assert_array_equal(final[layer][0], weights, err_msg=f"{layer} weights")
        if bias is not None:
            np.testing.assert_array_equal(final[layer][1], bias, err_msg=f"{layer} bias")


def first_difference(run):
    """Where the chain's final words first differ from the golden model's, as one line, or None."""
    for layer, (weights, bias) in run.golden.items():
        for kind, want, got in (("weight", weights, run.params[layer][0]), ("bias", bias, run.params[layer][1])):
            if want is None:
                continue
            differ = np.argwhere(np.asarray(got) != np.asarray(want))
            if len(differ):
                at = tuple(int(i) for i in differ[0])
                return (f"{layer} {kind} {list(at)}: chain {int(got[at])}, golden {int(want[at])} "
                        f"({len(differ)} of {want.size} words differ)")
    return None


@dataclass
class _Feed:
    """What the chain is given and when it is done."""
    pixels: list     # payloads of top.act
    labels: list     # payloads of top.label
    samples: int
    updates: int     # mini-batch updates every node applies
    deadline: int


def _run_pysim(top, feed, final, trace_updates):
    """Amaranth's simulator: one testbench drives the feeds cycle by cycle, exactly as the
    Verilator harness does, and reads the memories (and link counters) at the end. Input
    beats are counted on ``sync``, node 0's clock, also for nodes on clocks of their own.
    ``trace_updates``: also note the cycles every slice's update starts and ends."""
    count = len(top.nodes)
    events = [[] for _ in range(count)]
    state = {}
    gates = {(n, unit.slice.layer): unit.gate for n, node in enumerate(top.nodes) for unit in node.units
             } if trace_updates else {}
    starts, ends = {key: [] for key in gates}, {key: [] for key in gates}

    async def bench(ctx):
        state["started"] = time.monotonic(), time.process_time()  # elaboration is over
        ctx.set(top.total_samples, feed.samples)
        streams = ((top.act, feed.pixels), (top.label, feed.labels))
        taken = [0, 0]
        cycle = 0
        while True:
            for k, (port, items) in enumerate(streams):
                valid = taken[k] < len(items)
                ctx.set(port.valid, valid)
                if valid:
                    ctx.set(port.payload, items[taken[k]])
            if all(ctx.get(top.updates[n]) >= feed.updates for n in range(count)):
                break
            for n in range(count):
                if ctx.get(top.entered[n]):
                    events[n].append(cycle)
            for key, gate in gates.items():
                if ctx.get(gate.update_start):
                    starts[key].append(cycle)
                if ctx.get(gate.update_done):
                    ends[key].append(cycle)
            took = [ctx.get(port.valid) and ctx.get(port.ready) for port, _ in streams]
            await ctx.tick()
            taken = [t + bool(go) for t, go in zip(taken, took)]
            cycle += 1
        state["cycles"] = cycle
        state["ended"] = time.monotonic(), time.process_time()
        for name, s, bias, ram in top.param_rams():
            contents = [[int(v) for v in ctx.get(ram.mem.data[r])] for r in range(ram.rows)]
            store_contents(final, s, ram, contents, bias=bias)
        if top.lanes is not None:
            state["links"] = top.lanes.counters(ctx)

    lanes = top.lanes
    simulate(top, bench, deadline=feed.deadline, processes=lanes.processes() if lanes else (),
             clocks=lanes.clocks if lanes else None)
    (wall, cpu), (wall_end, cpu_end) = state["started"], state["ended"]
    windows = {key: list(zip(starts[key], ends[key])) for key in gates}
    return state["cycles"], events, wall_end - wall, cpu_end - cpu, state.get("links", ()), windows


# Cycles per call into the Verilator harness: between calls, the progress bar moves.
_VERILATOR_CHUNK = 200_000


def write_weights(model, rams, params):
    """The initial weights ``params`` into every copy of every ParamRam of ``rams``
    (``ChainTop.param_rams``) of a compiled ``model``."""
    for name, s, bias, ram in rams:
        width = numerics.WORD_BITS * ram.banks * ram.words
        initial = [memory_row(words) for words in memory_contents(params, s, ram, bias=bias)]
        for path in ram.memory_paths:  # every copy of the weights (VersionedParamRam)
            model.write_memory(f"{name}.{path}", initial, width)


def read_weights(model, rams, final):
    """The words of every ParamRam of ``rams`` in a compiled ``model`` into ``final`` (golden layout)."""
    for name, s, bias, ram in rams:
        lanes = ram.banks * ram.words
        contents = [_lanes(v, lanes) for v in model.read_memory(f"{name}.{ram.memory_paths[0]}", ram.rows,
                                                                numerics.WORD_BITS * lanes)]
        store_contents(final, s, ram, contents, bias=bias)


def read_counters(model, top):
    """{(link, end): {counter: value}} of every link endpoint ``top`` (a ChainTop) has."""
    return {(link, end): decode_counters(model.get(name), layout)
            for link, end, name, layout in (top.lanes.counter_ports() if top.lanes is not None else ())}


def counters_by_link(counters):
    """{(link, end): counters} as ``ChainRun.link_counters``: per link, (upstream, downstream)."""
    return [(counters[link, 0], counters[link, 1]) for link in sorted({link for link, _ in counters})]


def _run_verilator(top, params, feed, final, progress, profile, threads):
    """The Verilator backend: the chain compiled once (weights zero in the build, written
    through the VPI before the run, so any weights reuse it), and the link counters read
    from its outputs at the end."""
    rams = list(top.param_rams())
    count = len(top.nodes)
    paths = [f"{name}.{path}" for name, *_, ram in rams for path in ram.memory_paths]
    with VerilatedModel(top, paths, profile=profile, threads=threads, recipe=top.recipe) as model:
        started, cpu = time.monotonic(), time.process_time()
        write_weights(model, rams, params)
        model.set("total_samples", feed.samples)
        model.push("act", feed.pixels)
        model.push("label", feed.labels)
        model.stop_when({f"updates_{n}": feed.updates for n in range(count)})
        for n in range(count):
            model.record(f"entered_{n}")
        if progress is not None:
            progress(0.0, 0)
        while model.cycle < feed.deadline:
            ran = model.run(min(_VERILATOR_CHUNK, feed.deadline - model.cycle))
            if progress is not None:
                progress(model.taken("act") / max(1, len(feed.pixels)), model.cycle)
            if all(model.get(f"updates_{n}") >= feed.updates for n in range(count)):
                break
            if ran == 0:
                break
        else:
            raise AssertionError(f"simulation still running after {feed.deadline} cycles")
        read_weights(model, rams, final)
        seconds, cpu = time.monotonic() - started, time.process_time() - cpu
        return (model.cycle, [list(model.events(f"entered_{n}")) for n in range(count)], seconds, cpu,
                counters_by_link(read_counters(model, top)))


def make_feed(mapping, inputs, labels, deadline):
    """What the chain is given (images as node 0's input beats, labels) and when it is done."""
    samples = len(inputs)
    words = numerics.quantize(inputs, mapping.nodes[0].formats.act_frac)
    pixels = [list(map(int, words[s][:, y, x])) for s in range(samples)
              for y in range(words.shape[2]) for x in range(words.shape[3])]
    return _Feed(pixels, list(map(int, labels)), samples, samples // mapping.nodes[0].training.batch, deadline)


def initial_copy(params):
    """A copy of ``params`` to store the final words in."""
    return {name: (w.copy(), None if b is None else b.copy()) for name, (w, b) in params.items()}


def finish_run(network, mapping, inputs, labels, params, final, cycles, events, seconds=0.0, cpu=0.0,
               counters=(), windows=None):
    """The :class:`ChainRun` of a simulation that took ``cycles`` with ``events`` (per node, the
    cycles an input beat entered it), the golden model trained on the same data beside it."""
    config = mapping.nodes[0]
    beats = [input_beats(cfg) for cfg in mapping.nodes]
    starts = {n: [int(c) for c in events[n][::beats[n]]] for n in range(len(beats))}
    expected, record = golden.train(network, params, inputs, labels, batch=config.training.batch,
                                    lr=config.training.lr, mode="fixed", formats=config.formats,
                                    fp_stale=mapping.fp_stale(), eb_stale=mapping.eb_stale(),
                                    psum_cuts=golden.psum_cuts([s for cfg in mapping.nodes for s in cfg.slices]))
    return ChainRun(final, cycles, starts, expected, record, seconds, cpu, counters, windows or {})


def train_chain(network, mapping, inputs, labels, params, *, stall=0.0, deadline=200_000, backend="pysim",
                progress=None, profile="fast", threads=1, links=None, trace_updates=False):
    """Train on the simulated chain and run the golden model on the same data.

    ``stall``: probability that a link, or the image and label feed, idles on a cycle.
    ``backend``: "pysim" (Amaranth's simulator, the reference) or "verilator".
    ``progress``: called with (fraction of the input beats taken, cycles) during a Verilator run;
    ``profile``: its build, "fast" or "quick", and ``threads`` the model's (``sim.verilated``).
    ``links``: a ``sim.chain_links.LinkedChain``: neighbours joined through link cores over the
    simulation PHY (``stall`` then applies to the feeds only): Python lanes on Amaranth's
    simulator, lanes in logic on Verilator (hw/link/model_phy.py, every node on one clock).
    ``trace_updates``: note when each slice's weight update starts and ends
    (``ChainRun.update_windows``; Amaranth's simulator without ``links`` only).
    """
    feed = make_feed(mapping, inputs, labels, deadline)
    final = initial_copy(params)
    counters, windows = (), {}
    if trace_updates and (backend != "pysim" or links is not None):
        # a node on a clock of its own pulses its gate between node 0's clock edges
        raise ValueError("update traces come from the pysim backend, without link cores, only")
    if backend == "pysim":
        cycles, events, seconds, cpu, counters, windows = _run_pysim(ChainTop(mapping, params, stall, links), feed,
                                                                     final, trace_updates)
    elif backend == "verilator":
        cycles, events, seconds, cpu, counters = _run_verilator(ChainTop(mapping, None, stall, links, gateware_links=True),
                                                                params, feed, final, progress, profile, threads)
    else:
        raise ValueError(f"unknown simulation backend '{backend}' (known: pysim, verilator)")
    return finish_run(network, mapping, inputs, labels, params, final, cycles, events, seconds, cpu, counters, windows)


def cycles_per_sample(run, node):
    """Steady-state rate of ``node``: the median interval between samples entering it, over the
    second half of the run. The first samples enter at the rate of the nodes before it until
    the buffers behind a slower node downstream fill and push back."""
    intervals = np.diff(run.sample_starts[node])
    return float(np.median(intervals[len(intervals) // 2:])) if len(intervals) else 0.0


def mean_cycles_per_sample(run, node, batch=1):
    """Mean interval between samples entering ``node`` over whole mini-batches of ``batch``
    in the second half of the run: the rate with the updates in it (the median,
    ``cycles_per_sample``, leaves them out when a mini-batch has several samples); over the
    whole second half when it holds no whole mini-batch."""
    starts = run.sample_starts[node]
    intervals = len(starts) - 1 - len(starts) // 2
    span = intervals // batch * batch or intervals
    return (starts[-1] - starts[-1 - span]) / span if span else 0.0


def multiplier_utilisation(config, cycles):
    """Useful multiplies per sample over (multipliers x cycles per sample)."""
    useful = sum(s.out_shape[1] * s.out_shape[2] * s.out_channels * s.in_channels * s.kernel ** 2
                 * (3 if s.needs_eb else 2) for s in config.slices)
    multipliers = sum(s.multipliers for s in config.slices)
    return useful / (multipliers * cycles) if cycles else 0.0


# Samples a node must take before report() measures its rate: the rate comes from the second
# half of the intervals, after the buffers in front of a slower node downstream have filled.
RATE_SAMPLES = 8


def report(mapping, run):
    """Per node: the steady rate between updates and the mean rate with them, measured against
    the node's prediction (its own period, and with its own update walk; the chain runs at its
    slowest node's), and the multiplier utilisation."""
    lines = []
    for n, cfg in enumerate(mapping.nodes):
        entered = len(run.sample_starts[n])
        if entered < RATE_SAMPLES:
            # The first samples enter as fast as the buffers in front of the node take them.
            lines.append(f"node {n}: {cfg.cycles_per_sample} cycles/sample predicted, "
                         f"{cfg.cycles_per_sample_with_updates:.0f} with the weight updates; {entered} samples "
                         f"entered, too few to measure its rate (at least {RATE_SAMPLES})")
            continue
        measured = cycles_per_sample(run, n)
        lines.append(f"node {n}: {measured:.0f} cycles/sample measured, {cfg.cycles_per_sample} predicted; "
                     f"with the weight updates {mean_cycles_per_sample(run, n, cfg.training.batch):.0f} measured, "
                     f"{cfg.cycles_per_sample_with_updates:.0f} predicted; multiplier utilisation "
                     f"{multiplier_utilisation(cfg, measured):.1%}")
    slowest = max(cfg.cycles_per_sample_with_updates for cfg in mapping.nodes)
    lines.append(f"chain: {slowest:.0f} cycles/sample predicted with the weight updates (slowest node)")
    return "\n".join(lines)
