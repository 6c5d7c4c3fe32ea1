from dataclasses import replace

import pytest

from mapping import resources
from mapping.devices import DEVICES, get_device


def test_bram_picks_cheapest_aspect_ratio():
    # 16 bits x 100,000 words: 1024x18 (98 deep) or 2048x9 (2 wide x 49 deep) beat 16384x1 (112)
    assert resources.bram_blocks(16, 100_000, "xc7") == 98
    assert resources.bram_blocks(36, 512, "xc7") == 1
    assert resources.bram_blocks(37, 512, "xc7") == 2
    assert resources.bram_blocks(1, 16384, "ecp5") == 1
    assert resources.bram_blocks(1, 16385, "ecp5") == 2


def test_dual_read_excludes_the_simple_dual_port_shape():
    assert resources.bram_blocks(36, 512, "xc7", dual_read=True) == 2
    assert resources.bram_blocks(18, 1024, "xc7", dual_read=True) == 1


def test_shallow_memories_go_to_distributed_ram():
    assert resources.bram_blocks(100, 64, "xc7") == 0
    assert resources.lutram_luts(100, 64, "xc7") == 100
    assert resources.bram_blocks(100, 65, "xc7") > 0
    assert resources.lutram_luts(100, 65, "xc7") == 0
    assert resources.bram_blocks(8, 16, "ecp5") == 0
    assert resources.lutram_luts(8, 16, "ecp5") == 4  # two DPR16X4, two LUT4 each
    assert resources.bram_blocks(8, 17, "ecp5") == 1


def test_one_word_deep_memories_are_registers():
    for family in ("ecp5", "xc7"):
        assert resources.ram_style(1, family) == "logic" and resources.ram_style(2, family) == "distributed"
        assert resources.bram_blocks(576, 1, family, dual_read=True) == 0
        assert resources.lutram_luts(576, 1, family) == 0
    cost = resources.memory_cost(576, 1, "ecp5", count=2) + resources.memory_cost(16, 8, "ecp5")
    assert (cost.bram_blocks, cost.lut, cost.ff) == (0, 8, 2 * 576)


def test_memory_cost_adds_up():
    cost = resources.memory_cost(48, 1000, "xc7", count=2) + resources.memory_cost(16, 10, "xc7")
    assert cost.bram_blocks == 2 * resources.bram_blocks(48, 1000, "xc7")
    assert cost.lut == 16
    assert cost.bits == 2 * 48 * 1000 + 160


def test_multipliers_per_tile_and_product():
    assert resources.tile_multipliers(3, "ecp5") == 9
    assert resources.tile_multipliers(11, "xc7") == 121
    assert resources.dsp_per_product(16, 16, "zynqmp") == 1
    assert resources.dsp_per_product(48, 16, "xc7") == 2   # 48 x 16 across two 25 x 18 slices
    assert resources.dsp_per_product(48, 16, "ecp5") == 3


def test_onchip_blocks_count_uram_as_sixteen_blocks():
    assert resources.onchip_blocks(get_device("vc709")) == 2940
    assert resources.onchip_blocks(get_device("u50lv")) == 2688 + 640 * 16


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown device family 'stratix'"):
        resources.bram_blocks(16, 1000, "stratix")


def test_dram_bandwidth_is_a_device_figure():
    assert get_device("vc709").dram_gbps == pytest.approx(238.8, abs=0.1)  # 2 x 64 bit DDR3-1866
    assert get_device("ecp5-85").dram_gbps == 0.0
    assert all((d.dram_gbps > 0) == (d.dram_gb > 0) for d in DEVICES.values())
    with pytest.raises(ValueError, match="dram_gb=8.0 and dram_gbps=0.0 disagree"):
        replace(get_device("vc709"), dram_gbps=0.0)
