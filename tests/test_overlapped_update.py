"""The mapping of the update that does not stop the engines (``overlapped_update``,
docs/weight_versions.md): one more sample of staleness everywhere, three copies of the
weights and two gradient sums in the memory plan, and a rate that counts only the part of
a walk longer than a sample period."""

import re

import pytest

from mapping import memories, zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import GENERATOR_OPTIONS, map_network
from mapping.numerics import Formats
from mapping.__main__ import main as mapping_main

CHAIN = "ecp5-85:2+ecp5-45:2"


def _map(overlapped, batch=4, cluster=CHAIN, **options):
    return map_network(zoo.tiny(), parse_cluster(cluster), batch=batch, network_name="tiny",
                       **{**GENERATOR_OPTIONS, **options, "update": "overlapped" if overlapped else "stop"})


@pytest.mark.parametrize("batch, stalled, overlapped", [
    # conv1, conv2 (three nodes), fc: one sample staler, and conv2 (so conv1) may run up to
    # fc's + B + 1 ahead rather than fc's + B (mapping.perf.fp_stale): 5 rather than 4 at B = 1.
    (1, [[4, 3], [3], [3], [2]], [[6, 5], [5], [5], [3]]),
    (4, [[7, 6], [6], [6], [2]], [[9, 8], [8], [8], [3]]),
    (16, [[8, 7], [7], [7], [2]], [[9, 8], [8], [8], [3]]),
])
def test_every_layer_is_a_sample_staler(batch, stalled, overlapped):
    before, after = _map(False, batch), _map(True, batch)
    assert [[s.fp_stale for s in n.slices] for n in before.nodes] == stalled
    assert [[s.fp_stale for s in n.slices] for n in after.nodes] == overlapped
    assert all(s.overlapped_update for n in after.nodes for s in n.slices)
    assert not any(s.overlapped_update for n in before.nodes for s in n.slices)


def test_the_rate_counts_only_the_walk_past_a_sample_period():
    # Node 3's fc walk is 95 cycles against its 80-cycle period: 15 per mini-batch of 4
    # (stopping the engines, all 95); the conv nodes' walks fit in their periods overlapped,
    # so they cost nothing and get no lanes beyond the first (stopping, they are widened).
    stalled, overlapped = _map(False), _map(True)
    assert [n.update_cycles for n in overlapped.nodes] == [55, 63, 55, 95]
    assert [n.update_cycles for n in stalled.nodes] == [31, 31, 31, 95]
    assert [n.cycles_per_sample_with_updates for n in overlapped.nodes] == [80, 64, 64, 80 + 15 / 4]
    assert [n.cycles_per_sample_with_updates for n in stalled.nodes] == [80 + 31 / 4, 64 + 31 / 4, 64 + 31 / 4,
                                                                         80 + 95 / 4]


def test_at_a_mini_batch_of_one_the_walks_and_swaps_set_the_rate():
    # A walk starts only after the copies swapped behind the one before: 95 + 6 cycles per
    # sample at node 3, more than its engines' 80 + 15.
    assert [n.cycles_per_sample_with_updates for n in _map(True, batch=1).nodes] == [80, 64, 64, 101]


def test_memory_plan_holds_three_weight_copies_and_two_gradient_sums():
    mapping = _map(True)
    fc = mapping.nodes[3].slices[0]
    names = [mem.name for mem in memories.slice_memories(fc)]
    assert [n for n in names if n.startswith(("lpram", "lgb", "bias"))] == [
        "lpram.copy0", "lpram.copy1", "lpram.walk", "lgb.sums0", "lgb.sums1",
        "bias_ram.copy0", "bias_ram.copy1", "bias_ram.walk", "bias_lgb.sums0", "bias_lgb.sums1"]
    for node in mapping.nodes:  # what the mapper planned is what hw/ builds
        assert memories.node_bram_blocks(node) == node.estimate.bram_blocks
    # node 3's fc Act-RAM (pixels of the 8 channels fc flattens) 4 of them
    assert [n.estimate.bram_blocks for n in mapping.nodes] == [3, 4, 5, 26]
    assert [n.estimate.bram_blocks for n in _map(False).nodes] == [3, 4, 5, 14]


def test_the_bias_walk_reads_its_own_copy():
    # Stopping the engines, the bias walk reads and writes through one port of the bias RAM, a
    # cycle per address more; with a copy of its own, a word per cycle.
    fc_stalled, fc = _map(False).nodes[3].slices[0], _map(True).nodes[3].slices[0]
    assert fc.bias_update_cycles(1) == fc_stalled.bias_update_cycles(1) - 10  # 10 addresses of one bias


def test_mapping_cli_writes_the_option(tmp_path, capsys):
    mapping_main(["--network", "tiny", "--cluster", CHAIN, "--for-hardware", "--update", "overlapped",
                  "--out", str(tmp_path)])
    assert '"overlapped_update": true' in (tmp_path / "mapping.json").read_text()
    assert "with the weight update's walks (overlapped) at mini-batch 1)" in capsys.readouterr().out


def test_auto_takes_the_overlapped_update_where_the_chain_runs_faster_with_it():
    # tiny on four VC709s: the walks set the period (200 MHz / (80 + 95) stopping the engines,
    # 200 MHz / 101 beside them); on the default chain the links set it either way (556,200
    # samples/s at its default 16-bit sums), and the model alone counts no walks.
    def rates(cluster, **options):
        auto, stop = (map_network(zoo.tiny(), parse_cluster(cluster), **{**GENERATOR_OPTIONS, **options,
                                                                        "update": update})
                      for update in ("auto", "stop"))
        return auto.eb_stale(), round(auto.summary["samples_per_s_with_updates"]), round(
            stop.summary["samples_per_s_with_updates"])

    assert rates("vc709:4") == (1, 1980198, 1142857)
    assert rates(CHAIN, formats=Formats(grad_bits=16)) == (0, 556200, 556200)
    model = map_network(zoo.tiny(), parse_cluster("vc709:4"), update="auto")
    assert model.eb_stale() == 0 and "samples_per_s_with_updates" not in model.summary


@pytest.mark.parametrize("update, error, message", [
    ("sometimes", SpecError, "update must be one of stop, overlapped, auto, not 'sometimes'"),
    (True, TypeError, "update must be one of stop, overlapped, auto, not True"),
])
def test_an_unknown_update_policy_is_refused_by_name(update, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        map_network(zoo.tiny(), parse_cluster(CHAIN), update=update)
