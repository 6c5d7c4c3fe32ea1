"""Benchmark: the chain in one process against the same chain cut in two MPI ranks (issue 44).

    python -m sim.bench_distributed [--samples 400] [--phy-latency 16 64]

lenet-digits on two ECP5-85 nodes of about equal size (117 and 111 multipliers) over links,
trained on digits: ``python -m sim.train ... --links`` (one process) and
``mpiexec -n 2 python -m sim.train ... --links --distributed --no-compare`` for each lane
latency (the window, so the cycles between exchanges). Prints the simulated cycles per second
of both (the simulation alone: builds, weights and the golden model left out), the speed-up and
the parallel efficiency (speed-up / 2), each rank's time per exchange, and a projection to 15
and 85 ranks of one node each from the measured cost per window (see docs/design.md).
"""

import argparse
import math
import re
import subprocess
import sys

RATE = re.compile(r"simulated ([\d,]+) cycles/s")
CYCLES = re.compile(r"^(\d+) cycles, ", re.M)
EXCHANGE = re.compile(r"(\d+) us per exchange")
ALONE = re.compile(r"in their models alone ([\dk, ]+)\)")


def _train(latency, samples, ranks):
    command = [sys.executable, "-m", "sim.train", "--network", "lenet-digits", "--cluster", "ecp5-85:2",
               "--data", "digits", "--samples", str(samples), "--links", "--phy-latency", str(latency)]
    if ranks:
        command = ["mpiexec", "-n", str(ranks), *command, "--distributed", "--no-compare"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or "bit-exact: yes" not in result.stdout:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr[-3000:]}")
    return result.stdout


def project(ranks, window, node_rate, exchange_p2p, exchange_hop):
    """Cycles/s of a chain of ``ranks`` nodes, one a rank: a window of simulation at
    ``node_rate`` per node, then the neighbours' exchange and an allreduce of log2(ranks)
    steps; and its parallel efficiency (against one process simulating all nodes at
    ``node_rate / ranks``)."""
    compute = window / node_rate
    per_window = compute + exchange_p2p + math.ceil(math.log2(ranks)) * exchange_hop
    return window / per_window, compute / per_window


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--phy-latency", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args(argv)
    for latency in args.phy_latency:
        one = _train(latency, args.samples, 0)
        two = _train(latency, args.samples, 2)
        cycles = int(CYCLES.search(one).group(1))
        assert int(CYCLES.search(two).group(1)) == cycles, "the two runs took different cycles"
        rate_one = float(RATE.search(one).group(1).replace(",", ""))
        rate_two = float(RATE.search(two).group(1).replace(",", ""))
        exchange = float(EXCHANGE.search(two).group(1)) * 1e-6
        speed = next(line for line in two.splitlines() if line.startswith("speed:"))
        speedup = rate_two / rate_one
        print(f"lane latency {latency} (window {latency}): {cycles} cycles; one process {rate_one:,.0f} cycles/s, "
              f"2 ranks {rate_two:,.0f} cycles/s: {speedup:.2f}x, parallel efficiency {speedup / 2:.0%}")
        print(f"  {speed}")
        # a rank's model alone (one node) sets the cost per window; the exchange measured here
        # (waiting for the other rank included) is a neighbour exchange and a one-step
        # allreduce, each taken as half of it
        node_rate = min(float(r.strip().rstrip("k")) * 1000 for r in ALONE.search(two).group(1).split(","))
        for ranks in (15, 85):
            rate, efficiency = project(ranks, latency, node_rate, exchange / 2, exchange / 2)
            print(f"  projected, {ranks} ranks of one such node: {rate:,.0f} cycles/s, parallel efficiency "
                  f"{efficiency:.0%}")


if __name__ == "__main__":
    main()
