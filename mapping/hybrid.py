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

from dataclasses import replace

from .accpar import search
from .accpar.graph import items_of
from .cluster import Cluster
from .compare.outcome import FIXED_POINT_BYTES, accpar_devices, of_accpar, of_fpdeep
from .errors import SpecError
from .mapper import map_network
from .network import infer


def _suffix(network, cut):
    """The network from layer ``cut`` on, fed the cut tensor."""
    layers = [info.layer for info in network.layers[cut:]]
    return infer(f"{network.name}[{cut}:]", network.layers[cut].in_shape, layers)


def _prefix(network, cut):
    return infer(f"{network.name}[:{cut}]", network.input_shape, [info.layer for info in network.layers[:cut]])


def _sub_cluster(cluster, first, last):
    return Cluster(cluster.devices[first:last], cluster.link_gbps[first:last - 1],
                   f"{cluster.spec}[{first}:{last}]")


def _accpar(network, cluster, batch):
    plan = search.partition(items_of(network, batch), accpar_devices(cluster), "accpar", FIXED_POINT_BYTES)
    return of_accpar("accpar", plan, cluster.devices, batch)


def _fpdeep(network, cluster, batch, first_device=0):
    network.check_trainable()
    return of_fpdeep(map_network(network, cluster, batch=batch), first_device)


def _pipeline(front, back, link_samples_per_s, boundary_bytes, description):
    """AccPar's front and FPDeep's back as one two-stage pipeline."""
    rate = min(front.samples_per_s, back.samples_per_s, link_samples_per_s)
    front, back = front.paced(rate), back.paced(rate)
    partition = {"plan": description, **front.partition,
                 **{layer: f"fpdeep {where}" for layer, where in back.partition.items()}}
    return replace(front, strategy="hybrid", samples_per_s=rate,
                   utilisation=front.utilisation + back.utilisation,
                   comm_bytes_per_sample=front.comm_bytes_per_sample + back.comm_bytes_per_sample + boundary_bytes,
                   link_busy=max(front.link_busy, back.link_busy, rate / link_samples_per_s),
                   memory_bytes=front.memory_bytes + back.memory_bytes, partition=partition)


def candidates(network, cluster, batch):
    """An Outcome for every plan that maps: both pure strategies and every cut."""
    out = []
    for pure, description in ((_accpar, "accpar on every device"), (_fpdeep, "fpdeep on every device")):
        try:
            outcome = pure(network, cluster, batch)
        except SpecError:
            continue
        out.append(replace(outcome, strategy="hybrid", partition={"plan": description, **outcome.partition}))
    weighted = [i for i, info in enumerate(network.layers) if info.has_weights]
    for cut in weighted[1:]:
        try:
            back_network = _suffix(network, cut)
            back_network.check_trainable()
        except SpecError:
            continue
        front_network = _prefix(network, cut)
        # the cut tensor crosses forward and its error back, for every sample
        boundary = FIXED_POINT_BYTES * 2 * front_network.layers[-1].out_activations
        for split in range(1, len(cluster)):
            try:
                front = _accpar(front_network, _sub_cluster(cluster, 0, split), batch)
                back = _fpdeep(back_network, _sub_cluster(cluster, split, len(cluster)), batch, split)
            except SpecError:
                continue
            link = cluster.link_gbps[split - 1] * 1e9 / 8 / boundary
            out.append(_pipeline(front, back, link, boundary,
                                 f"accpar on devices 0-{split - 1} for layers before "
                                 f"'{network.layers[cut].name}', fpdeep on {split}-{len(cluster) - 1}"))
    return out


def best_plan(network, cluster, batch):
    """The fastest of :func:`candidates` (an Outcome named "hybrid")."""
    options = candidates(network, cluster, batch)
    if not options:
        raise SpecError(f"no hybrid plan maps network {network.name} on cluster '{cluster.spec}'")
    return max(options, key=lambda option: option.samples_per_s)
