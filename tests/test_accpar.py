"""AccPar's cost model (Tables 4-6, eq. 10), its search and the paper's figures."""

import itertools
import subprocess
import sys

import pytest

from mapping import zoo
from mapping.network import Layer, infer
from mapping.accpar import costs, paper
from mapping.accpar.costs import LayerDims, conversion_elements, flop, intra_elements
from mapping.accpar.graph import Block, items_of
from mapping.accpar.search import Accelerator, Level, Side, partition


def fc(batch, d_in, d_out, first=False):
    return LayerDims("fc", "fc", batch, d_in, d_out, 1, 1, 1, d_in, needs_eb=not first)


def conv3x3(batch, d_in, d_out, area):
    return LayerDims("conv", "conv", batch, d_in, d_out, area, area, 9, d_in * 9)


def test_kernel_size_example_of_section_4_1():
    # 16 input channels, 3x3 window, 32 output channels: 4,608 elements
    assert conv3x3(1, 16, 32, 64).weights == 4608


def test_table6_fully_connected():
    # B=4, D_i=5, D_o=3: FP A(F)=12 x (5+5-1), EB A(E)=20 x (3+3-1), PG A(W)=15 x (4+4-1)
    assert flop(fc(4, 5, 3)) == (108, 100, 105)


def test_table6_convolution_multiplies_by_kernel_and_map_size():
    # 3x3 stride-1 same-padded 16->32 on 8x8, B=2:
    # FP 2*32*64*(2*16*9-1), EB 2*16*64*(2*32*9-1), PG 4608*(2*2*64-1)
    assert flop(conv3x3(2, 16, 32, 64)) == (1_175_552, 1_177_600, 1_175_040)


def test_first_layer_has_no_error_to_send():
    layer = fc(4, 5, 3, first=True)
    assert flop(layer)[1] == 0 and intra_elements(layer, "III") == 0


def test_table4_intra_layer_tensors():
    layer = fc(4, 5, 3)
    assert [intra_elements(layer, t) for t in ("I", "II", "III")] == [15, 12, 20]  # A(W), A(F_l+1), A(E_l)


@pytest.mark.parametrize("source,target,expected", [
    ("I", "I", 0), ("I", "II", 37.5), ("I", "III", 75),
    ("II", "I", 75), ("II", "II", 75), ("II", "III", 0),
    ("III", "I", 37.5), ("III", "II", 0), ("III", "III", 75),
])
def test_table5_inter_layer_costs(source, target, expected):
    # alpha = 0.25 (this side), beta = 0.75, A(F_l+1) = A(E_l+1) = 100
    assert conversion_elements(costs.OUT_LAYOUT[source], costs.IN_LAYOUT[target], 100, 0.25, 0.75) == expected


def test_eq10_ratio_balances_computation():
    # communication free: alpha C/c_1 = beta C/c_2 gives alpha = c_1 / (c_1 + c_2), up to
    # Table 6's "- 1" additions, which do not split with the ratio
    devices = (Accelerator("slow", 1e12, 1e30), Accelerator("fast", 3e12, 1e30))
    items = (fc(64, 256, 256, first=True),)
    plan = partition(items, devices, "accpar", 2)
    assert plan.share == pytest.approx(0.25, rel=0.02)
    slow, fast = (half.seconds for half in plan.halves)
    assert slow == pytest.approx(fast, rel=1e-3)
    assert plan.seconds == pytest.approx(costs.total_flop(items[0]) / 4e12, rel=0.01)


def test_dp_picks_the_cheapest_partial_sum():
    # D_i=1000, D_o=10, B=2: Table 4 gives I 10,000, II 20, III 2,000 elements
    devices = (Accelerator("a", 1e15, 1e9),) * 2
    plan = partition((fc(2, 1000, 10),), devices, "accpar", 2)
    assert plan.choice == {"fc": "II"}
    assert plan.comm_seconds == pytest.approx((20 * 2 / 1e9,) * 2)


def test_layerwise_dp_matches_brute_force():
    items = items_of(zoo.get("lenet5"), 64)
    level = Level((Side(1e12, 1e9, 0.3), Side(2e12, 2e9, 0.7)), "accpar", 2)

    def cost(types):
        total, source = 0.0, None
        for layer, t in zip(items, types):
            total += max(level.layer_seconds(layer, t, source))
            source = costs.OUT_LAYOUT[t]
        return total

    best = min(itertools.product(costs.TYPES, repeat=len(items)), key=cost)
    choice = level.solve(items)
    assert cost([choice[layer.name] for layer in items]) == pytest.approx(cost(best))


def test_multi_path_dp_matches_brute_force():
    # c1 forks into a two-convolution path and an identity shortcut, joined by an add
    net = infer("residual", (1, 8, 8), [
        Layer("conv2d", "c1", out_channels=4, kernel=3, padding=1),
        Layer("conv2d", "a", out_channels=4, kernel=3, padding=1),
        Layer("conv2d", "b", out_channels=4, kernel=3, padding=1),
        Layer("add", "add", inputs=("b", "c1")),
        Layer("flatten", "flat"), Layer("linear", "fc", out_channels=10)])
    c1, block, fc_layer = items = items_of(net, 32)
    assert [len(path) for path in block.paths] == [2, 0]
    level = Level((Side(1e9, 1e8, 0.4), Side(1.5e9, 2e8, 0.6)), "accpar", 2)

    def cost(t1, ta, tb, join, tfc):
        total = max(level.layer_seconds(c1, t1, None))
        source = costs.OUT_LAYOUT[t1]
        for layer, t in zip(block.paths[0], (ta, tb)):
            total += max(level.layer_seconds(layer, t, source))
            source = costs.OUT_LAYOUT[t]
        total += max(level.join_seconds(source, join, block))
        total += max(level.join_seconds(costs.OUT_LAYOUT[t1], join, block))   # the identity path
        return total + max(level.layer_seconds(fc_layer, tfc, join))

    space = itertools.product(costs.TYPES, costs.TYPES, costs.TYPES, costs.LAYOUTS, costs.TYPES)
    best = min(cost(*assignment) for assignment in space)
    c = level.solve(items)
    assert cost(c["c1"], c["a"], c["b"], c["add"], c["fc"]) == pytest.approx(best)


def test_resnet_blocks_are_multi_path():
    items = items_of(zoo.get("resnet18"), 8)
    blocks = [item for item in items if isinstance(item, Block)]
    assert len(items) == 10 and len(blocks) == 8
    assert [[len(p) for p in b.paths] for b in blocks[:3]] == [[2, 0], [2, 0], [2, 1]]


def test_baselines_keep_their_types():
    items = items_of(zoo.get("alexnet-ungrouped"), 512)
    devices = paper.homogeneous(2)
    owt = partition(items, devices, "owt", 2).choice
    assert set(owt.values()) == {"I", "II"} and owt["fc6"] == "II" and owt["conv5"] == "I"
    assert set(partition(items, devices, "dp", 2).choice.values()) == {"I"}


def test_paper_figures_pinned():
    figures, _, _ = paper.figures(progress=lambda text: None)
    assert len(figures) == 18
    assert sum(f.within for f in figures) == 17
    assert [f.label for f in figures if not f.within] == ["heterogeneous resnet owt highest"]


def test_fig7_fully_connected_layers_are_model_partitioned():
    top = paper.layer_types("alexnet-ungrouped", paper.homogeneous(7), 128)[0]
    assert {top[name] for name in ("fc6", "fc7", "fc8")} <= {"II", "III"}
    assert top["conv1"] == "I"


def test_unknown_paper_is_one_line_exit_2():
    result = subprocess.run([sys.executable, "-m", "mapping.compare", "--paper", "hypar"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "error: unknown paper 'hypar' (known: accpar, mtrain)\n"
