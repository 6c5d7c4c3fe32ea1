"""A chain cut at its lanes into parts, one process (MPI rank) each (issue 44): the same final
words, cycles, sample timings and link counters as the chain in one process, with windows of 1,
half and all of the lanes' latency; a window longer than the latency and more parts than nodes
refused; a transport that delivers a window late caught by the comparison; and the command under
``mpiexec -n 2``.

The chain: micro on two nodes, lossy lanes (bit errors and a loss of lock, drawn at each sending
end, so the parts draw them as the one process does), 4 samples. Both parts are built once (the
"quick" profile, cached) and every run restarts them.
"""

import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from mapping import zoo
from mapping.errors import SpecError
from mapping.cluster import parse_cluster
from mapping.mapper import map_network
from sim.chain import STOPPING_UPDATE_OPTIONS, first_difference, train_chain
from sim.distributed import Distributed, Late, build_parts, same_run, split, train_distributed
from sim import train
from sim.train import parse_args, setup

LATENCY = 8


def _options(data):
    return ["--network", "micro", "--cluster", "lfe5um5g-45f:2", "--data", str(data), "--samples", "4",
            "--batch", "2", "--links", "--phy-latency", str(LATENCY), "--ber", "1e-3", "--lock-loss", "0:300:200",
            "--seed", "1", "--build", "quick"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """micro's inputs (1x6x6, 4 classes) as an .npz for ``--data``."""
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("micro") / "micro.npz"
    np.savez(path, x=rng.uniform(0, 1, (10, 1, 6, 6)), y=rng.integers(0, 4, 10))
    return path


@pytest.fixture(scope="module")
def chain(data):
    """The command's setup, its one-process run and the two parts, built once."""
    s = setup(parse_args(_options(data)))
    one = train_chain(s.network, s.mapping, s.inputs, s.labels, s.params, backend="verilator", profile="quick",
                      deadline=s.deadline, links=s.links)
    parts = build_parts(s.mapping, s.links, Distributed(2, LATENCY), profile="quick")
    yield s, one, parts
    for part in parts:
        part.close()


def _distributed(chain, window, transport=None):
    s, _, parts = chain
    return train_distributed(s.network, s.mapping, s.inputs, s.labels, s.params, s.links,
                             Distributed(2, window, transport), deadline=s.deadline, parts=parts)


def test_the_chain_in_one_process_trains_bit_exact_over_lossy_lanes_in_logic(chain):
    """The reference: both nodes and both lanes (hw/link/model_phy.py) in one model. Every word
    arrives (bit-exact), after replays and CRC errors at both ends and a retrain."""
    _, one, _ = chain
    assert first_difference(one) is None
    (up, down), = one.link_counters
    assert up["replays"] > 0 and down["replays"] > 0 and up["crc_errors"] > 0 and down["crc_errors"] > 0
    assert up["retrains"] + down["retrains"] >= 1


@pytest.mark.parametrize("window", [LATENCY, LATENCY // 2, 1])
def test_every_window_up_to_the_latency_gives_the_one_process_run(chain, window):
    _, one, _ = chain
    run = _distributed(chain, window)
    assert same_run(run, one) is None
    assert [s.windows for s in run.stats] == [run.cycles // window + 1] * 2


def test_a_transport_a_window_late_fails_the_comparison(chain):
    _, one, _ = chain
    assert same_run(_distributed(chain, LATENCY, Late()), one) is not None


def test_windows_longer_than_the_latency_and_more_parts_than_nodes_are_refused(chain):
    with pytest.raises(SpecError, match=rf"^--window {LATENCY + 1}: must be from 1 to the lane latency of "
                                        rf"{LATENCY} cycles \(the lookahead: "):
        _distributed(chain, LATENCY + 1)
    s, _, _ = chain
    with pytest.raises(SpecError, match=r"^3 parts for a chain of 2 nodes: from 1 to one part per node$"):
        split(s.mapping, 3)


def test_parts_of_about_equal_cost():
    mapping = map_network(zoo.lenet_digits(), parse_cluster("ecp5-85:5"), batch=8, lr=0.05, **STOPPING_UPDATE_OPTIONS)
    costs = [sum(s.multipliers for s in cfg.slices) for cfg in mapping.nodes]
    assert split(mapping, 1) == [range(0, 5)]
    parts = split(mapping, 2)
    assert parts[0].start == 0 and parts[0].stop == parts[1].start and parts[1].stop == 5
    # no other single cut makes the costlier part cheaper
    worst = max(sum(costs[p.start:p.stop]) + len(p) for p in parts)
    assert worst == min(max(sum(costs[:k]) + k, sum(costs[k:]) + 5 - k) for k in range(1, 5))


def test_the_command_on_two_mpi_ranks_is_the_one_process_run(chain, data):
    """``--no-compare``: the fixture's one-process run is the reference (the command's own
    comparison would elaborate the whole chain once more). ``mpiexec`` is the one the ``mpich``
    dependency installs beside this Python (or the first on the PATH)."""
    _, one, _ = chain
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    assert mpiexec is not None, "no mpiexec: pip install -e . installs the mpich package, which brings it"
    result = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "sim.train", *_options(data),
                             "--distributed", "--no-compare"], capture_output=True, text=True, timeout=600)
    print(result.stdout, result.stderr[-2000:])
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert "bit-exact: yes" in lines
    assert any(line.startswith(f"{one.cycles} cycles, ") for line in lines)
    (up, down), = one.link_counters
    assert "link 0: up " + ", ".join(f"{k} {v}" for k, v in up.items()) + "; down " + ", ".join(
        f"{k} {v}" for k, v in down.items()) in lines
    assert any(line.startswith("distributed: 2 parts (nodes 0..0, 1..1)") for line in lines)
    assert any(line.startswith("speed: 2 parts, simulated cycles/s per part ") for line in lines)


def test_more_mpi_ranks_than_nodes_are_refused(chain, data, monkeypatch):
    """As under ``mpiexec -n 3`` (every rank refuses alike; ``sim.train.main`` lets rank 0 say it)."""
    s, _, _ = chain
    monkeypatch.setattr(train, "mpi_transport", lambda: SimpleNamespace(size=3, rank=0))
    with pytest.raises(SpecError, match=r"^3 MPI ranks for a chain of 2 nodes: at most one rank per node$"):
        train.distributed_spec(parse_args([*_options(data), "--distributed"]), s.mapping)
