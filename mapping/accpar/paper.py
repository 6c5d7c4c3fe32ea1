"""AccPar's experiment (section 6) with our cost model: speedups over DP, side by side with the paper.

Arrays: 128 TPU-v2 + 128 TPU-v3 boards (heterogeneous, section 6.2) and 128
TPU-v3 (homogeneous, section 6.3), mini-batch 512, bfloat16. The paper's
figures quoted in its text are the ones compared; its bar charts (Figs. 5, 6,
8) give no other numbers in the text.
"""

from dataclasses import dataclass
from functools import lru_cache
import math

from .. import zoo
from ..devices import ACCPAR_BATCH, TENSOR_ACCELERATORS
from .graph import items_of
from .search import STRATEGIES, Accelerator, partition

NETWORKS = ("lenet5", "alexnet-ungrouped", "vgg11", "vgg13", "vgg16", "vgg19",
            "resnet18", "resnet34", "resnet50")
VGG = ("vgg11", "vgg13", "vgg16", "vgg19")
RESNET = ("resnet18", "resnet34", "resnet50")
TOLERANCE = 0.2


@dataclass(frozen=True)
class Figure:
    label: str
    ours: float
    paper: float

    @property
    def within(self):
        return abs(self.ours / self.paper - 1) <= TOLERANCE


def accelerator(name):
    board = TENSOR_ACCELERATORS[name]
    return Accelerator(name, board.flops, board.network_bytes_per_s)


def heterogeneous(h=8):
    """2^h boards, half TPU-v2 and half TPU-v3 (the paper's h = 8: 128 + 128)."""
    half = 2 ** (h - 1)
    return (accelerator("tpu-v2"),) * half + (accelerator("tpu-v3"),) * half


def homogeneous(h=7):
    return (accelerator("tpu-v3"),) * 2 ** h


@lru_cache(maxsize=None)
def speedups(network, devices, batch=ACCPAR_BATCH):
    """{strategy: speedup over DP} for one network on one array."""
    items = items_of(zoo.get(network), batch)
    element_bytes = TENSOR_ACCELERATORS["tpu-v3"].element_bytes
    seconds = {s: partition(items, devices, s, element_bytes).seconds for s in STRATEGIES}
    return {s: seconds["dp"] / seconds[s] for s in STRATEGIES}


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def layer_types(network, devices, batch):
    """The top level's partition type per weighted layer (AccPar Fig. 7)."""
    items = items_of(zoo.get(network), batch)
    plan = partition(items, devices, "accpar", TENSOR_ACCELERATORS["tpu-v3"].element_bytes)
    return plan.levels()


def hierarchy_sweep(network="vgg19", levels=range(2, 10)):
    """AccPar Fig. 8: speedups over DP on heterogeneous arrays of 2^h boards."""
    return {h: speedups(network, heterogeneous(h)) for h in levels}


def figures(progress=print):
    """Every figure the paper's text states, ours beside it."""
    het, hom = {}, {}
    for name in NETWORKS:
        progress(f"  {name}")
        het[name] = speedups(name, heterogeneous())
        hom[name] = speedups(name, homogeneous())
    out = []
    for array, table, paper in (("heterogeneous", het, (2.98, 3.78, 6.30)),
                                ("homogeneous", hom, (2.94, 3.51, 3.86))):
        for strategy, value in zip(("owt", "hypar", "accpar"), paper):
            out.append(Figure(f"{array} geomean {strategy}", geomean(t[strategy] for t in table.values()),
                              value))
    ranges = {("vgg", "owt"): (5.33, 8.25), ("vgg", "hypar"): (5.92, 9.46), ("vgg", "accpar"): (9.75, 16.14),
              ("resnet", "owt"): (1.22, 1.38), ("resnet", "hypar"): (1.03, 1.04),
              ("resnet", "accpar"): (1.92, 2.20)}
    for (family, strategy), (low, high) in ranges.items():
        values = [het[n][strategy] for n in (VGG if family == "vgg" else RESNET)]
        out.append(Figure(f"heterogeneous {family} {strategy} lowest", min(values), low))
        out.append(Figure(f"heterogeneous {family} {strategy} highest", max(values), high))
    return out, het, hom
