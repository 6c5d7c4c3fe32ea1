"""Device database: every figure against the vendor document it cites."""

import pytest

from mapping.devices import (ALIASES, BRAM_BLOCK_BITS, DEVICES, FAMILIES, URAM_BLOCK_BITS,
                             get_device)
from mapping.errors import SpecError

KB = 1024

# (name, part, board, family, dsp, bram_blocks (18 Kb), uram_blocks, lut, ff,
#  transceivers, transceiver_gbps): the headline numbers of the cited tables.
FIGURES = [
    # DS180 Virtex-7 XT, XC7VX690T; FFG1761 package: 36 GTH at 13.1 Gb/s.
    ("xc7vx690t", "XC7VX690T-2FFG1761C", "VC709", "xc7",
     3600, 2 * 1470, 0, 433_200, 866_400, 36, 13.1),
    # FPGA-DS-02012 Table 1.1 (and nextpnr-ecp5's device counts).
    ("lfe5um5g-85f", "LFE5UM5G-85F-8BG381C", "ECP5-5G Evaluation Board", "ecp5",
     156, 208, 0, 83_640, 83_640, 4, 5.0),
    ("lfe5um5g-45f", "LFE5UM5G-45F-8BG381C", "ECP5-5G Versa", "ecp5",
     72, 108, 0, 43_848, 43_848, 4, 5.0),
    ("lfe5um5g-25f", "LFE5UM5G-25F-8BG381C", None, "ecp5",
     28, 56, 0, 24_288, 24_288, 2, 5.0),
    # the ULX3S's LFE5U-85F: the 85F fabric without SERDES
    ("lfe5u-85f", "LFE5U-85F-6BG381C", "ULX3S-85F", "ecp5",
     156, 208, 0, 83_640, 83_640, 0, 0.0),
    # DS965 (U50: 872K LUTs, 1,743K registers, 5,952 DSP, 47.3 Mb BRAM, 180 Mb URAM).
    ("xcu50", "XCU50-FSVH2104-2LV-E", "Alveo U50LV", "virtexuplus",
     5952, 2 * 1344, 640, 871_680, 1_743_360, 64, 32.75),
    # U30: one of the card's two XCU30 (XCZU7EV fabric).
    ("xcu30", "XCU30", "Alveo U30", "zynqmp",
     1728, 2 * 312, 96, 230_400, 460_800, 20, 16.3),
    # DS891 XCZU9EG / XCZU7EV.
    ("xczu9eg", "XCZU9EG-2FFVB1156E", "ZCU102", "zynqmp",
     2520, 2 * 912, 0, 274_080, 548_160, 24, 16.3),
    ("xczu7ev", "XCZU7EV-2FFVC1156E", "ZCU104", "zynqmp",
     1728, 2 * 312, 96, 230_400, 460_800, 20, 16.3),
    # DS890 XCVU37P.
    ("xcvu37p", "XCVU37P-L2FSVH2892E", "VCU128", "virtexuplus",
     9024, 2 * 2016, 960, 1_303_680, 2_607_360, 96, 32.75),
    # DS190 XC7Z045 / XC7Z015.
    ("xc7z045", "XC7Z045-2FFG900C", "ZC706", "xc7",
     900, 2 * 545, 0, 218_600, 437_200, 16, 12.5),
    ("xc7z015", "XC7Z015-1CLG485C", None, "xc7",
     160, 2 * 95, 0, 46_200, 92_400, 4, 6.25),
]


@pytest.mark.parametrize("figures", FIGURES, ids=[f[0] for f in FIGURES])
def test_figures(figures):
    (name, part, board, family, dsp, bram, uram, lut, ff, transceivers, gbps) = figures
    device = DEVICES[name]
    assert (device.name, device.part, device.board, device.family) == (name, part, board, family)
    assert (device.dsp, device.bram_blocks, device.uram_blocks) == (dsp, bram, uram)
    assert (device.lut, device.ff) == (lut, ff)
    assert (device.transceivers, device.transceiver_gbps) == (transceivers, gbps)
    assert device.source


def test_every_device_is_checked():
    assert sorted(DEVICES) == sorted(f[0] for f in FIGURES)


@pytest.mark.parametrize("name, kilobits", [
    ("xc7vx690t", 52_920),      # DS180: 52,920 Kb block RAM
    ("lfe5um5g-85f", 3_744),    # Table 1.1: 3,744 Kb EBR
    ("lfe5um5g-45f", 1_944),
    ("lfe5um5g-25f", 1_008),
    ("xc7z045", 19_620),        # DS190: 19.1 Mb = 545 x 36 Kb
])
def test_bram_bits_match_datasheet_kilobits(name, kilobits):
    assert get_device(name).bram_bits == kilobits * KB


def test_onchip_bits_add_ultraram():
    u50 = get_device("u50lv")
    assert u50.uram_bits == 180 * 1024 * KB                 # DS965: 180 Mb UltraRAM
    assert u50.onchip_bits == 2688 * 18 * KB + 640 * 288 * KB
    assert get_device("vcu128").uram_bits == 270 * 1024 * KB  # DS890: 270 Mb
    assert BRAM_BLOCK_BITS == 18 * KB and URAM_BLOCK_BITS == 288 * KB


def test_vc709_clock_reproduces_fpdeep_throughput():
    # FPDeep: ~80% of the 3,600 DSPs busy gives about 1 TOPS per VC709.
    vc709 = get_device("vc709")
    assert vc709.clock_mhz == 200.0
    assert vc709.peak_gmacs == 720.0
    assert 2 * 0.8 * vc709.peak_gmacs == pytest.approx(1152.0)


def test_link_defaults():
    # per neighbour, per direction, payload: two SFP+ (10GBASE-R) per VC709
    # neighbour, two / one 5 Gb/s 8b/10b lanes on ECP5 boards, 1 GbE on ZCU104.
    expected = {"vc709": 20.0, "ecp5-85": 8.0, "ecp5-45": 4.0, "ecp5-25": 4.0,
                "zcu102": 20.0, "zcu104": 1.0, "vcu128": 200.0, "u50lv": 50.0,
                "u30": 31.5, "zc706": 10.0, "xc7z015": 10.0}
    assert {name: get_device(name).link_gbps for name in expected} == expected


def test_families_and_positive_figures():
    for device in DEVICES.values():
        assert device.family in FAMILIES
        assert min(device.dsp, device.bram_blocks, device.lut, device.ff) > 0
        # every board but the ULX3S (no SERDES: its links use header pins) has transceivers
        assert device.transceivers > 0 or device.name == "lfe5u-85f"
        assert device.clock_mhz > 0 and device.link_gbps > 0 and device.dram_gb >= 0


def test_aliases_and_case():
    assert get_device("VC709") is DEVICES["xc7vx690t"]
    assert get_device(" XC7VX690T ") is DEVICES["xc7vx690t"]
    assert get_device("ecp5-85") is DEVICES["lfe5um5g-85f"]
    assert get_device("ZCU102") is get_device("xczu9eg")
    for alias, name in ALIASES.items():
        assert get_device(alias) is DEVICES[name]


def test_unknown_device():
    with pytest.raises(SpecError) as error:
        get_device("vc707")
    assert str(error.value) == (
        "unknown device 'vc707' (known: ecp5-25, ecp5-45, ecp5-85, u30, u50lv, ulx3s-85f, vc709, "
        "vcu128, zc706, zcu102, zcu104, lfe5u-85f, lfe5um5g-25f, lfe5um5g-45f, lfe5um5g-85f, "
        "xc7vx690t, xc7z015, xc7z045, xcu30, xcu50, xcvu37p, xczu7ev, xczu9eg)")


def test_str_names_part_and_board():
    assert str(get_device("vc709")) == "XC7VX690T-2FFG1761C (VC709)"
    assert str(get_device("xc7z015")) == "XC7Z015-1CLG485C"
