"""Train a network on a simulated chain of nodes and compare with the golden model.

Shared by the chain tests and the chain benchmark: builds the nodes of a
mapping, connects them port to port, streams images and labels into node 0,
runs until every node has applied every mini-batch update, and reads the
final weights back out of the LPRAMs and bias RAMs.
"""

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module

from hw.node.top import Node, connect_chain
from mapping import golden, numerics
from sim.stall import stalling_link
from sim.testbench import put, simulate


CHAIN = "ecp5-85:2+ecp5-45:2"  # the default chain of python -m hw.build
# Of the block RAM: node 3 of CHAIN keeps fc rows 2..5 on node 0, 6..7 on node 1 and 8..9 on
# node 2 (nodes 1 and 2 relay node 0's streams, node 2 node 1's) and the chain still runs at
# the unbalanced chain's 80 cycles per sample.
BALANCED_BRAM = 0.065


@dataclass
class ChainRun:
    params: dict            # final words per layer, golden layout
    cycles: int             # cycles until the last update of the last node
    sample_starts: dict     # node -> cycle at which each sample's first input beat entered
    golden: dict            # golden.train's final params
    record: object          # golden.TrainRecord


def _read_ram(ctx, ram):
    """A ParamRam's rows as an array (rows * banks, words)."""
    rows = [[int(v) for v in ctx.get(ram.mem.data[r])] for r in range(ram.rows)]
    return np.asarray(rows, dtype=np.int64).reshape(ram.rows * ram.banks, ram.words)


def _store_rows(ctx, rows, ram, params):
    """The weights of LayerSlice ``rows`` held in ParamRam ``ram`` into ``params``."""
    (olo, ohi), (ilo, ihi) = rows.out_range, rows.in_range
    weights, _ = params[rows.layer]
    shaped = weights.reshape(weights.shape[0], rows.in_shape[0], rows.kernel, rows.kernel)
    shaped[olo:ohi, ilo:ihi] = ram.layout.unfold(_read_ram(ctx, ram))


def _store_node(ctx, node, params):
    """Every weight a node keeps (its slices' local rows, the rows it hosts) and its biases."""
    for unit in node.units:
        if unit.lpram is not None:
            _store_rows(ctx, unit.remote.local, unit.lpram, params)
        if unit.bias_ram is not None:
            olo, ohi = unit.slice.out_range
            params[unit.slice.layer][1][olo:ohi] = _read_ram(ctx, unit.bias_ram)[:ohi - olo, 0]
    for host in node.hosted:
        _store_rows(ctx, host.rows, host.bpram, params)


def input_beats(config):
    """Beats of one sample on a node's up.act port."""
    first = config.slices[0]
    _, h, w = first.flatten_from if first.flatten_from is not None and first.first else first.in_shape
    return h * w


def random_data(network, samples, seed):
    """Random images, labels and initial parameters for ``samples`` samples of ``network``."""
    rng = np.random.default_rng(seed)
    inputs = rng.random((samples, *network.input_shape))
    labels = rng.integers(0, network.num_classes, samples)
    params = golden.init_params(network, rng, numerics.Formats())
    return inputs, labels, params


def assert_bit_exact(run, initial):
    """Every final weight and bias of the chain equals the golden model's (and training moved most)."""
    changed = sum(int((run.golden[layer][0] != w).sum()) for layer, (w, _) in initial.items())
    assert changed > 0.5 * sum(w.size for w, _ in initial.values()), "training barely moved the weights"
    for layer, (weights, bias) in run.golden.items():
        np.testing.assert_array_equal(run.params[layer][0], weights, err_msg=f"{layer} weights")
        if bias is not None:
            np.testing.assert_array_equal(run.params[layer][1], bias, err_msg=f"{layer} bias")


def train_chain(network, mapping, inputs, labels, params, *, rng=None, stall=0.0, deadline=200_000):
    """Train on the simulated chain.

    ``stall``: probability that a link, or the image and label feed, idles on a cycle.
    """
    config = mapping.nodes[0]
    batch, lr, formats = config.training.batch, config.training.lr, config.formats
    nodes = [Node(cfg, params=params) for cfg in mapping.nodes]
    top = Module()
    for n, node in enumerate(nodes):
        top.submodules[f"node{n}"] = node
    connect_chain(top, nodes, link=stalling_link(stall) if stall else None)

    samples = len(inputs)
    words = numerics.quantize(inputs, formats.act_frac)
    pixels = [list(map(int, words[s][:, y, x])) for s in range(samples)
              for y in range(words.shape[2]) for x in range(words.shape[3])]
    final = {name: (w.copy(), None if b is None else b.copy()) for name, (w, b) in params.items()}
    state = {"cycles": 0}

    async def images(ctx):
        for node in nodes:
            ctx.set(node.total_samples, samples)
        await put(ctx, nodes[0].up.act, pixels, rng, stall)

    async def label_feed(ctx):
        await put(ctx, nodes[0].up.label, list(map(int, labels)), rng, stall)

    starts = {n: [] for n in range(len(nodes))}
    beats = [input_beats(cfg) for cfg in mapping.nodes]
    seen = [0] * len(nodes)

    async def finish(ctx):
        cycle = 0
        while any(ctx.get(node.updates) < samples // batch for node in nodes):
            for n, node in enumerate(nodes):
                if ctx.get(node.up.act.valid) and ctx.get(node.up.act.ready):
                    if seen[n] % beats[n] == 0:
                        starts[n].append(cycle)
                    seen[n] += 1
            await ctx.tick()
            cycle += 1
        state["cycles"] = cycle
        for node in nodes:
            _store_node(ctx, node, final)

    simulate(top, images, label_feed, finish, deadline=deadline)
    expected, record = golden.train(network, params, inputs, labels, batch=batch, lr=lr, mode="fixed",
                                    formats=formats, fp_stale=mapping.fp_stale())
    return ChainRun(final, state["cycles"], starts, expected, record)


def cycles_per_sample(run, node):
    """Steady-state rate of ``node``: the median interval between samples entering it, over the
    second half of the run. The first samples enter at the rate of the nodes before it until
    the buffers behind a slower node downstream fill and push back."""
    intervals = np.diff(run.sample_starts[node])
    return float(np.median(intervals[len(intervals) // 2:])) if len(intervals) else 0.0


def multiplier_utilisation(config, cycles):
    """Useful multiplies per sample over (multipliers x cycles per sample)."""
    useful = sum(s.out_shape[1] * s.out_shape[2] * s.out_channels * s.in_channels * s.kernel ** 2
                 * (3 if s.needs_eb else 2) for s in config.slices)
    multipliers = sum(s.multipliers for s in config.slices)
    return useful / (multipliers * cycles) if cycles else 0.0


def report(mapping, run):
    lines = []
    for n, cfg in enumerate(mapping.nodes):
        measured = cycles_per_sample(run, n)
        lines.append(f"node {n}: {measured:.0f} cycles/sample measured, {cfg.cycles_per_sample} predicted, "
                     f"multiplier utilisation {multiplier_utilisation(cfg, measured):.1%}")
    return "\n".join(lines)
