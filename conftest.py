# Repository root on sys.path so tests import `sim.testbench` and the packages in place.

import gc
import time
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable

from hw.synth import compile_yosys, yosys_compiled


def pytest_configure(config):
    """Under -n 2, hand tests to workers one at a time: xdist's default first hands each worker
    a quarter of its share in one block, so one worker took every slow test (they come first,
    below) and the suite ran as long as their sum."""
    if config.pluginmanager.hasplugin("xdist") and getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    """Slow tests first: with -n 2 the long synthesis runs then overlap the short tests
    instead of leaving one worker alone with them at the end (same order in every worker)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionstart(session):
    """Compile YoWASP's Yosys once, before xdist starts its workers: on a fresh machine each
    worker's first synthesis compiled it at the same time (measured: one compile 40 s of CPU
    in 23 s, two at once 44 s of CPU each in 49 s)."""
    if hasattr(session.config, "workerinput") or yosys_compiled():
        return
    started = time.monotonic()
    compile_yosys(lambda line, flush: print(line, "...", end=" ", flush=flush))
    print(f"{time.monotonic() - started:.0f} s", flush=True)


@pytest.fixture
def unelaborated():
    """For a test that builds components only for their ports, or has them refused before
    elaboration: Amaranth warns (UnusedElaboratable) when such an object is collected, which
    would happen, with no filter in force, in some later test; this collects them as the test
    ends, the warning off."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        gc.collect()
