"""The host tool trains through the board's UART (issue 14): host tool -> UART -> host interface ->
node chain -> UART -> host tool, in Amaranth's simulator (boards/simulated.py), at 2 clock cycles
per UART bit (a real board runs 33 at 100 MHz and 3 Mbaud; the UART logic is the same)."""

import numpy as np
import pytest

from boards import protocol as p
from boards.client import Client
from boards.host_interface import Trainer
from boards.simulated import SimulatedBoard
from mapping import golden, zoo
from mapping.cluster import parse_cluster
from mapping.mapper import GENERATOR_OPTIONS, map_network
from sim.chain import CHAIN, assert_bit_exact, stale_per_layer

BATCH, LR, SAMPLES = 3, 0.05, 6
DIVISOR = 2


def _board():
    mapping = map_network(zoo.tiny(), parse_cluster(CHAIN), batch=BATCH, lr=LR, **GENERATOR_OPTIONS)
    trainer = Trainer(mapping, divisor=DIVISOR)
    return mapping, trainer, SimulatedBoard(trainer)


def test_a_corrupted_frame_is_refused_and_counted():
    mapping, trainer, board = _board()
    frame = bytearray(p.frame(p.LABEL, p.words([1])))
    frame[4] ^= 0x10  # a bit flipped on the wire: the label must not reach node 0
    board.write(frame)
    assert p.parse_frames(board.read(7)) == ([(p.NAK, bytes([1]))], b"")
    client = Client(board, mapping, trainer.nodes)
    client.check()  # INFO: 4 nodes and their weight memories
    status = client.status()
    assert (status.frame_errors, status.error, status.training) == (1, True, False)
    assert [node["samples"] for node in status.nodes] == [0, 0, 0, 0]


@pytest.mark.slow
def test_host_tool_trains_tiny_bit_exact_through_the_uart():
    """Loads the initial weights (WRITE), streams the samples (LABEL, IMAGE), waits for the last
    update (STATUS) and reads every weight back (READ): bit-exact with the golden model, and the
    loss the board reports is the golden model's, exactly."""
    mapping, trainer, board = _board()
    network = zoo.tiny()
    inputs, labels, params = golden.random_data(network, SAMPLES, 1)
    client = Client(board, mapping, trainer.nodes)
    client.check()
    client.load(params)
    status = client.train(inputs, labels, report_every=SAMPLES)
    final = client.read_back(params)
    formats = mapping.nodes[0].formats
    expected, record = golden.train(network, params, inputs, labels, batch=BATCH, lr=LR, mode="fixed",
                                    formats=formats, fp_stale=stale_per_layer(mapping))
    assert_bit_exact(final, expected, params)
    assert [node["updates"] for node in status.nodes] == [SAMPLES // BATCH] * 4
    assert [node["samples"] for node in status.nodes] == [SAMPLES] * 4
    assert status.loss_samples == SAMPLES
    assert status.loss_squares / 2 ** (2 * formats.act_frac + 1) == pytest.approx(record.loss.sum(), rel=1e-12)
