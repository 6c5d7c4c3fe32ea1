"""The lane in logic (hw/link/model_phy.py): its latency, its error rate and bursts, its loss of lock."""

import pytest

from hw.link.model_phy import ModelLane, event_threshold
from sim.testbench import simulate

CYCLES = 3000


def _run(lane, flit_of):
    """Drive ``flit_of(cycle)`` into ``lane`` for CYCLES cycles; (sent, seen, locked) per cycle."""
    sent, seen, locked = [], [], []

    async def bench(ctx):
        for cycle in range(CYCLES):
            flit = flit_of(cycle)
            ctx.set(lane.tx.data, flit & 0xFFFF)
            ctx.set(lane.tx.ctrl, flit >> 16)
            sent.append(flit)
            seen.append(ctx.get(lane.rx.data) | ctx.get(lane.rx.ctrl) << 16)
            locked.append(ctx.get(lane.rx_locked))
            await ctx.tick()

    simulate(lane, bench)
    return sent, seen, locked


def test_a_clean_lane_delays_every_flit_by_its_latency():
    sent, seen, locked = _run(ModelLane(16, latency=3), lambda c: (c * 40503) % (1 << 17))
    assert seen[3:] == sent[:-3] and all(locked)


@pytest.mark.parametrize("burst", [1, 4])
def test_errors_come_at_the_rate_and_in_the_bursts_asked_for(burst):
    """ber 1e-2 on 17-bit flits: an event in 15.7% of flits (467 of 2,997 expected, a standard
    deviation of 20), each flipping the first and last bit of its burst (fewer where the flit ends)."""
    sent, seen, _ = _run(ModelLane(16, latency=1, ber=1e-2, burst=burst, seed=5), lambda c: c % (1 << 17))
    flips = [a ^ b for a, b in zip(sent, seen[1:])]
    hit = [f for f in flips if f]
    assert abs(len(hit) - 2997 * (1 - 0.99 ** 17)) < 80
    assert all(bin(f).count("1") <= burst for f in hit)
    low = min(f & -f for f in hit).bit_length() - 1  # the lowest bit any event flipped
    spans = [f.bit_length() - (f & -f).bit_length() + 1 for f in hit]
    assert low == 0 and max(spans) == burst and 1 << 16 in {f & (1 << 16) for f in hit}
    assert event_threshold(1e-2, 17) == round((1 - 0.99 ** 17) * 2 ** 32)


def test_a_loss_of_lock_shows_noise_for_its_cycles():
    sent, seen, locked = _run(ModelLane(16, latency=2, lock_loss=(1000, 250)), lambda c: 0x1_2345)
    # counted on the sender's cycles: the receiver sees it the lane's 2 cycles later
    assert [c for c, ok in enumerate(locked) if not ok] == list(range(1002, 1252))
    noise = seen[1002:1252]
    assert len(set(noise)) > 200 and seen[1252:] == sent[1250:-2]


def test_parameters_refused_by_name():
    with pytest.raises(ValueError, match=r"^ModelLane: burst = 18 must be from 1 to the 17 bits of a flit$"):
        ModelLane(16, burst=18)
    with pytest.raises(ValueError, match=r"^ModelLane: ber = 1 must be at least 0 and below 1$"):
        ModelLane(16, ber=1)
