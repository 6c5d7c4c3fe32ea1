"""MTrain's experiments (section VI) with our models, side by side with the figures its text states.

Clusters of Table II at the batch sizes of section VI-A (64, 16, 64); P2P
bandwidths from its sweep (0.125-15 GB/s). AlexNet, VGG-16 (with batch norm)
and ResNet-18 at 224x224; TinyYoloV3 and ResNet-56 are not in the zoo (they need
upsample/concatenate layers and CIFAR-size inputs) and their figures are left out.
"""

from functools import lru_cache

from .. import zoo
from ..accpar.paper import Figure
from ..cluster import parse_cluster
from .schedule import hap, mtrain
from .workflow import stages_of, training_flop

CLUSTERS = {1: ("u50lv+u30", 64), 2: ("zcu102+zc706+xc7z015", 16), 3: ("vcu128+zcu102+zcu104", 64)}
NETWORKS = {"AlexNet": "alexnet-ungrouped", "VGG-16": "vgg16-bn", "ResNet-18": "resnet18"}
BANDWIDTHS = (0.125, 0.5, 3.0, 15.0)   # GB/s


@lru_cache(maxsize=None)
def run(network, cluster, gbps):
    """(MTrain schedule, HAP seconds, training FLOPs) for one network, Table II cluster, bandwidth."""
    spec, batch = CLUSTERS[cluster]
    stages = stages_of(zoo.get(NETWORKS[network]))
    devices = parse_cluster(spec).devices
    schedule = mtrain(stages, devices, batch, gbps * 1e9)
    hap_seconds = hap(stages, devices, batch, gbps * 1e9).seconds
    return schedule, hap_seconds, training_flop(stages, batch)


def gflops(network, cluster, gbps, step=-1):
    schedule, _, flop = run(network, cluster, gbps)
    return flop / schedule.steps[step] / 1e9


def speedup_over_hap(network, cluster, gbps):
    schedule, hap_seconds, _ = run(network, cluster, gbps)
    return hap_seconds / schedule.seconds


def figures(progress=print):
    out = []
    progress("  Table III (3 GB/s)")
    for network, c1, c2 in (("AlexNet", 683, 131), ("VGG-16", 706, 151), ("ResNet-18", 527, 105)):
        out.append(Figure(f"Table III {network} cluster 1 GFLOPS", gflops(network, 1, 3.0), c1))
        out.append(Figure(f"Table III {network} cluster 2 GFLOPS", gflops(network, 2, 3.0), c2))
    progress("  Fig. 8 (bandwidth sweep)")
    for network, paper in (("ResNet-18", 580), ("AlexNet", 699), ("VGG-16", 798)):
        best = max(gflops(network, 1, gbps) for gbps in BANDWIDTHS)
        out.append(Figure(f"Fig. 8 {network} cluster 1 best GFLOPS", best, paper))
    for cluster, values in ((2, (("VGG-16", 128), ("ResNet-18", 83))), (3, (("VGG-16", 921), ("ResNet-18", 691)))):
        for network, paper in values:
            out.append(Figure(f"Fig. 8 {network} cluster {cluster} GFLOPS at 0.5 GB/s",
                              gflops(network, cluster, 0.5), paper))
    out.append(Figure("Fig. 8 AlexNet cluster 1 gain 0.125 -> 15 GB/s",
                      gflops("AlexNet", 1, 15.0) / gflops("AlexNet", 1, 0.125), 1.28))
    out.append(Figure("Fig. 8 AlexNet cluster 1 step 4 / step 1 at 0.125 GB/s",
                      gflops("AlexNet", 1, 0.125) / gflops("AlexNet", 1, 0.125, step=0), 1.37))
    progress("  Figs. 9-11 (speedup over HAP at 15 GB/s)")
    speedups = [speedup_over_hap(n, c, 15.0) for n in NETWORKS for c in CLUSTERS]
    out.append(Figure("Figs. 9-11 lowest speedup over HAP at 15 GB/s", min(speedups), 1.07))
    out.append(Figure("Figs. 9-11 highest speedup over HAP at 15 GB/s", max(speedups), 2.21))
    return out
