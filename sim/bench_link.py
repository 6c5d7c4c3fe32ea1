"""Link core figures (pytest -m bench -s sim/bench_link.py): efficiency at BER 0, 1e-6 and 1e-4
against the frame model, retries, and the ECP5 resources of one link core."""

import pytest

from hw.link.endpoint import LinkEndpoint
from hw.link.layer import LinkLayer
from hw.link.protocol import LinkConfig, frame_efficiency, sized_config
from hw.link.sim_phy import LaneErrors
from hw.synth import synthesize
from mapping import link_model
from sim.link import DEFAULT_CHANNELS, run_link

pytestmark = pytest.mark.bench


def test_efficiency_against_the_frame_model():
    config = sized_config(DEFAULT_CHANNELS, 16, 8)   # what python -m sim.link uses
    # All channels busy: one frame of each per round-robin round (the mapping's link model).
    traffic = [(1, width) for _, width in config.channels]
    control = config.frame_flits(None)
    bare = link_model.efficiency(traffic, config.lane_width, control, ack_interval=float("inf"),
                                 idle_interval=float("inf"))
    model = link_model.efficiency(traffic, config.lane_width, control, ack_interval=config.ack_interval,
                                  idle_interval=config.idle_interval)
    print(f"\nmapping's link model: {bare:.3f} without control frames and IDLEs, {model:.3f} with one "
          f"control frame per {config.ack_interval} cycles and an IDLE per {config.idle_interval} flits; "
          f"receive buffers {config.receive_depth} words, replay buffer "
          f"{config.replay_frames} frames; per channel alone: "
          + ", ".join(f"{name} {frame_efficiency(config, c):.3f}" for c, (name, _) in enumerate(config.channels)))
    for ber in (0.0, 1e-6, 1e-4):
        run = run_link(config, 2000, (LaneErrors(ber), LaneErrors(ber)), latency=8, seed=1)
        assert run.totals() == (0, 0, 0) and run.delivered == run.sent
        counters = run.counters
        print(f"BER {ber:g}: efficiency {run.efficiency(config.lane_width):.3f}, "
              f"replays {sum(c['replays'] for c in counters)}, "
              f"frames replayed {sum(c['frames_replayed'] for c in counters)}, "
              f"CRC errors {sum(c['crc_errors'] for c in counters)} "
              f"({run.delivered} words, {run.cycles} cycles; {run.efficiency(config.lane_width) / model:.3f} of the model)")


def test_resources_of_one_link_core():
    config = LinkConfig(DEFAULT_CHANNELS)
    for name, core in (("LinkLayer", LinkLayer(config)), ("LinkEndpoint", LinkEndpoint(config))):
        result = synthesize(core, "ecp5")
        print(f"\n{name} {dict(config.channels)}: {result.lut} LUT4, {result.ff} FF, {result.bram} DP16KD, "
              f"{result.cells.get('TRELLIS_DPR16X4', 0)} DPR16X4")
