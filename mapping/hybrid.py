"""A hybrid planner: AccPar tensor splits for the front of the network, FPDeep's pipeline for the rest.

The chain is cut once between devices and once between layers. The devices
before the cut train the layers before it as one AccPar-partitioned group
(Type-I/II/III per layer, mini-batch at a time); the devices after it run the
remaining layers as FPDeep's fine-grained pipeline (ICP/OCP slices, weights on
chip or in DRAM, its link model). The two halves form a two-stage pipeline
whose rate is the slower half's, or the cut link's: the cut tensor crosses it
forward (activations) and back (errors) for every sample, in 16-bit words. Every
cut is tried, and the two pure strategies too, so the plan is never worse than
either on its own.
"""

from .accpar import search
from .accpar.graph import items_of
from .cluster import Cluster
from .errors import SpecError
from .mapper import map_network
from .network import infer

WORD_BYTES = 2


def _suffix(network, cut):
    """The network from layer ``cut`` on, fed the cut tensor."""
    layers = [info.layer for info in network.layers[cut:]]
    return infer(f"{network.name}[{cut}:]", network.layers[cut].in_shape, layers)


def _sub_cluster(cluster, first, last):
    return Cluster(cluster.devices[first:last], cluster.link_gbps[first:last - 1],
                   f"{cluster.spec}[{first}:{last}]")


def _accpar_rate(network, cluster, batch, devices):
    items = items_of(network, batch)
    plan = search.partition(items, devices, "accpar", WORD_BYTES)
    return batch / plan.seconds, plan


def candidates(network, cluster, batch, accelerators):
    """(samples/s, description, choices) for every cut that maps, pure strategies included."""
    out = []
    try:
        rate, plan = _accpar_rate(network, cluster, batch, accelerators)
        out.append((rate, "accpar on every device", dict(plan.choice)))
    except SpecError:
        pass
    try:
        network.check_trainable()
        mapping = map_network(network, cluster, batch=batch)
        out.append((mapping.summary["samples_per_s"], "fpdeep on every device", {}))
    except SpecError:
        pass
    weighted = [i for i, info in enumerate(network.layers) if info.has_weights]
    for cut in weighted[1:]:
        front = infer(f"{network.name}[:{cut}]", network.input_shape,
                      [info.layer for info in network.layers[:cut]])
        if not any(info.has_weights for info in front.layers):
            continue
        try:
            back = _suffix(network, cut)
            back.check_trainable()
        except SpecError:
            continue
        boundary = WORD_BYTES * 2 * front.layers[-1].out_activations
        for split in range(1, len(cluster)):
            try:
                front_rate, plan = _accpar_rate(front, cluster, batch, accelerators[:split])
                mapping = map_network(back, _sub_cluster(cluster, split, len(cluster)), batch=batch)
            except SpecError:
                continue
            link_rate = cluster.link_gbps[split - 1] * 1e9 / 8 / boundary
            rate = min(front_rate, mapping.summary["samples_per_s"], link_rate)
            choices = {**plan.choice, **{info.name: f"fpdeep@{split}+" for info in back.weighted_layers}}
            out.append((rate, f"accpar on devices 0-{split - 1} for layers before "
                              f"'{network.layers[cut].name}', fpdeep on {split}-{len(cluster) - 1}", choices))
    return out


def best_plan(network, cluster, batch, accelerators):
    options = candidates(network, cluster, batch, accelerators)
    if not options:
        raise SpecError(f"no hybrid plan maps network {network.name} on cluster '{cluster.spec}'")
    return max(options, key=lambda option: option[0])
