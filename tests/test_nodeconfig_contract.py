"""The mapping file's contract (docs/nodeconfig.md): what loads, and the one-line refusal
naming the field of every file that breaks it."""

import json
from pathlib import Path

import pytest

from mapping import zoo
from mapping.cluster import parse_cluster
from mapping.errors import SpecError
from mapping.mapper import GENERATOR_OPTIONS, map_network
from mapping.nodeconfig import SCHEMA_VERSION, Mapping

EXAMPLES = Path(__file__).resolve().parents[1] / "mapping" / "examples"


@pytest.fixture(scope="module")
def tiny():
    """tiny on two ECP5-85s and two ECP5-45s as hw/ builds it: conv1 OCP [0:4] on node 0,
    conv2 ICP [0:1], [1:3], [3:4] on nodes 0-2, fc on node 3."""
    return map_network(zoo.tiny(), parse_cluster("ecp5-85:2+ecp5-45:2"), **GENERATOR_OPTIONS)


@pytest.fixture(scope="module")
def balanced():
    """lenet-digits with conv2 rows 4..15 of node 1 hosted on node 0."""
    return map_network(zoo.lenet_digits(), parse_cluster("ecp5-45:4"), bram_fraction=0.16, batch=3)


def test_mappings_round_trip_with_their_schema_version(tiny, balanced):
    for mapping in (tiny, balanced):
        text = mapping.to_json()
        assert json.loads(text)["schema_version"] == SCHEMA_VERSION == 2
        assert Mapping.from_json(text) == mapping
    assert [len(n.hosted) for n in balanced.nodes] == [1, 0, 0, 0]


def edited(mapping, change):
    d = json.loads(mapping.to_json())
    change(d)
    return json.dumps(d)


def slice_of(d, node, index=0):
    return d["nodes"][node]["slices"][index]


CASES = {
    "version missing": (lambda d: d.pop("schema_version"),
                        "schema_version: null, but this version of the project reads mappings of schema_version 2 "
                        "(map the network again with python -m mapping)"),
    "version 1": (lambda d: d.update(schema_version=1),
                  "schema_version: 1, but this version of the project reads mappings of schema_version 2 "
                  "(map the network again with python -m mapping)"),
    "update lanes": (lambda d: slice_of(d, 0).update(update_lanes=10),
                     "nodes[0].slices[0].update_lanes = 10 is not one of [1, 2, 3, 4, 5, 6, 7, 8, 9, 18, 27, "
                     "36] for rows of 4 banks x 9 words"),
    "no nodes": (lambda d: d.pop("nodes"), "nodes: missing"),
    "slice without stride": (lambda d: slice_of(d, 1).pop("stride"), "nodes[1].slices[0].stride: missing"),
    "unknown field": (lambda d: d["nodes"][0].update(colour="red"), "nodes[0].colour: not a field of NodeConfig"),
    "kernel as text": (lambda d: slice_of(d, 0).update(kernel="3"),
                       'nodes[0].slices[0].kernel: expected an integer, got "3"'),
    "index as bool": (lambda d: d["nodes"][0].update(index=True), "nodes[0].index: expected an integer, got true"),
    "short shape": (lambda d: slice_of(d, 0).update(in_shape=[1, 8]),
                    "nodes[0].slices[0].in_shape: expected a list of 3, got [1, 8]"),
    "mode": (lambda d: slice_of(d, 0).update(mode="ICP"), "nodes[0].slices[0].mode: 'ICP' is not one of icp, ocp"),
    "kind": (lambda d: slice_of(d, 0).update(kind="dense"),
             "nodes[0].slices[0].kind: 'dense' is not one of conv, fc"),
    "family typo": (lambda d: d["nodes"][0].update(family="ecp55"),
                    "nodes[0].family: 'ecp55' is not a device family (known: xc7, zynqmp, virtexuplus, ecp5)"),
    "family of another device": (lambda d: d["nodes"][0].update(family="xc7"),
                                 "nodes[0].family: 'xc7', but lfe5um5g-85f is 'ecp5'"),
    "node index": (lambda d: d["nodes"][1].update(index=5),
                   "nodes[1].index: 5, but the node is number 1 of the chain"),
    "hand-edited in_shape": (lambda d: slice_of(d, 1).update(in_shape=[4, 8, 8]),
                             "nodes[1].slices[0]: in_shape [4, 8, 8] with kernel 3, stride 1, padding 1 gives "
                             "8 x 8 pixels, but out_shape is [8, 4, 4]"),
    "in_shape of a whole layer": (
        lambda d: [s.update(in_shape=[4, 8, 8], out_shape=[8, 8, 8]) for n in d["nodes"] for s in n["slices"]
                   if s["layer"] == "conv2"],
        "nodes[0].slices[1].in_shape: [4, 8, 8], but layer 'conv1' hands on [4, 4, 4]"),
    "range outside the layer": (lambda d: slice_of(d, 1).update(in_range=[1, 9]),
                                "nodes[1].slices[0].in_range: [1, 9] is not a channel range within 0..4"),
    "channels missing": (lambda d: slice_of(d, 1).update(in_range=[2, 3]),
                         "nodes[1].slices[0].in_range: [2, 3], but the slices of layer 'conv2' before it in the "
                         "chain end at channel 1"),
    "fc cut inside a channel": (lambda d: slice_of(d, 3).update(in_range=[0, 30]),
                                "nodes[3].slices[0]: a fully connected layer after a flatten is an ICP layer cut "
                                "between channels of the 8x2x2 map (in_range ends multiples of 4), not ICP [0, 30]"),
    "act-ram of part pixels": (lambda d: slice_of(d, 1).update(act_ram_words=slice_of(d, 1)["act_ram_words"] + 1),
                               "nodes[1].slices[0].act_ram_words: 129 is not a positive multiple of the slice's 2 "
                               "input channels"),
    "act-ram of part samples": (lambda d: slice_of(d, 1).update(act_ram_words=slice_of(d, 1)["act_ram_words"] + 2),
                                "nodes[1].slices[0].act_ram_words: 130 is not a multiple of the slice's input "
                                "(2 x 4 x 4 = 32 words) of at least max(1, fp_stale = 3) samples"),
    "act-ram under fp_stale": (lambda d: slice_of(d, 1).update(act_ram_words=64),
                               "nodes[1].slices[0].act_ram_words: 64 is not a multiple of the slice's input "
                               "(2 x 4 x 4 = 32 words) of at least max(1, fp_stale = 3) samples"),
    "engine kernel": (lambda d: slice_of(d, 0)["fp"].update(kernel=5),
                      "nodes[0].slices[0].fp: 4 x 1 tiles of 5 x 5, but the slice needs at least 1 x 1 tiles of "
                      "3 x 3"),
    "formats": (lambda d: d["nodes"][0]["formats"].update(bias_frac=30),
                "nodes[0].formats: bias_frac = 30 exceeds act_frac + weight_frac = 20; the bias could not be "
                "aligned exactly"),
    "loss": (lambda d: d["nodes"][0]["formats"].update(loss="softmax"),
             "nodes[0].formats: loss = 'softmax' is not one of mse, ce"),
    "one slice's update overlapped": (lambda d: slice_of(d, 1).update(overlapped_update=True),
                                      "nodes[1].slices[0].overlapped_update: true, but nodes[0].slices[0] has "
                                      "false: the update stops the engines everywhere or nowhere"),
    "act storage": (lambda d: slice_of(d, 0).update(act_storage="disk"),
                    "nodes[0].slices[0].act_storage: 'disk' is not one of chip, dram"),
    "act storage without DRAM": (lambda d: slice_of(d, 0).update(act_storage="dram"),
                                 'nodes[0].slices[0].act_storage: "dram", but lfe5um5g-85f has no DRAM'),
    "overlapped update as text": (lambda d: slice_of(d, 0).update(overlapped_update="yes"),
                                  'nodes[0].slices[0].overlapped_update: expected true or false, got "yes"'),
}


def refusal_of(mapping, change):
    """The message Mapping.from_json refuses ``mapping``'s JSON with once ``change`` edits it."""
    with pytest.raises(SpecError) as error:
        Mapping.from_json(edited(mapping, change))
    return str(error.value)


@pytest.mark.parametrize("case", CASES)
def test_a_broken_field_is_refused_by_name(tiny, case):
    change, message = CASES[case]
    assert refusal_of(tiny, change) == message


GROUPED_CASES = {
    # node 2 holds conv2's slices of inputs 1..2 (group 0) and 2..3 (group 1)
    "groups not dividing": (
        lambda d: [s.update(groups=3) for n in d["nodes"] for s in n["slices"] if s["layer"] == "conv2"],
        "nodes[1].slices[1].groups: 3 does not divide the conv layer's 4 input and 8 output channels"),
    "a slice across groups": (lambda d: slice_of(d, 2, 1).update(in_range=[1, 3]),
                              "nodes[2].slices[1].in_range: [1, 3] crosses a boundary of the 2 groups of 2 "
                              "channels: a slice lies in one group"),
    "every output of a grouped slice": (lambda d: slice_of(d, 2, 1).update(out_range=[0, 8]),
                                        "nodes[2].slices[1].out_range: [0, 8], but a slice in mode 'icp' covers "
                                        "its group's channels there, [4, 8]"),
    "groups on one slice": (lambda d: slice_of(d, 3, 0).update(groups=1),
                            "nodes[3].slices[0].out_range: [4, 8], but a slice in mode 'icp' covers all 8 "
                            "channels there"),
}


@pytest.fixture(scope="module")
def grouped():
    return map_network(zoo.tiny_grouped(), parse_cluster("ecp5-85:4"))


@pytest.mark.parametrize("case", GROUPED_CASES)
def test_a_grouped_slice_that_leaves_its_group_is_refused_by_name(grouped, case):
    change, message = GROUPED_CASES[case]
    assert refusal_of(grouped, change) == message


@pytest.mark.parametrize("change, message", [
    (lambda d: d["nodes"][0]["hosted"][0].update(host=3),
     "nodes[0].hosted[0].host: 3, but the block is hosted on node 0"),
    (lambda d: d["nodes"][0]["hosted"][0].update(words=5),
     "nodes[0].hosted[0]: layer 'conv2' rows [4, 16] of inputs [0, 4], 5 words, but its owner_slice is layer "
     "'conv2' rows [4, 16] of inputs [0, 4], 432 words"),
])
def test_a_weight_block_that_disagrees_is_refused(balanced, change, message):
    with pytest.raises(SpecError) as error:
        Mapping.from_json(edited(balanced, change))
    assert str(error.value) == message


@pytest.mark.parametrize("text, message", [
    ("", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    ("[1, 2]", "expected a JSON object with a mapping's fields, got [1, 2]"),
    ((EXAMPLES / "tiny.json").read_text(),
     "this is a network description, not a mapping (python -m mapping --for-hardware writes one)"),
])
def test_what_is_not_a_mapping_is_refused(text, message):
    with pytest.raises(SpecError) as error:
        Mapping.from_json(text)
    assert str(error.value) == message


def test_a_truncated_file_and_a_nan_are_refused(tiny):
    with pytest.raises(SpecError, match=r"^not valid JSON \(Expecting"):
        Mapping.from_json(tiny.to_json()[:200])
    with pytest.raises(SpecError) as error:
        Mapping.from_json(tiny.to_json().replace('"lr": 0.01', '"lr": NaN', 1))
    assert str(error.value) == "nodes[0].training.lr: expected a finite number, got NaN"
