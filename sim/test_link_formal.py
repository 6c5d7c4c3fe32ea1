"""Model checks of the link layer over a lane that drops and corrupts frames (hw/link/formal.py),
with ABC (PDR and BMC) linked into YoWASP's Yosys."""

import pytest

from hw.link.formal import LOSS_DEPTH, run

pytestmark = pytest.mark.formal


def test_in_order_exactly_once_bounded():
    """No word lost, duplicated or reordered on any channel, in every run of LOSS_DEPTH cycles
    (training, several frames each way, bursts of one or two words, any drops and corruptions):
    the shortest run in which a dropped frame's successor is delivered is 29 cycles, so a
    receiver that took a frame after a gap fails here (28 cycles did not see it). Not
    subsumed by the unbounded proof, which does not reach the words (see docs/link_protocol.md)."""
    passed, log = run("bmc", liveness=False, depth=LOSS_DEPTH)
    assert passed, "\n".join(log)


def test_replay_window_unbounded():
    """At any depth (PDR), on bursts of two over a two-frame replay ring with two credits and any
    drops and corruptions: A never has more frames unacknowledged than its replay buffer holds,
    never sends outside its window, and B always expects a frame of A's window (it has
    acknowledged nothing A still holds and expects nothing A has not sent)."""
    passed, log = run("prove")
    assert passed, "\n".join(log)


def test_harness_delivers_on_both_channels_after_a_fault():
    """The proof is not vacuous: the solver can make B deliver the marked word of each channel
    after the lane has dropped or corrupted something."""
    passed, log = run("cover", liveness=False)
    assert passed, "\n".join(log)


def test_no_deadlock_bounded():
    """After 24 fault-free cycles with the receivers ready, a word that has been waiting as
    long has been delivered, whatever the lane did before (bounded to 32 cycles, so the faults
    fall in the first 8: training and the first frames)."""
    passed, log = run("bmc", liveness=True)
    assert passed, "\n".join(log)
