"""boards/: the board list, the host protocol's frames and CRC, boards.build's refusals, the link pins,
the host client's checks."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.back import rtlil

import hw
from boards import protocol as p
from boards.boards import BOARDS, board_list, get_board
from boards.build import (BuildResult, ProjectResult, board_mapping, held_nodes, parse_args, place_and_route,
                          router2_divergence)
from boards.build import main as build_main
from boards.client import BoardError, Client
from boards.host_interface import Trainer
from boards.host import main as host_main
from boards.link_pins import SIDES, _pads, _resource_pins, plan_link_pins
from boards.top import BoardTop, ecppll_at_least
from hw.link.ddr_phy import data_pins
from hw.memory.fifo import Fifo
from hw.synth import CriticalPath, ToolStopped, late_endpoints, yosys_rtlil
from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.devices import get_device
from mapping.errors import SpecError, run_cli
from mapping.mapper import GENERATOR_OPTIONS, map_network
from tests.cli_refusal import refusal


def test_every_board_names_a_device_of_the_mapping():
    assert list(BOARDS) == ["versa-ecp5-5g", "ecp5-5g-evn", "ulx3s-85f", "vc709"]
    for board in BOARDS.values():
        assert get_device(board.device).family == board.family
    assert board_list().splitlines()[0].startswith("versa-ecp5-5g  lfe5um5g-45f  100 MHz oscillator")


def test_crc_is_the_catalogue_algorithm():
    # CRC-16/IBM-3740's check value (the CRC of "123456789") in the CRC catalogue is 0x29B1
    assert p.crc16(b"123456789") == 0x29B1


def test_frame_layout_and_parse():
    frame = p.frame(p.Command.LABEL, p.words([3, -2]))
    assert frame[:4] == bytes([0xA5, 0x03, 4, 0]) and frame[4:8] == bytes([3, 0, 0xFE, 0xFF])
    assert frame[8:] == p.crc16(frame[1:8]).to_bytes(2, "big")
    frames, rest = p.parse_frames(frame + frame[:5])
    assert frames == [(p.Command.LABEL, p.words([3, -2]))] and rest == frame[:5]
    corrupted = frame[:5] + bytes([frame[5] ^ 1]) + frame[6:]
    with pytest.raises(p.ProtocolError, match="bad CRC"):
        p.parse_frames(corrupted)


def test_nak_reasons_in_words():
    assert [p.nak_reason(bytes([reason.value])) for reason in p.NakReason] == [
        "crc error", "frame too long", "unknown command", "bad argument"]
    assert (p.nak_reason(b"\x09"), p.nak_reason(b"")) == ("reason 9", "no reason")


def test_status_unpacks_every_field():
    payload = bytes([1, 0, 0b10]) + (7).to_bytes(4, "little") + (1 << 40).to_bytes(8, "little") + \
        (6).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") for v in (6, 2, 1645, 0, 0))
    status = p.Status.unpack(payload, 1)
    assert (status.training, status.error, status.links_up, status.frame_errors, status.loss_squares,
            status.loss_samples) == (True, False, 0b10, 7, 1 << 40, 6)
    assert status.nodes == [{"samples": 6, "updates": 2, "cycles": 1645, "link_retries": 0, "link_crc_errors": 0}]
    assert status.loss(act_frac=8) == (1 << 40) / 2 ** 17 / 6


def test_a_board_is_mapped_with_the_update_that_does_not_stop_the_engines_when_asked():
    board = get_board("versa-ecp5-5g")
    stalled = board_mapping(parse_args(["--board", "versa-ecp5-5g", "--node", "0", "--update", "stop"]), board)
    overlapped = board_mapping(parse_args(["--board", "versa-ecp5-5g", "--node", "0", "--update", "overlapped"]), board)
    assert (stalled.eb_stale(), overlapped.eb_stale()) == (0, 1)
    assert all(overlapped.fp_stale()[layer] > stale for layer, stale in stalled.fp_stale().items())


@pytest.mark.parametrize("argv, message", [
    (["--board", "de10-nano", "--node", "0"],
     "unknown board 'de10-nano' (known: versa-ecp5-5g, ecp5-5g-evn, ulx3s-85f, vc709)"),
    (["--board", "versa-ecp5-5g", "--chain"],
     "the chain needs 183 dsp (the mapping's estimate, with the link cores), lfe5um5g-45f on versa-ecp5-5g has 72"),
    (["--board", "versa-ecp5-5g", "--node", "0", "--cluster", "ecp5-85:4"],
     "node 0 of the mapping is for lfe5um5g-85f, board versa-ecp5-5g carries lfe5um5g-45f"),
    (["--board", "versa-ecp5-5g", "--node", "4"], "no node 4: the mapping has nodes 0..3"),
    (["--board", "versa-ecp5-5g", "--node", "0", "--clock", "nan"],
     "argument --clock: must be a positive finite number, got 'nan' (see python -m boards.build --help)"),
    (["--board", "ecp5-5g-evn", "--node", "0", "--clock", "1000"],
     "no EHXPLLL setting makes 1000 MHz or a little more from 12 MHz"),
    (["--board", "versa-ecp5-5g", "--node", "0", "--late", "0"],
     "argument --late: must be a positive integer, got '0' (see python -m boards.build --help)"),
    (["--board", "versa-ecp5-5g", "--node", "0,1", "--program"], "--program loads one board: give one --node"),
    (["--board", "versa-ecp5-5g", "--node", "0,0"],
     "argument --node: 0 is listed twice in '0,0' (see python -m boards.build --help)"),
    (["--board", "vc709", "--node", "0", "--program"],
     "--program: the vc709's bitstream is built by Vivado from the project this writes (open tools have no "
     "database for the xc7vx690t); program it from Vivado's hardware manager"),
])
@pytest.mark.usefixtures("unelaborated")  # the board top of the PLL's refusal
def test_build_refuses_in_one_line(argv, message, capsys):
    assert refusal(build_main, argv, capsys) == f"error: {message}"


def test_late_endpoints_group_a_registers_mapped_cells_and_skip_other_clocks():
    def end(cell, arrival, event="posedge $glbnet$clk"):
        return {"cell": cell, "port": "DI", "event": event, "delay": [0.5, arrival]}

    report = {"detailed_net_timings": [
        {"net": "a", "endpoints": [end("slice.fifo.level_TRELLIS_FF_Q", 9.1), end("slice.fifo.level_TRELLIS_FF_Q_2", 8.5),
                                   end("slice.fifo.full_TRELLIS_FF_Q", 7.9)]},
        {"net": "b", "endpoints": [end("lgb.mem.0.62$RAMW_SLICE$conn$WDO3", 8.2), end("lgb.delayed$87", 8.1),
                                   end("rx.data_TRELLIS_FF_Q", 9.9, "posedge $glbnet$rx_clk")]},
    ]}
    assert late_endpoints(report, "$glbnet$clk", 8.0) == [
        ("slice.fifo.level", 2, 9.1), ("lgb.mem.0.62", 1, 8.2), ("lgb.delayed$87", 1, 8.1)]
    with pytest.raises(ValueError, match="no detailed net timings"):
        late_endpoints({"critical_paths": []}, "$glbnet$clk", 8.0)


def test_netlists_name_the_projects_sources_relative_to_the_checkout():
    # So the synthesis and bitstream caches, keyed by the netlist, serve any checkout, and the
    # worst path names the project's lines (nextpnr reports the netlist's source attributes).
    text = rtlil.convert(Fifo(8, 4))
    checkout = Path(hw.__file__).absolute().parents[1]
    assert f'src "{checkout}/hw/memory/fifo.py:' in text
    portable = yosys_rtlil(text)
    assert str(checkout) not in portable and 'src "hw/memory/fifo.py:' in portable
    assert yosys_rtlil(f'attribute \\src "{checkout}/a.py:1|{checkout}/b.py:2"\nwire \\x[0]') == \
        'attribute \\src "a.py:1|b.py:2"\nwire \\x(0)'

    def hop(kind, delay, sources=()):
        return {"type": kind, "delay": delay, "from": {"cell": "a", "port": "Q"}, "to": {"cell": "b", "port": "D"},
                "sources": list(sources)}

    path = CriticalPath.from_report({"path": [
        hop("clk-to-q", 0.5), hop("routing", 3.0, ["hw/memory/fifo.py:40", "/usr/lib/amaranth/lib/stream.py:9"]),
        hop("logic", 0.25), hop("routing", 1.0, ["hw/memory/fifo.py:40", "hw/base/counter.py:7"])]})
    assert (path.logic_ns, path.routing_ns) == (0.75, 4.0)
    assert path.origins == ("hw/memory/fifo.py:40", "hw/base/counter.py:7")


def test_a_chain_of_smaller_devices_fits_one_85f():
    # tiny on two 45F nodes: 99 multipliers and about 50k LUT4 by the estimate, within the 85F's 156
    args = parse_args(["--board", "ulx3s-85f", "--chain", "--network", "tiny", "--cluster", "lfe5um5g-45f:2"])
    board = get_board("ulx3s-85f")
    assert list(held_nodes(args, board_mapping(args, board), board)) == [0, 1]


def test_a_chain_of_micro_on_two_25f_nodes_fits_the_versa():
    # 36 multipliers, about 21k LUT4 and 8.6k more for the on-chip link: the Versa's 45F
    # holds a chain whose nodes talk through link cores
    args = parse_args(["--board", "versa-ecp5-5g", "--chain", "--network", "micro", "--cluster", "lfe5um5g-25f:2"])
    board = get_board("versa-ecp5-5g")
    assert list(held_nodes(args, board_mapping(args, board), board)) == [0, 1]


def _stand_in_build(args, log=print):
    """boards.build.build for the test below: a node's build as its result and output, no tools
    (node 3 as a board whose bitstream Vivado makes gets its project)."""
    log(f"building node {args.node}")
    if args.node == 2:
        raise SpecError("no node 2 here")
    folder = Path(args.out) / f"versa-ecp5-5g-node{args.node}"
    if args.node == 3:
        return ProjectResult(folder)
    return BuildResult(folder, 1.0, None, "clk", 110.0 - 20 * args.node, 100.0, None)


def test_several_nodes_build_on_worker_processes_each_into_its_log(monkeypatch, tmp_path, capsys):
    """--node 0,1,2,3 --jobs 2: one build per node (here a stand-in; the real one is
    tests/test_board_build.py's), each in a worker process with its output in its log, a line
    per node as it finishes; node 1 missing timing and node 2 refused make exit status 2."""
    import boards.build
    monkeypatch.setattr(boards.build, "build", _stand_in_build)
    with pytest.raises(SystemExit) as exit:
        run_cli(lambda: build_main(["--board", "versa-ecp5-5g", "--node", "0,1,2,3", "--jobs", "2", "--out",
                                    str(tmp_path)]))
    out, err = capsys.readouterr()
    assert (exit.value.code, err) == (2, "error: node 2 refused (their logs say why)\n")
    assert out.splitlines()[0] == (f"versa-ecp5-5g: building nodes 0, 1, 2, 3, 2 at a time; each build's output "
                                   f"in {tmp_path}/versa-ecp5-5g-node{{N}}.log")
    finished = sorted(line.split(": ", 1) for line in out.splitlines()[1:])
    assert [(head.split()[1], tail) for head, tail in finished] == [
        ("0", f"110.0 MHz of 100 (met), bitstream {tmp_path}/versa-ecp5-5g-node0/top.bit"),
        ("1", f"90.0 MHz of 100 (NOT met), bitstream {tmp_path}/versa-ecp5-5g-node1/top.bit"),
        ("2", "refused: no node 2 here"),
        ("3", f"Vivado project in {tmp_path}/versa-ecp5-5g-node3")]
    for node in range(3):
        assert (tmp_path / f"versa-ecp5-5g-node{node}.log").read_text().startswith(f"building node {node}\n")
    assert (tmp_path / "versa-ecp5-5g-node2.log").read_text().endswith("error: no node 2 here\n")


def test_program_says_how_to_get_openfpgaloader(monkeypatch, tmp_path):
    import boards.build
    from boards.boards import get_board
    from mapping.errors import SpecError
    monkeypatch.setattr(boards.build.shutil, "which", lambda name: None)
    with pytest.raises(SpecError) as error:
        boards.build.program(get_board("ulx3s-85f"), tmp_path / "top.bit", print)
    assert str(error.value) == ("openFPGALoader is not installed (Debian/Ubuntu: apt install openfpgaloader; "
                                f"or https://github.com/trabucayre/openFPGALoader); the bitstream is {tmp_path}/top.bit")


ROUTER2_FAILURE = ("ERROR: Failed to route arc 0.0 of net 'trainer.chain_reset', "
                   "from X40/Y2/Q0_SLICE to X0/Y0/G_CLKI_TDCC0.")


# router2's overused wires, iteration by iteration, on tiny's one-board chain on the ULX3S
# (docs/boards.md) with its timing-driven rip-up: down to 1,576 at iteration 26, then up.
TINY_CHAIN_ROUTER2 = [88922, 55365, 37022, 25174, 18662, 14532, 11571, 9313, 7759, 6421, 5292, 4336,
                      3828, 3431, 3096, 2749, 2479, 2251, 2126, 1996, 1916, 1757, 1742, 1634, 1610,
                      1576, 1622, 1590, 1658, 1628, 1705, 1629, 1693, 1869, 1858, 1950, 2186, 2521,
                      2677, 2959, 3338, 3709, 4155, 4560, 5224, 6025, 7019]


def router2_lines(overused):
    """router2's progress lines, as nextpnr-ecp5 0.11 prints them, for these overused counts."""
    return [f"Info:     iter={i} wires=1594611 overused={n} overuse={n + 30} tmgfail=1854 archfail=NA\n"
            for i, n in enumerate(overused, 1)]


def fake_nextpnr(monkeypatch, failing, message=ROUTER2_FAILURE, output=()):
    """boards.build's nextpnr calls, answered by a stand-in that prints ``output`` (lines shown
    to run_tool's watch, which may stop it) and then fails with ``message`` (by default router2's
    of the CI node at 549c014) for the routers in ``failing``."""
    calls = []

    def run_tool(tool, module, entry, argv, work, log, progress=None, watch=None):
        router = argv[argv.index("--router") + 1]
        calls.append(router)
        (work / log).write_text("".join(output))
        for line in output:
            if watch is not None and (reason := watch(line)):
                raise ToolStopped(reason)
        (work / log).write_text(message if router in failing else f"Info: routed by {router}\n")
        if router in failing:
            raise RuntimeError("nextpnr failed (exit status 1)")
    monkeypatch.setattr("boards.build.run_tool", run_tool)
    return calls


def test_a_design_router2_cannot_route_is_routed_by_router1(monkeypatch, tmp_path):
    calls, lines = fake_nextpnr(monkeypatch, {"router2"}), []
    place_and_route(tmp_path, [], "router2", None, lines.append)
    assert calls == ["router2", "router1"]
    assert lines == ["router2 could not route an arc (Failed to route arc 0.0 of net 'trainer.chain_reset', "
                     "from X40/Y2/Q0_SLICE to X0/Y0/G_CLKI_TDCC0.); routing again with router1"]
    assert (tmp_path / "nextpnr-router2.log").read_text() == ROUTER2_FAILURE
    assert (tmp_path / "nextpnr.log").read_text() == "Info: routed by router1\n"


def test_router2_that_diverges_is_stopped_and_the_design_routed_by_router1(monkeypatch, tmp_path):
    calls, lines = fake_nextpnr(monkeypatch, set(), output=router2_lines(TINY_CHAIN_ROUTER2)), []
    place_and_route(tmp_path, [], "router2", None, lines.append)
    assert calls == ["router2", "router1"]
    assert lines == ["router2 does not converge (its overused wires grew from 1576 at iteration 26 to 6025 "
                     "at iteration 46); routing again with router1"]
    assert (tmp_path / "nextpnr-router2.log").read_text() == "".join(router2_lines(TINY_CHAIN_ROUTER2))
    assert (tmp_path / "nextpnr.log").read_text() == "Info: routed by router1\n"


@pytest.mark.parametrize("overused", [
    [9000, 4800] + [4810, 4790] * 50,    # stalled (the default mapping's node 0), not growing
    [3000, 0] + [0, 40, 900, 0] * 50,    # cleared, then a few wires at a time while it rips up for timing
    TINY_CHAIN_ROUTER2[:45],             # growing, but 19 iterations past its fewest
], ids=["stalled", "cleared", "not-yet"])
def test_router2_is_left_alone_unless_its_overuse_grows_for_twenty_iterations(overused):
    watch = router2_divergence()
    assert [watch(line) for line in router2_lines(overused) + ["Info: Routing complete.\n"]] == [None] * (len(overused) + 1)


@pytest.mark.parametrize("router, message", [("router1", ROUTER2_FAILURE),
                                             ("router2", "ERROR: Unable to place cell 'x'")])
def test_other_nextpnr_failures_are_errors(monkeypatch, tmp_path, router, message):
    # router1 has no fallback, and router2 failing for another reason is not retried
    calls = fake_nextpnr(monkeypatch, {router}, message)
    with pytest.raises(RuntimeError, match="nextpnr failed"):
        place_and_route(tmp_path, [], router, None, print)
    assert calls == [router]


@pytest.mark.parametrize("name", ["versa-ecp5-5g", "ecp5-5g-evn", "ulx3s-85f"])
def test_link_pins_of_every_ecp5_board(name):
    """Both sides of the board-to-board link on the board's headers: 9 data pins each way (a
    16-bit flit and its control flag at DDR), the received clock on a primary clock pin (its
    function in Project Trellis's pad table), no pin twice, none that the board wires to
    something else, all at one I/O standard per side."""
    board = BOARDS[name]
    platform = board.platform()
    plans = plan_link_pins(board, platform, SIDES, data_pins(16))
    assert [plan.side for plan in plans] == ["up", "down"]
    pads = _pads(platform.device, "CABGA381")
    used = [pin for plan in plans for pin in (*plan.tx_data, plan.tx_clk, *plan.rx_data, plan.rx_clk)]
    assert len(used) == len(set(used)) == 40
    wired = {pin for key in (("uart", 0), ("led", 0), (board.clock, 0))
             for pin in _resource_pins(platform.resources[key])}
    assert not wired & set(used)
    for plan in plans:
        assert (len(plan.tx_data), len(plan.rx_data)) == (9, 9)
        assert pads[plan.rx_clk][1].startswith("PCLKT")
        assert pads[plan.rx_clk][0] == pads[plan.rx_data[0]][0]  # received data in the clock's bank
        assert len(plan.table()) == 20


def test_versa_link_pins_are_pinned():
    """A cable made for one build fits every later one: the Versa's plan, pin for pin."""
    up, down = plan_link_pins(BOARDS["versa-ecp5-5g"], BOARDS["versa-ecp5-5g"].platform(), SIDES, 9)
    assert (up.rx_clk, up.tx_clk, down.rx_clk, down.tx_clk) == ("D11", "C16", "B12", "E9")
    assert up.rx_data == ("A12", "A13", "B13", "C13", "D13", "E13", "A14", "C14", "D14")
    assert down.tx_data == ("A9", "B10", "A7", "B9", "E6", "D6", "E7", "D7", "B6")
    assert up.places["D11"] == "expcon 2 pin 13" and up.io_type == "LVCMOS33"


def test_a_header_too_small_for_the_link_is_refused():
    board = replace(BOARDS["versa-ecp5-5g"], link_headers=(("expcon", 1),))
    with pytest.raises(SpecError, match=r"^board versa-ecp5-5g: 17 free LVCMOS33 pins on expcon 1, the up link "
                                        r"needs 20$"):
        plan_link_pins(board, board.platform(), SIDES, 9)


def test_a_node_of_a_longer_chain_has_its_link_on_the_planned_header_pins():
    """Node 1 of micro's two-node chain on the Versa: its up link's PHY on the plan's pins, the
    received clock constrained at the node clock (nextpnr times the input registers on it)."""
    board = get_board("versa-ecp5-5g")
    mapping = board_mapping(SimpleNamespace(network="micro", cluster="lfe5um5g-45f:2", mapping=None, loss=None,
                                            update=None),
                            board)
    top = BoardTop(board, mapping, range(1, 2), 100)
    assert list(top.links) == ["up"] and list(top.trainer.off_board) == ["up"]
    lpf = board.platform().prepare(top, name="top").files["top.lpf"].splitlines()
    assert 'LOCATE COMP "link_up_0__rx_clk__io" SITE "D11";' in lpf
    assert 'LOCATE COMP "link_up_0__tx_data__io[0]" SITE "E14";' in lpf
    assert 'FREQUENCY PORT "link_up_0__rx_clk__io" 100000000.0 HZ;' in lpf
    assert sum("link_up_0__" in line and line.startswith("LOCATE") for line in lpf) == 20


@pytest.mark.parametrize("oscillator, asked, made, dividers", [
    (12, 125, 126.0, (2, 21, 5)),   # the EVN: ecppll's nearest is 124, below the node clock
    (12, 100, 100.0, (3, 25, 6)),
    (25, 60, 60.0, (5, 12, 10)),    # the ULX3S
])
def test_the_pll_never_runs_the_node_slower_than_asked(oscillator, asked, made, dividers):
    params, achieved = ecppll_at_least(oscillator, asked)
    assert achieved == made
    assert (params["CLKI_DIV"], params["CLKFB_DIV"], params["CLKOP_DIV"]) == dividers


def test_host_command_refuses_a_port_it_cannot_open(monkeypatch, capsys):
    import serial

    def unopenable(name, baud, timeout):
        raise serial.SerialException(f"could not open port {name}")

    monkeypatch.setattr("serial.Serial", unopenable)
    argv = ["--port", "/dev/ttyUSB1", "--port", "/dev/ttyUSB7", "--board", "versa-ecp5-5g", "--network", "micro",
            "--cluster", "lfe5um5g-45f:2"]
    assert refusal(host_main, argv, capsys) == "error: cannot open /dev/ttyUSB1: could not open port /dev/ttyUSB1"


class _ScriptedBoard:
    """A transport that answers INFO and STATUS as a board holding nodes ``first..first+count-1``
    (one weight memory each) whose links are ``links_up``."""

    def __init__(self, first, count, links_up):
        self.first, self.count, self.links_up, self.answer = first, count, links_up, b""

    def write(self, data):
        (command, _), = p.parse_frames(data)[0]
        if command == p.Command.INFO:
            payload = bytes([self.first, self.count] + [1] * self.count)
        else:
            payload = bytes([0, 0, self.links_up]) + bytes(16) + bytes(20 * self.count)
        self.answer += p.frame(command | p.REPLY, payload)

    def read(self, count):
        data, self.answer = self.answer[:count], self.answer[count:]
        return data


@pytest.mark.parametrize("boards, message", [
    ([(0, 1, 0b11), (1, 1, 0b01), (2, 1, 0b11)], "board 1's down link is down: is the cable to board 2 in"),
    ([(0, 1, 0b11), (1, 2, 0b10)], "board 1's up link is down: is the cable to board 0 in"),
    ([(1, 2, 0b11), (0, 1, 0b11)], "board 0 holds nodes 1..2, expected node 0 next: give the boards' ports in "
                                   "chain order"),
    ([(0, 2, 0b11)], "the boards hold nodes 0..1, the mapping has 3"),
])
def test_client_refuses_boards_out_of_order_missing_or_with_a_link_down(boards, message):
    """A chain of three nodes (one weight memory each) on scripted boards."""
    class Node:
        memories = [None]

    client = Client([_ScriptedBoard(*board) for board in boards], None, [Node()] * 3)
    with pytest.raises(BoardError) as refused:
        client.check()
    assert str(refused.value).startswith(message)


def test_a_node_must_fit_with_a_link_core_per_neighbouring_board(monkeypatch):
    """Node 2 of four on the Versa has a neighbouring board on each side: its estimate plus two
    link cores (4,300 LUT4 each) must fit the device, or the build is refused."""
    board = get_board("versa-ecp5-5g")
    args = parse_args(["--board", "versa-ecp5-5g", "--node", "2"])
    mapping = board_mapping(args, board)
    lut = mapping.nodes[2].estimate.lut + 2 * 4_300
    device = get_device(board.device)
    monkeypatch.setattr("boards.build.get_device", lambda name: replace(device, lut=lut))
    assert list(held_nodes(args, mapping, board)) == [2]
    monkeypatch.setattr("boards.build.get_device", lambda name: replace(device, lut=lut - 1))
    with pytest.raises(SpecError, match=rf"^node 2 needs {lut} lut \(the mapping's estimate, with the link cores\), "
                                        rf"lfe5um5g-45f on versa-ecp5-5g has {lut - 1}$"):
        held_nodes(args, mapping, board)


def test_client_says_when_the_chain_stops_before_its_last_update():
    """A chain whose counters stop moving (scripted boards: always zero) is reported, not waited
    for forever."""
    board = get_board("versa-ecp5-5g")
    mapping = board_mapping(parse_args(["--board", "versa-ecp5-5g", "--network", "micro", "--cluster",
                                        "lfe5um5g-45f:2"]), board)

    class Node:
        memories = [None]

    client = Client([_ScriptedBoard(0, 2, 0b11)], mapping, [Node()] * 2, stall_reads=5)
    inputs = np.zeros((mapping.nodes[0].training.batch, *mapping.nodes[0].slices[0].in_shape))
    with pytest.raises(BoardError, match=r"^the chain stopped before its last update: samples and updates per node "
                                         r"\[\(0, 0\), \(0, 0\)\] unchanged over 5 status reads \(a link down\?\)$"):
        client.train(inputs, [0] * len(inputs))


def test_the_vc709_project_has_a_gth_channel_on_an_sfp_cage_per_link(tmp_path, capsys):
    """What Vivado needs for a node in the middle of a chain, written without running Yosys: the
    node and host interface with a GTH channel (LiteICLink's, its reference clock buffered once for
    both) on SFP+ cages 1 and 2, their pins and reference clock constrained, the SI5324's set-up on
    the board's I2C, the channel's Verilog and 8b/10b tables beside and in the script."""
    assert build_main(["--board", "vc709", "--network", "micro", "--cluster", "vc709:3", "--node", "1",
                       "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "links on the SFP+ cages at 6.25 Gb/s: up on cage 1, down on cage 2; " in out
    folder = tmp_path / "vc709-node1"
    assert sorted(path.name for path in folder.iterdir()) == [
        "build_top.bat", "build_top.json", "build_top.sh", "fpdeep_gth_channel.v", "mapping.json", "mem_6b5b.init",
        "mem_6b5b_1.init", "mem_6b5b_2.init", "mem_6b5b_3.init", "top.debug.v", "top.tcl", "top.v", "top.xdc"]
    top = (folder / "top.v").read_text()
    assert top.count("fpdeep_gth_channel serdes (") == 2 and top.count("IBUFDS_GTE2 ") == 1
    assert "module \\top.trainer.chain.up_link.layer" in top and "module \\top.trainer.chain.down_link.layer" in top
    channel = (folder / "fpdeep_gth_channel.v").read_text()
    assert channel.count("GTHE2_CHANNEL #(") == 1 and "IBUFDS_GTE2" not in channel
    assert 'add_files "fpdeep_gth_channel.v"' in (folder / "top.tcl").read_text()
    constraints = (folder / "top.xdc").read_text()
    assert "module \\top.si5324" in top
    for pin, port in (("AH8", "sfp_refclk_0__p"), ("AN2", "sfp_0__tx__p"), ("AM8", "sfp_0__rx__p"),
                      ("AP4", "sfp_1__tx__p"), ("AN6", "sfp_1__rx__p"), ("AT35", "i2c_0__scl__io"),
                      ("AU32", "i2c_0__sda__io"), ("AY42", "i2c_switch_reset_0__io"), ("AT36", "si5324_reset_0__io")):
        assert f'set_property LOC {pin} [get_ports "{port}"]' in constraints
    assert 'create_clock -name sfp_refclk_0__p -period 6.4 ' in constraints


def test_a_node_with_queues_in_dram_is_refused_by_the_host_interface_naming_them():
    """The boards build no DRAM controller yet: a node whose FC weights or samples in flight
    live in DRAM is refused in one line that names its queues."""
    mapping = map_network(zoo.micro(), parse_cluster("lfe5um5g-45f:2"), batch=1, max_multipliers=24,
                          **{**GENERATOR_OPTIONS, "fc_weights": "dram"})
    with pytest.raises(ValueError, match=r"^node 1 keeps slice0_fc_weights in DRAM, but the boards do not "
                                         r"build a DRAM controller yet; map with --act-storage chip --fc-weights chip$"):
        Trainer(mapping, divisor=2)


@pytest.mark.usefixtures("unelaborated")
def test_trainer_refuses_a_link_clock_it_does_not_know():
    mapping = map_network(zoo.micro(), parse_cluster("lfe5um5g-45f:2"), batch=1, max_multipliers=24,
                          **GENERATOR_OPTIONS)
    with pytest.raises(ValueError, match=r"^link_clock must be 'node' or 'phy', not 'pll'$"):
        Trainer(mapping, divisor=2, link_clock="pll")
