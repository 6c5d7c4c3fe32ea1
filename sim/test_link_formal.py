"""SymbiYosys proofs of the link layer over a lane that drops and corrupts frames (hw/link/formal.py)."""

import pytest

from hw.link.formal import run

pytestmark = pytest.mark.formal


def test_in_order_exactly_once_bounded():
    """No word lost, duplicated or reordered on any channel, in every run of 28 cycles
    (training, several frames each way, bursts of one or two words, any drops and corruptions)."""
    passed, log = run("bmc", liveness=False, depth=28)
    assert passed, "\n".join(log)


def test_harness_delivers_on_both_channels_after_a_fault():
    """The proof is not vacuous: the solver can make B deliver a word of each channel after
    the lane has dropped or corrupted something."""
    passed, log = run("cover", liveness=False)
    assert passed, "\n".join(log)


def test_no_deadlock_bounded():
    """After 24 fault-free cycles with the receivers ready, a word that has been waiting as
    long has been delivered, whatever the lane did before (bounded to 32 cycles, so the faults
    fall in the first 8: training and the first frames)."""
    passed, log = run("bmc", liveness=True)
    assert passed, "\n".join(log)
