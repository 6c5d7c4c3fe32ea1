"""The host tool trains through the boards' UARTs (issue 14): host tool -> UART -> host interface ->
node chain -> UART -> host tool, at 2 clock cycles per UART bit (a real board runs 33 at 100 MHz
and 3 Mbaud; the UART logic is the same). Frames and pins bit by bit in Amaranth's simulator
(boards/simulated.py); the host tool's own command, and a whole training session across two
boards joined by their link cores, on the Verilator backend (sim/verilated_board.py)."""

import gc
import warnings

import pytest
from amaranth.hdl import ClockDomain, DomainRenamer, Module, UnusedElaboratable
from amaranth.sim import Simulator

from boards import protocol as p
from boards.client import BoardError, Client
from boards.host import main as host_main
from boards.host_interface import FrameReceiver, Trainer
from boards.simulated import SimulatedBoard
from hw.link.layer import COUNTER_NAMES
from hw.link.sim_phy import LaneErrors, SimulatedLane
from mapping import golden, zoo
from mapping.cluster import parse_cluster
from mapping.mapper import map_network
from sim.chain import CHAIN, CI_BITSTREAM, STOPPING_UPDATE_OPTIONS, assert_bit_exact
from sim.testbench import simulate
from sim.verilated_board import VerilatedBoards

BATCH, LR, SAMPLES = 3, 0.05, 6
DIVISOR = 2


def _mapping(network=zoo.tiny, cluster=CHAIN, batch=BATCH, **options):
    return map_network(network(), parse_cluster(cluster), batch=batch, lr=LR, **{**STOPPING_UPDATE_OPTIONS, **options})


def _trainer(network=zoo.tiny, cluster=CHAIN):
    mapping = _mapping(network, cluster)
    return mapping, Trainer(mapping, divisor=DIVISOR)


def test_frame_receiver_executes_a_frame_whose_crc_matches_and_refuses_the_others():
    """A frame's command, length, first 8 payload bytes and payload words (the frame buffer) for
    the executor, after the answer before it has left; a bit flipped or a frame too long for the
    buffer refused with its reason; the next frame taken after ``done``."""
    dut = FrameReceiver()
    payload = bytes(range(1, 13))
    flipped = bytearray(p.frame(p.Command.WRITE, payload))
    flipped[6] ^= 0x04
    too_long = p.frame(p.Command.IMAGE, bytes(p.MAX_PAYLOAD + 2))

    async def send(ctx, data):
        for byte in data:
            ctx.set(dut.bytes.payload, byte)
            ctx.set(dut.bytes.valid, 1)
            await ctx.tick()
            ctx.set(dut.bytes.valid, 0)
            await ctx.tick()  # a byte every other cycle, as from a UART

    async def verdict(ctx):
        """(execute, refuse, reason) of the one cycle that has either, then ``done``."""
        while not (ctx.get(dut.execute) or ctx.get(dut.refuse)):
            await ctx.tick()
        found = (ctx.get(dut.execute), ctx.get(dut.refuse), ctx.get(dut.reason))
        await ctx.tick()
        assert not (ctx.get(dut.execute) or ctx.get(dut.refuse))  # a pulse
        ctx.set(dut.done, 1)
        await ctx.tick()
        ctx.set(dut.done, 0)
        return found

    async def bench(ctx):
        ctx.set(dut.answering, 1)  # the answer to an earlier frame is still leaving
        await send(ctx, p.frame(p.Command.WRITE, payload))
        await ctx.tick().repeat(5)
        assert not ctx.get(dut.execute)
        ctx.set(dut.answering, 0)
        assert (await verdict(ctx))[:2] == (1, 0)
        assert (ctx.get(dut.command), ctx.get(dut.length)) == (p.Command.WRITE, len(payload))
        assert ctx.get(dut.args) == int.from_bytes(payload[:p.READ_HEADER], "little")
        words = []
        for addr in range(len(payload) // 2):
            ctx.set(dut.words.addr, addr)
            await ctx.tick()
            words.append(ctx.get(dut.words.data))
        assert words == [int.from_bytes(payload[i:i + 2], "little") for i in range(0, len(payload), 2)]
        await send(ctx, flipped)
        assert await verdict(ctx) == (0, 1, p.NakReason.CRC_ERROR)
        await send(ctx, too_long)
        assert await verdict(ctx) == (0, 1, p.NakReason.FRAME_TOO_LONG)
        await send(ctx, p.frame(p.Command.STATUS))
        assert (await verdict(ctx))[:2] == (1, 0) and ctx.get(dut.command) == p.Command.STATUS

    simulate(dut, bench, deadline=10_000)


def test_frames_refused_weights_written_and_read_back():
    """A corrupted frame is refused and counted, and never reaches the nodes; WRITE and READ
    reach any memory of any node and run on across its rows. (On the smallest chain, micro on
    two nodes: the frames do not depend on the network, the simulation time does.)"""
    mapping, trainer = _trainer(zoo.micro, "lfe5um5g-45f:2")
    board = SimulatedBoard(trainer)
    frame = bytearray(p.frame(p.Command.LABEL, p.words([1])))
    frame[4] ^= 0x10  # a bit flipped on the wire
    board.write(frame)
    assert p.parse_frames(board.read(7)) == ([(p.NAK, bytes([1]))], b"")
    client = Client([board], mapping, trainer.nodes)
    client.check()  # INFO: 2 nodes and their weight memories
    # node 1's fc bias RAM (memory 3): 4 rows of one word; its fc LPRAM (memory 2, rows of 2
    # lanes) from row 1, lane 1, on across five rows
    words = [-3, 7, 1000, -32768, 32767, 0, 5, 6, 9, 12]
    client.request(p.Command.WRITE, bytes([1, 3, 0, 0, 0, 0]) + p.words(words[:4]))
    client.request(p.Command.WRITE, bytes([1, 2, 1, 0, 1, 0]) + p.words(words))
    assert p.unwords(client.request(p.Command.READ, bytes([1, 3, 0, 0, 0, 0, 4, 0]))) == words[:4]
    assert p.unwords(client.request(p.Command.READ, bytes([1, 2, 1, 0, 0, 0, 12, 0]))) == [0] + words + [0]
    status = client.status()
    assert (status.frame_errors, status.error, status.training) == (1, True, False)
    assert [node["samples"] for node in status.nodes] == [0, 0]
    # Bad arguments are refused: a node past the chain, a READ of more words than a frame
    # holds, a START without both counts.
    for command, args in ((p.Command.WRITE, bytes([2, 0, 0, 0, 0, 0]) + p.words([1])),
                          (p.Command.READ, bytes([1, 3, 0, 0, 0, 0]) + p.words([p.MAX_PAYLOAD // 2 + 1])),
                          (p.Command.START, p.words([1, 0]))):
        with pytest.raises(BoardError, match=f"^board 0 refused command 0x{command:02x}: bad argument$"):
            client.request(command, args)


@pytest.mark.slow
def test_host_command_trains_through_a_serial_port_to_a_simulated_board(tmp_path, monkeypatch, capsys):
    """``python -m boards.host`` itself (its main), its serial port a simulated board on the
    Verilator backend that holds micro's two nodes (pyserial's Serial replaced by a port of
    the same shape): it checks the board, loads, trains one sample (one update, mini-batch
    1), reads back and finds the weights bit-exact with the golden model; the board's LEDs
    change as the session goes. (With --update overlapped and two samples its check failed
    against a golden model whose EB was not one sample behind; tests/test_boards.py maps a
    board with the option.)"""
    mapping = _mapping(zoo.micro, "lfe5um5g-45f:2", batch=1)
    (tmp_path / "mapping.json").write_text(mapping.to_json())
    opened = []

    class SimulatedPort:
        def __init__(self, name, baud, timeout):
            self.boards = VerilatedBoards([Trainer(mapping, divisor=DIVISOR)])
            (self.transport,) = self.boards.transports
            opened.append((name, baud, self))

        def write(self, data):
            self.transport.write(data)

        def read(self, count):
            return self.transport.read(count)

    monkeypatch.setattr("serial.Serial", SimulatedPort)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert host_main(["--port", "sim", "--board", "versa-ecp5-5g", "--mapping", str(tmp_path / "mapping.json"),
                          "--samples", "1", "--check"]) == 0
        gc.collect()
    # The tool's nodes serve for their memory layouts: no "never used" warning at the end.
    assert [str(w.message) for w in caught if w.category is UnusedElaboratable] == []
    out = capsys.readouterr().out
    assert [(name, baud) for name, baud, _ in opened] == [("sim", 3_000_000)]
    with opened[0][2].boards as board:
        # link up (no link leaves this board) from the start; training from START until the update
        assert board.leds(0) == [(1, 0, 0), (1, 1, 0), (1, 0, 0)]
    assert "loaded memory 6/6 (node 1, 4 x 1 words)" in out
    assert out.endswith("frames refused 0\nbit-exact with the golden model\n")


@pytest.mark.slow
def test_host_tool_trains_micro_bit_exact_on_two_boards_joined_by_their_link():
    """On the Verilator backend (sim/verilated_board.py), the host tool's whole session with
    two boards, one node each, as ``python -m boards.build --node 0`` and ``--node 1`` build
    them (micro on the CI bitstream's two nodes: the smallest chain with a link, so the
    quickest build): their link cores joined by a cable of a few registers. It checks which nodes each
    board holds (INFO), writes the initial weights of each node to its board (WRITE), streams
    the samples into the first board (LABEL, IMAGE; the second refuses them), waits for the
    last update (STATUS of both) and reads every weight back (READ): bit-exact with the golden
    model, the loss the last board reports is the golden model's, and the link trained and
    carried every stream without a replay or a CRC error. Then a second run from the weights
    the first left in memory: each run begins with STOP (the chain's reset; the weights keep
    their values), so it trains bit-exactly as the golden model does from the first's result,
    its counters from zero, its rounding noise from sample 0 (a board that trained before
    needs nothing else)."""
    network = zoo.micro()
    inputs, labels, params = golden.random_data(network, SAMPLES, 2)
    mapping = _mapping(zoo.micro, CI_BITSTREAM["cluster"], max_multipliers=CI_BITSTREAM["max_multipliers"])
    trainers = [Trainer(mapping, divisor=DIVISOR, nodes=range(n, n + 1)) for n in range(2)]
    assert [sorted(trainer.off_board) for trainer in trainers] == [["down"], ["up"]]
    with VerilatedBoards(trainers) as boards:
        client = Client(boards.transports, mapping, [node for trainer in trainers for node in trainer.nodes])
        client.check()
        assert client.held == [range(0, 1), range(1, 2)]
        with pytest.raises(BoardError, match="board 1 refused command 0x03: bad argument"):
            client.request(p.Command.LABEL, p.words([1]), board=1)
        client.load(params)
        status = client.train(inputs, labels, report_every=SAMPLES)
        final = client.read_back(params)
        print(f"\n{boards.cycles} cycles at {DIVISOR} cycles per UART bit")
        again_inputs, again_labels, _ = golden.random_data(network, BATCH, 3)
        again = client.train(again_inputs, again_labels)
        final_again = client.read_back(params)
    formats = mapping.nodes[0].formats
    expected, record = golden.train(network, params, inputs, labels, batch=BATCH, lr=LR, mode="fixed",
                                    formats=formats, fp_stale=mapping.fp_stale())
    assert_bit_exact(final, expected, params)
    expected_again, _ = golden.train(network, expected, again_inputs, again_labels, batch=BATCH, lr=LR, mode="fixed",
                                     formats=formats, fp_stale=mapping.fp_stale())
    assert_bit_exact(final_again, expected_again, expected)
    assert [(node["samples"], node["updates"]) for node in again.nodes] == [(BATCH, 1)] * 2
    assert status.links_up == [0b11, 0b11]
    assert [node["updates"] for node in status.nodes] == [SAMPLES // BATCH] * 2
    assert [node["samples"] for node in status.nodes] == [SAMPLES] * 2
    assert [(node["link_retries"], node["link_crc_errors"]) for node in status.nodes] == [(0, 0)] * 2
    assert (status.frame_errors, status.error) == (0, False)
    assert status.loss_samples == SAMPLES
    assert status.loss_squares / 2 ** (2 * formats.act_frac + 1) == pytest.approx(record.loss.sum(), rel=1e-12)


def test_boards_whose_links_run_on_their_transceivers_clocks_link_up():
    """Two boards of micro's two nodes as the VC709 builds them (``link_clock="phy"``: each link
    endpoint on a transceiver's word clock, its counters and link-up crossed into the node
    clock), joined by simulated lanes: nodes at 200 MHz, the link clocks 156.25 MHz and 50 ppm
    slower, each side receiving on its partner's. Both boards report the link up in the node
    clock's status, and keep it up without a rejected frame or a retraining."""
    mapping = _mapping(zoo.micro, CI_BITSTREAM["cluster"], max_multipliers=CI_BITSTREAM["max_multipliers"])
    top = Module()
    trainers = [Trainer(mapping, divisor=DIVISOR, nodes=range(n, n + 1), link_lane_width=32, link_clock="phy")
                for n in range(2)]
    for n, trainer in enumerate(trainers):
        top.submodules[f"board{n}"] = DomainRenamer({"sync": f"node{n}", "down_link": "link0", "down_link_rx": "link1",
                                                     "up_link": "link1", "up_link_rx": "link0"})(trainer)
    for domain in ("node0", "node1", "link0", "link1"):
        top.domains += ClockDomain(domain)
    down, up = trainers[0].down_phy, trainers[1].up_phy
    lanes = [SimulatedLane(32, 8, LaneErrors(), seed=1), SimulatedLane(32, 8, LaneErrors(), seed=2)]
    sim = Simulator(top)
    for domain, period in (("node0", 5e-9), ("node1", 5e-9), ("link0", 6.4e-9), ("link1", 6.4e-9 * (1 + 50e-6))):
        sim.add_clock(period, domain=domain)
    sim.add_process(lanes[0].process(down.tx, up.rx, up.rx_valid, up.rx_locked, "link0"))
    sim.add_process(lanes[1].process(up.tx, down.rx, down.rx_valid, down.rx_locked, "link1"))
    seen = []

    async def bench(ctx):
        for trainer in trainers:
            ctx.set(trainer.reset, 0)
        for cycle in range(3000):
            await ctx.tick("node0")
            if all(ctx.get(trainer.leds.link_up) for trainer in trainers):
                seen.append(cycle)
                break
        # and stays up, every control frame of 2000 cycles more (refreshes, every 512 link cycles) intact
        await ctx.tick("node0").repeat(2000)
        endpoints = [trainers[0].off_board["down"], trainers[1].off_board["up"]]
        counters = [{name: ctx.get(getattr(end.counters, name)) for name in COUNTER_NAMES} for end in endpoints]
        assert all(ctx.get(trainer.leds.link_up) for trainer in trainers)
        assert [(mine["crc_errors"], mine["replays"], mine["retrains"]) for mine in counters] == [(0, 0, 0)] * 2

    sim.add_testbench(bench)
    sim.run()
    assert seen, "the link did not come up in 3000 node cycles"
