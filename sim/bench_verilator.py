"""Benchmark: simulated cycles per second of Amaranth's simulator and of the Verilator
backend, for one node (tiny, whole, on one vc709) and for the default 4-node chain, while
training; and samples per second of ``python -m sim.train``'s run on lenet-digits.

Run with ``python -m pytest sim/bench_verilator.py -m bench -s -p no:xdist``. Figures are
the simulation alone (builds, elaboration and the golden model excluded), per wall-clock
second and per CPU second of the process (the machine is shared: the wall figure drops
with the load, the CPU figure much less); the Verilator builds are the "fast" profile,
cached after the first run.
"""

import numpy as np
import pytest

from mapping import data, golden, numerics, zoo
from mapping.cluster import parse_cluster
from mapping.golden import random_data
from mapping.mapper import map_network
from sim.chain import CHAIN, STOPPING_UPDATE_OPTIONS, first_difference, train_chain

# Samples per run: enough for a second of Verilator, a quarter of a minute of pysim; in
# mini-batches of BATCH, so the figures include the weight updates.
SAMPLES = {"pysim": 8, "verilator": 400}
BATCH = 8


@pytest.mark.bench
@pytest.mark.parametrize("backend", ["pysim", "verilator"])
@pytest.mark.parametrize("cluster", ["vc709:1", CHAIN])
def test_simulated_cycles_per_second(cluster, backend):
    network = zoo.tiny()
    samples = SAMPLES[backend]
    mapping = map_network(network, parse_cluster(cluster), batch=BATCH, lr=0.05, **STOPPING_UPDATE_OPTIONS)
    inputs, labels, params = random_data(network, samples, 5)
    run = train_chain(network, mapping, inputs, labels, params, backend=backend, deadline=400 * samples)
    assert first_difference(run) is None
    print(f"\ntiny on {cluster} ({len(mapping.nodes)} node(s)), {backend}: {run.cycles} cycles in "
          f"{run.seconds:.2f} s = {run.cycles_per_second:,.0f} cycles/s "
          f"({run.cycles_per_cpu_second:,.0f} per CPU second)")


@pytest.mark.bench
def test_sim_train_samples_per_second_on_lenet_digits():
    network = zoo.lenet_digits()
    mapping = map_network(network, parse_cluster("ecp5-85:3"), batch=BATCH, lr=0.01, **STOPPING_UPDATE_OPTIONS)
    dataset = data.load(data.DIGITS, network.input_shape, network.num_classes)
    samples = 496
    params = golden.init_params(network, np.random.default_rng(0), numerics.Formats())
    run = train_chain(network, mapping, dataset.train_x[:samples], dataset.train_y[:samples], params,
                      backend="verilator", deadline=2_000_000)
    assert first_difference(run) is None
    print(f"\nlenet-digits on ecp5-85:3, verilator: {samples} samples in {run.seconds:.2f} s = "
          f"{samples / run.seconds:.0f} samples/s, {run.cycles_per_second:,.0f} cycles/s "
          f"({run.cycles_per_cpu_second:,.0f} per CPU second)")
