"""Built-in networks.

``tiny`` and ``lenet-digits`` are small enough for cycle-level simulation;
``alexnet`` (Krizhevsky et al. 2012, two-group convolutions as in the original,
227x227 input), ``alexnet-ungrouped`` (the same as one tower, trainable here),
``vgg16``/``vgg19`` (Simonyan & Zisserman, 224x224) and
``resnet18`` (He et al., 224x224; shapes and counts only) are the paper-scale
benchmarks.
"""

from pathlib import Path

from .errors import SpecError
from .network import Layer, infer, load


def _conv(name, out, k, stride=1, pad=0, groups=1, bias=True):
    return Layer("conv2d", name, out_channels=out, kernel=k, stride=stride, padding=pad,
                 groups=groups, bias=bias)


def _relu(name):
    return Layer("relu", name)


def _pool(name, k=2, stride=2, pad=0):
    return Layer("maxpool", name, kernel=k, stride=stride, padding=pad)


def _fc(name, out):
    return Layer("linear", name, out_channels=out)


def tiny():
    """Two 3x3 conv layers and a classifier on 1x8x8 inputs: the cycle-level test net."""
    return infer("tiny", (1, 8, 8), [
        _conv("conv1", 4, 3, pad=1), _relu("relu1"), _pool("pool1"),
        _conv("conv2", 8, 3, pad=1), _relu("relu2"), _pool("pool2"),
        Layer("flatten", "flatten"), _fc("fc", 10),
    ])


def lenet_digits():
    """A LeNet-size net for 8x8 digit images (as in scikit-learn's digits set), 10 classes."""
    return infer("lenet-digits", (1, 8, 8), [
        _conv("conv1", 6, 3, pad=1), _relu("relu1"), _pool("pool1"),
        _conv("conv2", 16, 3, pad=1), _relu("relu2"), _pool("pool2"),
        Layer("flatten", "flatten"), _fc("fc1", 32), _relu("relu3"), _fc("fc2", 10),
    ])


def _alexnet(name, groups):
    return infer(name, (3, 227, 227), [
        _conv("conv1", 96, 11, stride=4), _relu("relu1"), _pool("pool1", 3, 2),
        _conv("conv2", 256, 5, pad=2, groups=groups), _relu("relu2"), _pool("pool2", 3, 2),
        _conv("conv3", 384, 3, pad=1), _relu("relu3"),
        _conv("conv4", 384, 3, pad=1, groups=groups), _relu("relu4"),
        _conv("conv5", 256, 3, pad=1, groups=groups), _relu("relu5"), _pool("pool5", 3, 2),
        Layer("flatten", "flatten"),
        _fc("fc6", 4096), _relu("relu6"), _fc("fc7", 4096), _relu("relu7"), _fc("fc8", 1000),
    ])


def alexnet():
    return _alexnet("alexnet", groups=2)


def alexnet_ungrouped():
    """AlexNet as one tower (no two-GPU grouping), the version FPDeep's figures imply:
    its epoch times for AlexNet, VGG-16 and VGG-19 are all 1.2x what 15 x its
    per-device GOPS give with this network, and 2.4x with the grouped one."""
    return _alexnet("alexnet-ungrouped", groups=1)


def _vgg(name, stages):
    layers = []
    for stage, (channels, convs) in enumerate(stages, start=1):
        for i in range(1, convs + 1):
            layers += [_conv(f"conv{stage}_{i}", channels, 3, pad=1), _relu(f"relu{stage}_{i}")]
        layers.append(_pool(f"pool{stage}"))
    layers += [Layer("flatten", "flatten"), _fc("fc6", 4096), _relu("relu6"),
               _fc("fc7", 4096), _relu("relu7"), _fc("fc8", 1000)]
    return infer(name, (3, 224, 224), layers)


def vgg16():
    return _vgg("vgg16", [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)])


def vgg19():
    return _vgg("vgg19", [(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)])


def resnet18():
    layers = [_conv("conv1", 64, 7, stride=2, pad=3, bias=False), Layer("batchnorm", "bn1"),
              _relu("relu1"), _pool("pool1", 3, 2, 1)]
    previous = "pool1"
    for stage, channels in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            p = f"layer{stage}.{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            layers += [
                _conv(f"{p}.conv1", channels, 3, stride=stride, pad=1, bias=False),
                Layer("batchnorm", f"{p}.bn1"), _relu(f"{p}.relu1"),
                _conv(f"{p}.conv2", channels, 3, pad=1, bias=False), Layer("batchnorm", f"{p}.bn2"),
            ]
            shortcut = previous
            if stride != 1:
                layers += [Layer("conv2d", f"{p}.down", out_channels=channels, kernel=1, stride=2,
                                 bias=False, input=previous),
                           Layer("batchnorm", f"{p}.downbn")]
                shortcut = f"{p}.downbn"
            layers += [Layer("add", f"{p}.add", inputs=(f"{p}.bn2", shortcut)), _relu(f"{p}.relu2")]
            previous = f"{p}.relu2"
    layers += [Layer("avgpool", "avgpool", kernel=0), Layer("flatten", "flatten"), _fc("fc", 1000)]
    return infer("resnet18", (3, 224, 224), layers)


NETWORKS = {
    "tiny": tiny,
    "lenet-digits": lenet_digits,
    "alexnet": alexnet,
    "alexnet-ungrouped": alexnet_ungrouped,
    "vgg16": vgg16,
    "vgg19": vgg19,
    "resnet18": resnet18,
}


def get(name_or_path):
    """A zoo network by name, or a network file by path."""
    if name_or_path in NETWORKS:
        return NETWORKS[name_or_path]()
    if Path(name_or_path).suffix in (".toml", ".json"):
        return load(name_or_path)
    raise SpecError(f"unknown network '{name_or_path}' (zoo: {', '.join(NETWORKS)}; "
                    f"or a .toml/.json file)")
