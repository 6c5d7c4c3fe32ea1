"""Network descriptions: zoo figures, shapes, per-layer counts, spec files, refusals."""

import subprocess
import sys
from pathlib import Path

import pytest

from mapping import network, zoo
from mapping.errors import SpecError

EXAMPLES = Path(__file__).resolve().parents[1] / "mapping" / "examples"
WEIGHTED = ("conv2d", "linear")


# --- zoo figures -------------------------------------------------------------

@pytest.mark.parametrize("name, params, fp_macs", [
    ("vgg16", 138_357_544, 15_470_264_320),      # torchvision vgg16: 138.36M, ~15.5 GMAC
    ("vgg19", 143_667_240, 19_632_062_464),      # torchvision vgg19: 143.67M
    ("alexnet", 60_965_224, 724_406_816),        # Krizhevsky 2012, two groups: ~61M
    # one tower: conv2/4/5 see all input channels, twice the grouped weights (+1,413,120)
    ("alexnet-ungrouped", 62_378_344, 1_135_256_096),
    ("resnet18", 11_689_512, 1_814_073_344),     # torchvision resnet18: 11.69M, ~1.8 GMAC
    # tiny: conv 1->4 (36+4), conv 4->8 (288+8), fc 32->10 (320+10);
    # MACs 36*8*8 + 288*4*4 + 320.
    ("tiny", 666, 7_232),
    # lenet-digits: 60 + 880 + (64*32+32) + (32*10+10); MACs 54*64 + 864*16 + 2048 + 320.
    ("lenet-digits", 3_350, 19_648),
])
def test_zoo_figures(name, params, fp_macs):
    net = zoo.get(name)
    assert net.params == params
    assert net.fp_macs == fp_macs


def test_vgg16_headline_numbers():
    net = zoo.vgg16()
    assert round(net.params / 1e6, 2) == 138.36
    assert round(net.fp_macs / 1e9, 1) == 15.5


def test_training_macs_are_three_passes_minus_first_eb():
    for name in ("vgg16", "alexnet", "tiny"):
        net = zoo.get(name)
        assert net.macs == 3 * net.fp_macs - net[0].fp_macs


@pytest.mark.parametrize("name, layer, in_shape, out_shape", [
    ("vgg16", "conv1_1", (3, 224, 224), (64, 224, 224)),
    ("vgg16", "conv5_3", (512, 14, 14), (512, 14, 14)),
    ("vgg16", "pool5", (512, 14, 14), (512, 7, 7)),
    ("vgg16", "fc6", (25088, 1, 1), (4096, 1, 1)),
    ("vgg16", "fc8", (4096, 1, 1), (1000, 1, 1)),
    ("alexnet", "conv1", (3, 227, 227), (96, 55, 55)),
    ("alexnet", "pool1", (96, 55, 55), (96, 27, 27)),
    ("alexnet", "conv2", (96, 27, 27), (256, 27, 27)),
    ("alexnet", "pool5", (256, 13, 13), (256, 6, 6)),
    ("alexnet", "fc6", (9216, 1, 1), (4096, 1, 1)),
    ("resnet18", "conv1", (3, 224, 224), (64, 112, 112)),
    ("resnet18", "pool1", (64, 112, 112), (64, 56, 56)),
    ("resnet18", "layer2.0.down", (64, 56, 56), (128, 28, 28)),
    ("resnet18", "layer4.1.relu2", (512, 7, 7), (512, 7, 7)),
    ("resnet18", "avgpool", (512, 7, 7), (512, 1, 1)),
    ("tiny", "pool2", (8, 4, 4), (8, 2, 2)),
    ("tiny", "flatten", (8, 2, 2), (32, 1, 1)),
])
def test_shapes(name, layer, in_shape, out_shape):
    info = zoo.get(name)[layer]
    assert (info.in_shape, info.out_shape) == (in_shape, out_shape)


def test_per_layer_counts_tiny():
    # (name, weights, biases, fp, eb, pg): EB of the first layer is 0.
    expected = [
        ("conv1", 36, 4, 2304, 0, 2304),
        ("relu1", 0, 0, 0, 0, 0),
        ("pool1", 0, 0, 0, 0, 0),
        ("conv2", 288, 8, 4608, 4608, 4608),
        ("relu2", 0, 0, 0, 0, 0),
        ("pool2", 0, 0, 0, 0, 0),
        ("flatten", 0, 0, 0, 0, 0),
        ("fc", 320, 10, 320, 320, 320),
    ]
    got = [(i.name, i.weights, i.biases, i.fp_macs, i.eb_macs, i.pg_macs) for i in zoo.tiny()]
    assert got == expected


@pytest.mark.parametrize("name", ["vgg16", "alexnet", "resnet18"])
def test_per_layer_counts_follow_geometry(name):
    net = zoo.get(name)
    assert net[0].eb_macs == 0 and net[0].fp_macs > 0
    for info in net:
        layer = info.layer
        if info.type in WEIGHTED:
            c_in = info.in_channels // (layer.groups if info.type == "conv2d" else 1)
            k = layer.kernel if info.type == "conv2d" else 1
            assert info.weights == info.out_channels * c_in * k * k
            assert info.biases == (info.out_channels if layer.bias else 0)
            assert info.fp_macs == info.weights * info.out_shape[1] * info.out_shape[2]
            assert info.pg_macs == info.fp_macs
            assert info.eb_macs == (0 if info.position == 0 else info.fp_macs)
        elif info.type != "batchnorm":
            assert info.params == info.macs == 0


def test_grouped_and_layer_properties():
    conv2 = zoo.alexnet()["conv2"]
    assert conv2.weights == 256 * 48 * 5 * 5          # two groups of 48 input channels
    assert conv2.fp_macs == 307_200 * 27 * 27
    fc6 = zoo.vgg16()["fc6"]
    assert (fc6.params, fc6.kernel, fc6.has_weights) == (25088 * 4096 + 4096, 1, True)
    assert (fc6.in_activations, fc6.out_activations) == (25088, 4096)
    assert zoo.vgg16().num_classes == 1000
    assert [info.name for info in zoo.tiny().weighted_layers] == ["conv1", "conv2", "fc"]


# --- spec files --------------------------------------------------------------

@pytest.mark.parametrize("filename", ["tiny.toml", "tiny.json"])
def test_example_files_reproduce_zoo_tiny(filename):
    loaded = zoo.get(str(EXAMPLES / filename))
    assert loaded == zoo.tiny()


def test_from_dict_defaults_and_out_features():
    net = network.from_dict({"input": [3, 5, 5], "layers": [
        {"type": "conv2d", "out_channels": 2, "kernel": 3, "stride": 2, "padding": 1,
         "bias": False},
        {"type": "flatten"},
        {"type": "linear", "out_features": 4},
    ]})
    assert net.name == "network"
    assert [info.name for info in net] == ["conv2d0", "flatten1", "linear2"]
    assert net[0].out_shape == (2, 3, 3) and net[0].biases == 0
    assert net[2].in_shape == (18, 1, 1) and net[2].params == 18 * 4 + 4


def test_declared_in_channels_that_chain_are_accepted():
    net = network.from_dict({"name": "n", "input": [3, 8, 8], "layers": [
        {"type": "conv2d", "name": "c1", "in_channels": 3, "out_channels": 4, "kernel": 3},
        {"type": "conv2d", "name": "c2", "in_channels": 4, "out_channels": 4, "kernel": 3},
    ]})
    assert net["c2"].out_shape == (4, 4, 4)


def _spec(layers, input_shape=(1, 8, 8)):
    return {"name": "n", "input": list(input_shape), "layers": layers}


def _conv(**fields):
    return {"type": "conv2d", "name": "c", "out_channels": 4, "kernel": 3, **fields}


@pytest.mark.parametrize("spec, message", [
    (_spec([{"type": "conv3d", "name": "c"}]),
     "network n, layer 'c': unknown layer type 'conv3d' (known: conv2d, relu, maxpool, "
     "flatten, linear, batchnorm, add, avgpool)"),
    (_spec([_conv(in_channels=3)]),
     "network n, layer 'c' (conv2d): declares in_channels=3 but receives 1 channels"),
    (_spec([_conv(out_channels=0)]),
     "network n, layer 'c' (conv2d): out_channels must be a positive integer, got 0"),
    (_spec([_conv(out_channels=-4)]),
     "network n, layer 'c' (conv2d): out_channels must be a positive integer, got -4"),
    (_spec([_conv(kernel=0)]),
     "network n, layer 'c' (conv2d): kernel must be a positive integer, got 0"),
    (_spec([_conv(stride=0)]),
     "network n, layer 'c' (conv2d): stride must be a positive integer, got 0"),
    (_spec([_conv(padding=-1)]),
     "network n, layer 'c' (conv2d): padding must be an integer >= 0, got -1"),
    (_spec([_conv(kernel="3")]),
     "network n, layer 'c' (conv2d): kernel must be a positive integer, got '3'"),
    (_spec([_conv()], (1, 0, 8)),
     "network n: input height must be a positive integer, got 0"),
    (_spec([_conv()], (-1, 8, 8)),
     "network n: input channels must be a positive integer, got -1"),
    (_spec([_conv()], (1, 8)),
     "network n: input must be [channels, height, width], got [1, 8]"),
    (_spec([_conv(kernel=11, padding=1)]),
     "network n, layer 'c' (conv2d): kernel 11 is larger than the padded input 10"),
    (_spec([{"type": "maxpool", "name": "p", "kernel": 9, "stride": 2}]),
     "network n, layer 'p' (maxpool): kernel 9 is larger than the padded input 8"),
    (_spec([{"type": "maxpool", "name": "p", "kernel": 2, "stride": 2, "padding": 2}]),
     "network n, layer 'p' (maxpool): padding must be in 0..1, got 2"),
    (_spec([_conv(groups=3)], (4, 8, 8)),
     "network n, layer 'c' (conv2d): groups=3 does not divide 4 in / 4 out channels"),
    (_spec([_conv(dilation=2)]),
     "network n, layer 'c': unknown field(s) dilation"),
    (_spec([{"type": "linear", "name": "fc", "out_features": 10}]),
     "network n, layer 'fc' (linear): input is 1x8x8; add a flatten layer before it"),
    (_spec([{"type": "relu", "name": "a"}, {"type": "relu", "name": "a"}]),
     "network n, layer 'a' (relu): the name is used twice"),
    (_spec([{"type": "relu", "name": "r"}, {"type": "add", "name": "s", "inputs": ["r", "x"]}]),
     "network n, layer 's' (add): input 'x' is not an earlier layer"),
    (_spec([{"name": "c"}]), "network n: layer #0 needs a 'type'"),
    (_spec([]), "network n: has no layers"),
    ({"name": "n", "layers": []}, "n: missing 'input'"),
])
def test_refusals(spec, message):
    with pytest.raises(SpecError) as error:
        network.from_dict(spec, origin=spec.get("name", "network"))
    assert str(error.value) == message


@pytest.mark.parametrize("fields, message", [
    ({"padding": "1"}, "padding must be an integer >= 0, got '1'"),
    ({"padding": 1.5}, "padding must be an integer >= 0, got 1.5"),
    ({"bias": "no"}, "bias must be true or false, got 'no'"),
    ({"in_channels": 0}, "in_channels must be a positive integer, got 0"),
])
def test_mistyped_fields_are_refused(fields, message):
    with pytest.raises(SpecError) as error:
        network.from_dict(_spec([_conv(**fields)]))
    assert str(error.value).endswith(message)


def test_layers_must_be_a_list():
    with pytest.raises(SpecError) as error:
        network.from_dict({"name": "n", "input": [1, 8, 8], "layers": {"type": "relu"}})
    assert str(error.value) == "network n: 'layers' must be a list, got {'type': 'relu'}"


def test_maxpool_stride_defaults_to_its_kernel_in_spec_files():
    net = network.from_dict({"name": "n", "input": [1, 8, 8], "layers": [{"type": "maxpool", "kernel": 2}]})
    assert net[0].out_shape == (1, 4, 4)


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'n'\ninput = [1, 8, 8\n")
    with pytest.raises(SpecError) as error:
        network.load(bad)
    assert str(error.value) == f"network file {bad}: Unclosed array (at end of document)"
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"name": "n", "input": [1, 8, 8]')
    with pytest.raises(SpecError) as error:
        zoo.get(str(bad_json))
    assert str(error.value) == (f"network file {bad_json}: Expecting ',' delimiter: "
                                f"line 1 column 33 (char 32)")
    with pytest.raises(SpecError) as error:
        zoo.get(str(tmp_path / "none.json"))
    assert str(error.value) == f"network file {tmp_path / 'none.json'}: No such file or directory"


def test_unknown_zoo_name():
    with pytest.raises(SpecError) as error:
        zoo.get("lenet")
    assert str(error.value) == ("unknown network 'lenet' (zoo: tiny, tiny-grouped, micro, lenet-digits, alexnet-digits, alexnet-towers, alexnet, "
                                "alexnet-ungrouped, vgg16, vgg19, resnet18, lenet5, vgg11, vgg13, "
                                "vgg16-bn, resnet34, resnet50; or a .toml/.json file)")


# --- what training accepts ---------------------------------------------------

@pytest.mark.parametrize("name", ["tiny", "lenet-digits", "alexnet", "alexnet-ungrouped", "vgg16", "vgg19"])
def test_trainable_networks(name):
    net = zoo.get(name)
    assert net.check_trainable() is net


@pytest.mark.parametrize("build, message", [
    (zoo.resnet18, "network resnet18: layer 'bn1' is batchnorm, which is described (shapes "
                   "and counts) but not yet supported for training"),
    (lambda: network.from_dict(_spec([
        {"type": "relu", "name": "r1"}, {"type": "relu", "name": "r2"},
        {"type": "add", "name": "sum", "inputs": ["r1", "r2"]},
        {"type": "flatten", "name": "f"}, {"type": "linear", "name": "fc", "out_features": 3},
    ])), "network n: layer 'sum' is add, which is described (shapes and counts) but not yet "
         "supported for training"),
    (lambda: network.from_dict(_spec([_conv()])),
     "network n: the last layer 'c' outputs (4, 6, 6); training needs a vector of class scores"),
])
def test_check_trainable_refusals(build, message):
    net = build()
    with pytest.raises(SpecError) as error:
        net.check_trainable()
    assert str(error.value) == message


def test_cli_prints_one_line_without_traceback():
    code = ("from mapping.errors import run_cli\n"
            "from mapping import zoo\n"
            "run_cli(lambda: zoo.get('lenet'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=EXAMPLES.parents[1])
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: unknown network 'lenet' (zoo: ")
    assert "Traceback" not in result.stderr
