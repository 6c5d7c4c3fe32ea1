"""The dev kits ``python -m boards.build`` knows: platform, device, oscillator, UART, LEDs."""

from dataclasses import dataclass, field

from amaranth_boards.ecp5_5g_evn import ECP55GEVNPlatform
from amaranth_boards.ulx3s import ULX3S_85F_Platform
from amaranth_boards.versa_ecp5_5g import VersaECP55GPlatform

from mapping.errors import SpecError

from .vc709 import VC709Platform


@dataclass(frozen=True)
class Board:
    name: str
    platform: type      # the amaranth-boards platform class (or ours: VC709)
    device: str         # its FPGA, a name of mapping/devices.py
    clock: str          # the oscillator's resource
    clock_mhz: float
    uart_baud: int      # the highest rate its USB bridge sustains
    leds: int           # LEDs the top drives: link up, training, error, then a heartbeat
    notes: str
    loader: tuple = ()  # openFPGALoader's options naming the board (or its cable)
    # The board-to-board link (boards/link_pins.py): the headers it may use, in order of
    # preference, and the I/O standard of each of their banks (as the board powers them).
    link_headers: tuple = ()
    link_io: dict = field(default_factory=dict)

    @property
    def family(self):
        return "xc7" if self.device.startswith("xc7") else "ecp5"


# The package names Project Trellis and nextpnr-ecp5 use for the platforms' ones.
TRELLIS_PACKAGES = {"BG381": "CABGA381"}


BOARDS = {board.name: board for board in (
    Board("versa-ecp5-5g", VersaECP55GPlatform, "lfe5um5g-45f", "clk100", 100.0, 3_000_000, 4,
          "FT2232H bridge; link on the X3/X4 expansion headers", ("--cable", "ft2232"),
          (("expcon", 2), ("expcon", 1)), {0: "LVCMOS33", 1: "LVCMOS33"}),
    # VCCIO1 2.5 V and VCCIO6 3.3 V as the board ships (amaranth-boards' defaults).
    Board("ecp5-5g-evn", ECP55GEVNPlatform, "lfe5um5g-85f", "clk12", 12.0, 3_000_000, 4,
          "FT2232H bridge (UART on channel B: fit the J40 jumpers); link on headers J39/J40 (SERDES on SMA unused)",
          ("--board", "ecp5_evn"), (("J", 39), ("J", 40)), {0: "LVCMOS33", 1: "LVCMOS25", 6: "LVCMOS33"}),
    Board("ulx3s-85f", ULX3S_85F_Platform, "lfe5u-85f", "clk25", 25.0, 3_000_000, 4,
          "FT231X bridge; link on the GPIO header (no SERDES; speed grade 6)", ("--board", "ulx3s"),
          (("gpio", 0),), {bank: "LVCMOS33" for bank in range(8)}),
    Board("vc709", VC709Platform, "xc7vx690t", "clk200", 200.0, 115_200, 4,
          "CP2103 bridge; links on SFP+ cages 1 and 2; writes a Vivado project (place and route, bitstream: Vivado)"),
)}


def get_board(name):
    if name not in BOARDS:
        raise SpecError(f"unknown board '{name}' (known: {', '.join(BOARDS)})")
    return BOARDS[name]


def board_list():
    return "\n".join(f"{b.name:14} {b.device:13} {b.clock_mhz:g} MHz oscillator, UART {b.uart_baud} baud; {b.notes}"
                     for b in BOARDS.values())
