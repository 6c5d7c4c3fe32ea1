"""Convolution engine figures (a benchmark, not a unit test).

Run with ``python -m pytest sim/bench_conv_engine.py -m bench -s``. Prints:
- steady-state multiplier utilisation, useful multiplies / (multipliers x cycles), for
  3x3 layers with continuous input (the paper's nodes reached about 80% DSP use);
- the Amaranth simulator's speed in cycles per second for a CE of 36 multipliers;
- that CE's Fmax on an ECP5-85 (LFE5UM5G-85F, CABGA381, speed 8) from nextpnr, with
  the MULT18X18D primitive and its registers (hw.arith.mult, family "ecp5") and with the
  multiply left for Yosys to infer (family None).
"""

import time

import numpy as np
import pytest

from hw.engines.fp_engine import FPEngine
from hw.synth import place_and_route
from sim.helpers import run_engine

pytestmark = pytest.mark.bench


def utilisation(channels, kernel, ces, out_channels, size, samples=2):
    """Useful multiplies / (multipliers x cycles) between the first and the last partial sum."""
    run = run_engine(channels=channels, kernel=kernel, ces=ces, out_channels=out_channels, size=size,
                     padding=kernel // 2, rng=np.random.default_rng(1), samples=samples)
    np.testing.assert_array_equal(run.got, run.want)
    multipliers = ces * channels * kernel * kernel
    useful = samples * size * size * out_channels * channels * kernel * kernel
    steady = run.transfers[-1] - run.transfers[0] + 1
    total = run.transfers[-1]  # from the first window offered, fill and drain included
    return useful / (multipliers * steady), useful / (multipliers * total), multipliers


def test_steady_state_utilisation():
    print("\nconv engine multiplier utilisation, 3x3 layers, continuous input, 2 samples")
    print(f"{'S':>3} {'P':>3} {'OC':>4} {'map':>5} {'mults':>6} {'steady':>8} {'with fill':>10}")
    for channels, ces, out_channels, size in ((4, 4, 16, 8), (3, 2, 8, 6), (4, 4, 10, 8)):
        steady, total, mults = utilisation(channels, 3, ces, out_channels, size)
        print(f"{channels:3d} {ces:3d} {out_channels:4d} {size:3d}^2 {mults:6d} {steady:8.1%} {total:10.1%}")
        if out_channels % ces == 0:
            assert steady >= 0.95
    print("(OC = 10 on P = 4: the last group of each pixel has 2 idle CEs, so at most 10/12)")


def test_simulator_speed():
    """Cycles per second of simulation proper: the difference of a short and a long run
    removes elaboration and golden-model time."""
    timings = []
    for size in (8, 24):
        started = time.perf_counter()
        run = run_engine(channels=4, kernel=3, ces=1, out_channels=1, size=size, padding=1,
                         rng=np.random.default_rng(2), deadline=size * size + 20)
        np.testing.assert_array_equal(run.got, run.want)
        timings.append((run.simulated, time.perf_counter() - started))
    (short, t_short), (long, t_long) = timings
    print(f"\nAmaranth simulator, CE of 36 multipliers (S=4, K=3, P=1), busy every cycle: "
          f"{(long - short) / (t_long - t_short):,.0f} cycles/s")


def fmax(family):
    """Place and route a CE of 36 multipliers on the ECP5-85 and return nextpnr's Fmax (MHz)."""
    engine = FPEngine(channels=4, kernel=3, ces=1, out_channels=8, family=family)
    return place_and_route(engine, "lfe5um5g-85f", freq_mhz=200).fmax


def test_fmax_ecp5_primitive_and_inferred():
    primitive, inferred = fmax("ecp5"), fmax(None)
    print(f"\nCE of 36 multipliers on LFE5UM5G-85F-8 (nextpnr, out of context):\n"
          f"  MULT18X18D instantiated with its registers: {primitive:6.1f} MHz\n"
          f"  multiply inferred by Yosys:                 {inferred:6.1f} MHz")
