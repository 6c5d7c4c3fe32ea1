"""Property (issue 15): a random small network of the supported layers on a random cluster
of 1 to 4 nodes either maps and trains bit-exactly on the simulated chain, or is refused
with a one-line SpecError; nothing else, never a crash.

Networks: 1 to 3 convolutions (kernel 1-5, stride 1-2, padding up to k//2, 1-6 output
channels), each optionally followed by ReLU and by a 2x2 max-pool, then flatten, an
optional hidden linear layer with ReLU, and a linear classifier. Amaranth's simulator
runs them (each is a new netlist, which a Verilator build would not repay in two samples).
CI runs a fixed, derandomised handful of examples; ``-m slow`` runs many more.
"""

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.golden import random_data
from mapping.mapper import map_network
from mapping.network import Layer, infer
from sim.chain import STOPPING_UPDATE_OPTIONS, first_difference, train_chain

DEVICES = ("ecp5-85", "ecp5-45", "ecp5-25")


@st.composite
def networks(draw):
    channels, size = draw(st.integers(1, 2)), draw(st.integers(4, 8))
    layers = []
    for k in range(draw(st.integers(1, 3))):
        kernel = draw(st.integers(1, 5))
        layers.append(Layer("conv2d", f"conv{k}", out_channels=draw(st.integers(1, 6)), kernel=kernel,
                            stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, kernel // 2)),
                            groups=1, bias=True))
        if draw(st.booleans()):
            layers.append(Layer("relu", f"relu{k}"))
        if draw(st.booleans()):
            layers.append(Layer("maxpool", f"pool{k}", kernel=2, stride=2, padding=0))
    layers.append(Layer("flatten", "flatten"))
    if draw(st.booleans()):
        layers += [Layer("linear", "hidden", out_channels=draw(st.integers(2, 12))), Layer("relu", "relu_h")]
    layers.append(Layer("linear", "classifier", out_channels=draw(st.integers(2, 4))))
    return (channels, size, size), layers


@st.composite
def clusters(draw):
    nodes = draw(st.lists(st.sampled_from(DEVICES), min_size=1, max_size=4))
    return "+".join(f"{device}:1" for device in nodes)


def _refused(error):
    message = str(error)
    assert message and "\n" not in message, f"refusal is not one line: {message!r}"


def check_trains_or_is_refused(spec, cluster):
    input_shape, layers = spec
    try:
        network = infer("random", input_shape, layers)
        mapping = map_network(network, parse_cluster(cluster), batch=2, lr=0.05, **STOPPING_UPDATE_OPTIONS)
        inputs, labels, params = random_data(network, 2, 0)
        run = train_chain(network, mapping, inputs, labels, params, deadline=100_000)
    except SpecError as error:
        _refused(error)
        event(f"refused: {str(error)[:60]}")
        return
    assert first_difference(run) is None, f"{layers} on {cluster}: {first_difference(run)}"
    event(f"trained bit-exact on {len(mapping.nodes)} node(s)")


_EXAMPLE = settings(deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(_EXAMPLE, max_examples=4)
@given(networks(), clusters())
def test_random_network_trains_bit_exact_or_is_refused(spec, cluster):
    check_trains_or_is_refused(spec, cluster)


@pytest.mark.bench  # 60 networks take Amaranth's simulator about ten minutes on two cores
@settings(_EXAMPLE, max_examples=60)
@given(networks(), clusters())
def test_many_random_networks_train_bit_exact_or_are_refused(spec, cluster):
    check_trains_or_is_refused(spec, cluster)
