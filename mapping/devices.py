"""Device database: the FPGAs a cluster can be built from, with vendor figures.

Every count is for the whole device as the vendor's selection guide or data
sheet gives it (``source`` names the document); ``transceivers`` counts the
device's multi-gigabit transceivers in the package the board carries, where
the vendor gives a per-package figure. Units:

- ``dsp``: hard multipliers in the family's own unit: DSP48E1 (7-series,
  Zynq-7000) or DSP48E2 (UltraScale+) slices, each one 25x18 (27x18) multiplier
  with a 48-bit accumulator; on ECP5 the MULT18X18D 18x18 multipliers that
  Table 1.1 of the ECP5 data sheet counts.
- ``bram_blocks``: block RAMs in 18 Kb units (a Xilinx RAMB36 counts as two
  RAMB18; an ECP5 DP16KD is 18 Kb). ``uram_blocks``: 288 Kb UltraRAMs.
- ``link_gbps``: payload bandwidth (after line coding) that one device gives to
  ONE chain neighbour in ONE direction through the board's own connectors (an
  entry says so where it assumes more); a chain node has two neighbours, so it
  splits its ports in two.
  A cluster spec can override it (``vc709:15@150``).
- ``clock_mhz``: the clock the mapping's cycle counts are converted at; each
  entry says why.
- ``dram_gb``: off-chip memory on the board; FPDeep keeps convolution layers
  entirely on chip, so this only matters for baselines and FC weights.
- ``dram_gbps``: peak bandwidth of the board's DRAM interfaces the fabric can
  reach (Gb/s, both directions together: a DDR bus is half duplex), bus width x
  transfer rate; 0 without DRAM. The mapping streams fully connected weights
  through it (mapping/partition/cost.py).
"""

from dataclasses import dataclass

from .errors import SpecError

BRAM_BLOCK_BITS = 18 * 1024
URAM_BLOCK_BITS = 288 * 1024
FAMILIES = ("xc7", "zynqmp", "virtexuplus", "ecp5")


@dataclass(frozen=True)
class Device:
    name: str              # canonical key, lower case
    part: str              # full part number as on the board
    board: str | None
    family: str            # yosys flow family, one of FAMILIES
    dsp: int
    bram_blocks: int       # 18 Kb units
    uram_blocks: int       # 288 Kb units
    lut: int
    ff: int
    transceivers: int
    transceiver_gbps: float
    clock_mhz: float
    link_gbps: float       # to one neighbour, one direction
    dram_gb: float
    dram_gbps: float       # DRAM bandwidth, 0 without DRAM
    source: str

    def __post_init__(self):
        if (self.dram_gb > 0) != (self.dram_gbps > 0):
            raise ValueError(f"device {self.name}: dram_gb={self.dram_gb} and dram_gbps={self.dram_gbps} "
                             f"disagree on whether it has DRAM")

    @property
    def bram_bits(self):
        return self.bram_blocks * BRAM_BLOCK_BITS

    @property
    def uram_bits(self):
        return self.uram_blocks * URAM_BLOCK_BITS

    @property
    def onchip_bits(self):
        return self.bram_bits + self.uram_bits

    @property
    def peak_gmacs(self):
        """Multiply-accumulates per second (in G) with every hard multiplier busy."""
        return self.dsp * self.clock_mhz / 1000

    def __str__(self):
        where = f" ({self.board})" if self.board else ""
        return f"{self.part}{where}"


# Link bandwidths below are per neighbour, per direction, payload rate:
# 10GBASE-R on an SFP+ carries 10 Gb/s (64b/66b at 10.3125 Gbaud); 100GBASE-R4
# on a QSFP28 carries 100 Gb/s; an 8b/10b lane carries 0.8 of its line rate.
_DEVICES = [
    Device(
        name="xc7vx690t", part="XC7VX690T-2FFG1761C", board="VC709", family="xc7",
        dsp=3600, bram_blocks=2940, uram_blocks=0, lut=433_200, ff=866_400,
        transceivers=36, transceiver_gbps=13.1,
        # FPDeep reports about 1 TOPS per VC709 with ~80% of its 3,600 DSPs busy:
        # 2 ops/MAC * 0.8 * 3600 * 200 MHz = 1.15 TOPS, so its designs ran at ~200 MHz.
        clock_mhz=200.0,
        # The board's own chain ports are four SFP+ cages (10GBASE-R): two per
        # neighbour = 20 Gb/s each way, above the 18.6 Gb/s FPDeep measured as its
        # largest per-link demand on 15 VC709s. The paper's scaling study assumes
        # 6 x 28 Gb/s transceivers (150 Gb/s per link), which the VC709's 13.1 Gb/s
        # GTH cannot reach: ask for it explicitly with "vc709:N@150".
        link_gbps=20.0, dram_gb=8.0,
        dram_gbps=2 * 64 * 1.866,  # two DDR3-1866 64-bit SODIMMs (UG887)
        source="Xilinx DS180 7 Series FPGAs Overview, Virtex-7 XT device table ( 433,200 LUTs, "
               "866,400 FFs, 3,600 DSP48E1, 1,470 RAMB36 = 52,920 Kb) and package table "
               "(FFG1761: 36 GTH, 13.1 Gb/s); UG887 VC709 board user guide (2 x 4 GB DDR3 "
               "SODIMM, 4 SFP+ cages)"),
    Device(
        name="lfe5um5g-85f", part="LFE5UM5G-85F-8BG381C", board="ECP5-5G Evaluation Board",
        family="ecp5",
        dsp=156, bram_blocks=208, uram_blocks=0, lut=83_640, ff=83_640,
        transceivers=4, transceiver_gbps=5.0,
        # The default mapping's nodes on this part close timing at it in context on the EVN,
        # with their links and the host interface (nextpnr-ecp5 0.11, seed 1, router1, at
        # c17f31a's code: node 0 127.0 MHz, node 1 130.1; docs/boards.md, "Measured"); the
        # board top's PLL makes 126 from 12 MHz.
        clock_mhz=125.0,
        # the EVN brings all four 5 Gb/s 8b/10b SERDES channels out to SMA
        # connectors: two per neighbour = 2 * 5 * 0.8 = 8 Gb/s.
        link_gbps=8.0, dram_gb=0.0, dram_gbps=0.0,
        source="Lattice FPGA-DS-02012 ECP5 and ECP5-5G Family Data Sheet, Table 1.1 "
               "(84K LUTs = 41,820 slices x 2 LUT4 + 2 FF, 208 sysMEM 18 Kb blocks = "
               "3,744 Kb, 156 18x18 multipliers, 2 duals / 4 SERDES channels at 5 Gb/s "
               "for -5G parts; nextpnr-ecp5 reports the same 41,820 TRELLIS_SLICE, 208 DP16KD, "
               "156 MULT18X18D); Lattice ECP5-5G Evaluation Board (SERDES on SMA, no DRAM)"),
    Device(
        name="lfe5u-85f", part="LFE5U-85F-6BG381C", board="ULX3S-85F", family="ecp5",
        dsp=156, bram_blocks=208, uram_blocks=0, lut=83_640, ff=83_640,
        transceivers=0, transceiver_gbps=0.0,
        # Speed grade 6, measured in context (nextpnr-ecp5 0.11, seed 1): a one-board chain of
        # micro (two nodes joined by link cores) reached 67.4 MHz with one placement and 62.4
        # with another (aiming at 62.5), and 60.5 aiming at 60, its worst path the link
        # sender's replay block RAM into its CRC (at speed 8 the nodes alone reach 110-132
        # MHz). 60 MHz is what its PLL makes from the 25 MHz oscillator (VCO 600 MHz) below.
        clock_mhz=60.0,
        # no SERDES: a neighbour is reached over header pins; 8 LVDS pairs at 125 Mb/s each
        # way is a planning figure, not a measured link.
        link_gbps=1.0, dram_gb=0.032, dram_gbps=16 * 0.166,  # 32 MB SDRAM, x16 at 166 MHz
        source="Lattice FPGA-DS-02012 ECP5 and ECP5-5G Family Data Sheet, Table 1.1 (as the "
               "LFE5UM5G-85F without SERDES); ULX3S board (32 MB SDR SDRAM, FT231X USB UART)"),
    Device(
        name="lfe5um5g-45f", part="LFE5UM5G-45F-8BG381C", board="ECP5-5G Versa", family="ecp5",
        dsp=72, bram_blocks=108, uram_blocks=0, lut=43_848, ff=43_848,
        transceivers=4, transceiver_gbps=5.0,
        # the default mapping's nodes on this part close timing at 100 MHz on the Versa
        # (docs/boards.md, "Measured"); not tried at 125.
        clock_mhz=100.0,
        # the Versa brings out two channels (SMA pair, PCIe x1 edge): one 5 Gb/s
        # 8b/10b lane per neighbour = 4 Gb/s.
        link_gbps=4.0, dram_gb=0.125,
        dram_gbps=16 * 0.8,  # one x16 DDR3 at 800 Mb/s per pin, the ECP5 DDR3 limit
        source="Lattice FPGA-DS-02012 ECP5 and ECP5-5G Family Data Sheet, Table 1.1 "
               "(44K LUTs = 21,924 slices, 108 sysMEM 18 Kb blocks = 1,944 Kb, 72 18x18 "
               "multipliers, 2 duals / 4 SERDES channels at 5 Gb/s; nextpnr-ecp5: 21,924 "
               "TRELLIS_SLICE, 108 DP16KD, 72 MULT18X18D); Lattice ECP5-5G Versa "
               "board (one 1 Gb x16 DDR3 = 128 MB; two SERDES channels on SMA and PCIe x1)"),
    Device(
        name="lfe5um5g-25f", part="LFE5UM5G-25F-8BG381C", board=None, family="ecp5",
        dsp=28, bram_blocks=56, uram_blocks=0, lut=24_288, ff=24_288,
        transceivers=2, transceiver_gbps=5.0,
        clock_mhz=100.0,  # as for the 45F (not placed and routed)
        # one dual (two channels): one 5 Gb/s 8b/10b lane per neighbour.
        link_gbps=4.0, dram_gb=0.0, dram_gbps=0.0,
        source="Lattice FPGA-DS-02012 ECP5 and ECP5-5G Family Data Sheet, Table 1.1 "
               "(24K LUTs = 12,144 slices, 56 sysMEM 18 Kb blocks = 1,008 Kb, 28 18x18 "
               "multipliers, 1 dual / 2 SERDES channels at 5 Gb/s; nextpnr-ecp5: 12,144 "
               "TRELLIS_SLICE, 56 DP16KD, 28 MULT18X18D)"),
    Device(
        name="xcu50", part="XCU50-FSVH2104-2LV-E", board="Alveo U50LV", family="virtexuplus",
        dsp=5952, bram_blocks=2688, uram_blocks=640, lut=871_680, ff=1_743_360,
        transceivers=64, transceiver_gbps=32.75,
        # UltraScale+ fabric; the LV card runs at reduced core voltage, so we
        # assume 250 MHz rather than the 300 MHz Vitis default of the U50.
        clock_mhz=250.0,
        # One QSFP28 cage (4 x 25G lanes) split two lanes per neighbour: 50 Gb/s.
        link_gbps=50.0, dram_gb=8.0,
        dram_gbps=316 * 8,  # HBM2, 316 GB/s (DS965)
        source="Xilinx DS965 Alveo U50 Data Sheet, card specifications (872K LUTs, "
               "1,743K registers, 5,952 DSP slices, 47.3 Mb block RAM = 1,344 RAMB36, "
               "180 Mb UltraRAM = 640, 8 GB HBM2, one QSFP28); exact LUT/FF counts and 64 GTY from DS890 for "
               "the XCVU35P die the XCU50 is built on"),
    Device(
        name="xcu30", part="XCU30", board="Alveo U30", family="zynqmp",
        dsp=1728, bram_blocks=624, uram_blocks=96, lut=230_400, ff=460_800,
        transceivers=20, transceiver_gbps=16.3,
        clock_mhz=250.0,  # Zynq UltraScale+ -2: as for the ZU9EG
        # The U30 has no network cage; each of its two MPSoCs sits on a PCIe Gen3
        # x4 link (x8 card bifurcated x4x4): 4 * 8 GT/s * 128/130 = 31.5 Gb/s.
        link_gbps=31.5, dram_gb=4.0,
        dram_gbps=64 * 2.4,  # DDR4-2400, 64 bit per device
        source="Xilinx Alveo U30 Data Center Accelerator Card data sheet (two Zynq "
               "UltraScale+ XCU30 per card, 4 GB DDR4 and PCIe Gen3 x4 per device); "
               "per-device fabric taken as the XCZU7EV of DS891 (230,400 LUTs, 460,800 "
               "FFs, 1,728 DSP48E2, 312 RAMB36, 96 UltraRAM, 20 GTH), the EV part whose "
               "video codec the U30 uses. One entry is one XCU30: 'u30:2' is a whole card"),
    Device(
        name="xczu9eg", part="XCZU9EG-2FFVB1156E", board="ZCU102", family="zynqmp",
        dsp=2520, bram_blocks=1824, uram_blocks=0, lut=274_080, ff=548_160,
        transceivers=24, transceiver_gbps=16.3,
        # Zynq UltraScale+ -2 fabric with DSP48E2: 250 MHz is a routine target
        # for pipelined MAC arrays of this size.
        clock_mhz=250.0,
        # four SFP+ cages, two per neighbour.
        link_gbps=20.0, dram_gb=4.5,
        dram_gbps=64 * 2.133,  # PS DDR4-2133 64-bit, reached through the HP ports (UG1182)
        source="Xilinx DS891 Zynq UltraScale+ MPSoC Overview, device table (274,080 LUTs, "
               "548,160 FFs, 2,520 DSP48E2, 912 RAMB36 = 32.1 Mb, 24 GTH at 16.3 Gb/s); "
               "UG1182 ZCU102 board user guide (4 GB PS DDR4 + 512 MB PL DDR4, 4 SFP+)"),
    Device(
        name="xczu7ev", part="XCZU7EV-2FFVC1156E", board="ZCU104", family="zynqmp",
        dsp=1728, bram_blocks=624, uram_blocks=96, lut=230_400, ff=460_800,
        transceivers=20, transceiver_gbps=16.3,
        clock_mhz=250.0,  # as for the ZU9EG
        # ZCU104 has no SFP/QSFP cage; MTrain's cluster 3 links it through its
        # 1 GbE port, so that is what the board gives a neighbour.
        link_gbps=1.0, dram_gb=2.0,
        dram_gbps=64 * 2.4,  # PS DDR4-2400 64-bit (UG1267)
        source="Xilinx DS891 Zynq UltraScale+ MPSoC Overview, device table (230,400 LUTs, "
               "460,800 FFs, 1,728 DSP48E2, 312 RAMB36 = 11.0 Mb, 96 UltraRAM = 27.0 Mb, "
               "20 GTH at 16.3 Gb/s); UG1267 ZCU104 board user guide (2 GB PS DDR4, 1 GbE)"),
    Device(
        name="xcvu37p", part="XCVU37P-L2FSVH2892E", board="VCU128", family="virtexuplus",
        dsp=9024, bram_blocks=4032, uram_blocks=960, lut=1_303_680, ff=2_607_360,
        transceivers=96, transceiver_gbps=32.75,
        clock_mhz=250.0,  # Virtex UltraScale+ across 3 SLRs: conservative 250 MHz
        # four QSFP28 cages, two per neighbour: 2 * 100 Gb/s. Memory: 8 GB HBM in
        # the package plus 4.5 GB DDR4 on the board.
        link_gbps=200.0, dram_gb=12.5,
        dram_gbps=460 * 8,  # in-package HBM2, 460 GB/s (DS890); the DDR4 not counted
        source="Xilinx DS890 UltraScale Architecture and Product Overview, Virtex "
               "UltraScale+ HBM table (1,304K LUTs, 2,607K FFs, 9,024 DSP48E2, 2,016 RAMB36 "
               "= 70.9 Mb, 960 UltraRAM = 270 Mb, 96 GTY at 32.75 Gb/s, 8 GB HBM); UG1302 "
               "VCU128 board user guide (4.5 GB DDR4, 4 QSFP28)"),
    Device(
        name="xc7z045", part="XC7Z045-2FFG900C", board="ZC706", family="xc7",
        dsp=900, bram_blocks=1090, uram_blocks=0, lut=218_600, ff=437_200,
        transceivers=16, transceiver_gbps=12.5,
        clock_mhz=200.0,  # Kintex-7 fabric, -2: as for the VC709
        # one SFP+ cage; the other neighbour needs an FMC card at the same rate.
        link_gbps=10.0, dram_gb=2.0,
        dram_gbps=64 * 1.6,  # PL DDR3-1600 64-bit (UG954)
        source="Xilinx DS190 Zynq-7000 SoC Overview, device table (218,600 LUTs, 437,200 FFs, "
               "900 DSP48E1, 545 RAMB36 = 19.1 Mb, 16 GTX at 12.5 Gb/s in FFG900 -2); "
               "UG954 ZC706 board user guide (1 GB PS DDR3 + 1 GB PL DDR3, 1 SFP+)"),
    Device(
        name="xc7z015", part="XC7Z015-1CLG485C", board=None, family="xc7",
        dsp=160, bram_blocks=190, uram_blocks=0, lut=46_200, ff=92_400,
        transceivers=4, transceiver_gbps=6.25,
        clock_mhz=150.0,  # Artix-7 fabric, -1: slower than the Kintex-class parts
        # four GTP lanes, assumed routed to the carrier's connectors two per
        # neighbour, 8b/10b: 2 * 6.25 * 0.8 = 10 Gb/s.
        link_gbps=10.0, dram_gb=1.0,
        dram_gbps=32 * 1.066,  # DDR3-1066 32-bit, as on the usual modules
        source="Xilinx DS190 Zynq-7000 SoC Overview, device table (46,200 LUTs, 92,400 FFs, "
               "160 DSP48E1, 95 RAMB36 = 3.3 Mb, 4 GTP at 6.25 Gb/s); BLAST-R does not "
               "name its XC7Z015 board: 1 GB DDR3 assumed, as on the usual modules"),
]

DEVICES = {device.name: device for device in _DEVICES}

ALIASES = {
    "vc709": "xc7vx690t",
    "ecp5-85": "lfe5um5g-85f", "ulx3s-85f": "lfe5u-85f", "ecp5-45": "lfe5um5g-45f", "ecp5-25": "lfe5um5g-25f",
    "u50lv": "xcu50",
    "u30": "xcu30",
    "zcu102": "xczu9eg",
    "zcu104": "xczu7ev",
    "vcu128": "xcvu37p",
    "zc706": "xc7z045",
}


def get_device(name):
    """A device by canonical name or alias, case-insensitive."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in DEVICES:
        known = ", ".join(sorted(ALIASES) + sorted(DEVICES))
        raise SpecError(f"unknown device '{name}' (known: {known})")
    return DEVICES[key]


@dataclass(frozen=True)
class TensorAccelerator:
    """A training accelerator board as AccPar's Table 7 gives it (not an FPGA: no fabric counts)."""

    name: str
    tflops: float          # peak floating-point operations per second, in T
    hbm_gb: float
    hbm_gbps: float        # GB/s
    network_gbps: float    # Gb/s per board (AccPar section 6.1: 2 Gb/s per core)
    cores: int
    element_bytes: int     # bfloat16
    source: str

    @property
    def flops(self):
        return self.tflops * 1e12

    @property
    def network_bytes_per_s(self):
        return self.network_gbps * 1e9 / 8


_ACCPAR_TABLE = ("AccPar (HPCA 2020) Table 7 and section 6.1: 4 chips x 2 cores per board, "
                 "2 Gb/s network per core, bfloat16, mini-batch 512")
TENSOR_ACCELERATORS = {
    "tpu-v2": TensorAccelerator("tpu-v2", tflops=180, hbm_gb=64, hbm_gbps=2400, network_gbps=8,
                                cores=8, element_bytes=2, source=_ACCPAR_TABLE),
    "tpu-v3": TensorAccelerator("tpu-v3", tflops=420, hbm_gb=128, hbm_gbps=4800, network_gbps=16,
                                cores=8, element_bytes=2,
                                source=_ACCPAR_TABLE + " (its 4800 GB/s is the paper's assumption)"),
}
ACCPAR_BATCH = 512
