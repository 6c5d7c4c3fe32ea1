"""Built-in networks.

``tiny`` and ``lenet-digits`` are small enough for cycle-level simulation (``tiny-grouped``
is ``tiny`` with a grouped conv2);
``alexnet`` (Krizhevsky et al. 2012, two-group convolutions as in the original,
227x227 input), ``alexnet-ungrouped`` (the same as one tower),
``vgg16``/``vgg19`` (Simonyan & Zisserman, 224x224) and
``resnet18`` (He et al., 224x224; shapes and counts only) are the paper-scale
benchmarks. For the AccPar and MTrain comparisons (mapping/accpar, mapping/mtrain):
``lenet5`` (LeNet-5 on MNIST), ``vgg11``/``vgg13``, ``vgg16-bn`` (batch norm after
every convolution) and ``resnet34``/``resnet50`` (bottleneck blocks); batch norm and
residual adds are described (shapes, counts) but refused for training as before.
"""

from pathlib import Path

from .errors import SpecError
from .network import Layer, infer, load


def conv(name, out, k, stride=1, pad=0, groups=1, bias=True):
    """A conv2d layer (biased, ungrouped unless told): the zoo's networks and tests build with it."""
    return Layer("conv2d", name, out_channels=out, kernel=k, stride=stride, padding=pad,
                 groups=groups, bias=bias)


def _relu(name):
    return Layer("relu", name)


def _pool(name, k=2, stride=2, pad=0):
    return Layer("maxpool", name, kernel=k, stride=stride, padding=pad)


def _fc(name, out):
    return Layer("linear", name, out_channels=out)


def lenet5():
    """LeNet-5 (LeCun et al. 1998) on 28x28 MNIST digits, padded to 32x32 by conv1."""
    return infer("lenet5", (1, 28, 28), [
        conv("conv1", 6, 5, pad=2), _relu("relu1"), _pool("pool1"),
        conv("conv2", 16, 5), _relu("relu2"), _pool("pool2"),
        Layer("flatten", "flatten"), _fc("fc1", 120), _relu("relu3"), _fc("fc2", 84), _relu("relu4"),
        _fc("fc3", 10),
    ])


def tiny():
    """Two 3x3 conv layers and a classifier on 1x8x8 inputs: the cycle-level test net."""
    return infer("tiny", (1, 8, 8), [
        conv("conv1", 4, 3, pad=1), _relu("relu1"), _pool("pool1"),
        conv("conv2", 8, 3, pad=1), _relu("relu2"), _pool("pool2"),
        Layer("flatten", "flatten"), _fc("fc", 10),
    ])


def tiny_grouped():
    """``tiny`` with conv2 grouped (two groups of 2 input and 4 output channels, AlexNet's
    two towers at the size of 8x8 digits): the small grouped net for the hardware to build."""
    return infer("tiny-grouped", (1, 8, 8), [
        conv("conv1", 4, 3, pad=1), _relu("relu1"), _pool("pool1"),
        conv("conv2", 8, 3, pad=1, groups=2), _relu("relu2"), _pool("pool2"),
        Layer("flatten", "flatten"), _fc("fc", 10),
    ])


def micro():
    """One 3x3 conv layer of 2 channels and a classifier on 1x6x6 inputs: the smallest net whose
    nodes have every engine (FP, PG; EB at the classifier), for the quickest board build."""
    return infer("micro", (1, 6, 6), [
        conv("conv1", 2, 3, pad=1), _relu("relu1"), _pool("pool1"),
        Layer("flatten", "flatten"), _fc("fc", 4),
    ])


def alexnet_digits():
    """AlexNet's features at the size of 8x8 digit images: its overlapping max-pool (3x3
    windows, stride 2) after a 3x3 conv of 4 channels, and a classifier of 10. CI trains it
    through ``python -m sim.train`` with the features the generator builds for paper-scale
    networks (narrow gradient sums, the samples in flight in DRAM)."""
    return infer("alexnet-digits", (1, 8, 8), [
        conv("conv1", 4, 3, pad=1), _relu("relu1"), _pool("pool1", k=3, stride=2),
        Layer("flatten", "flatten"), _fc("fc", 10),
    ])


def alexnet_towers():
    """AlexNet in miniature for 8x8 digit images, every paper-scale feature the generator builds
    at a size CI trains: two towers (conv2 in two groups), the overlapping max-pool, and two
    fully connected layers whose first hands its 24 outputs on as a map's pixels when mapped
    with ``vector_words`` below 24 (``python -m sim.train --vector-words 8``)."""
    return infer("alexnet-towers", (1, 8, 8), [
        conv("conv1", 4, 3, pad=1), _relu("relu1"), conv("conv2", 8, 3, pad=1, groups=2), _relu("relu2"),
        _pool("pool2", k=3, stride=2), Layer("flatten", "flatten"), _fc("fc1", 24), _relu("relu3"), _fc("fc2", 10),
    ])


def lenet_digits():
    """A LeNet-size net for 8x8 digit images (as in scikit-learn's digits set), 10 classes."""
    return infer("lenet-digits", (1, 8, 8), [
        conv("conv1", 6, 3, pad=1), _relu("relu1"), _pool("pool1"),
        conv("conv2", 16, 3, pad=1), _relu("relu2"), _pool("pool2"),
        Layer("flatten", "flatten"), _fc("fc1", 32), _relu("relu3"), _fc("fc2", 10),
    ])


def _alexnet(name, groups):
    return infer(name, (3, 227, 227), [
        conv("conv1", 96, 11, stride=4), _relu("relu1"), _pool("pool1", 3, 2),
        conv("conv2", 256, 5, pad=2, groups=groups), _relu("relu2"), _pool("pool2", 3, 2),
        conv("conv3", 384, 3, pad=1), _relu("relu3"),
        conv("conv4", 384, 3, pad=1, groups=groups), _relu("relu4"),
        conv("conv5", 256, 3, pad=1, groups=groups), _relu("relu5"), _pool("pool5", 3, 2),
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


def _vgg(name, stages, batchnorm=False):
    layers = []
    for stage, (channels, convs) in enumerate(stages, start=1):
        for i in range(1, convs + 1):
            layers.append(conv(f"conv{stage}_{i}", channels, 3, pad=1))
            if batchnorm:
                layers.append(Layer("batchnorm", f"bn{stage}_{i}"))
            layers.append(_relu(f"relu{stage}_{i}"))
        layers.append(_pool(f"pool{stage}"))
    layers += [Layer("flatten", "flatten"), _fc("fc6", 4096), _relu("relu6"),
               _fc("fc7", 4096), _relu("relu7"), _fc("fc8", 1000)]
    return infer(name, (3, 224, 224), layers)


def vgg11():
    return _vgg("vgg11", [(64, 1), (128, 1), (256, 2), (512, 2), (512, 2)])


def vgg13():
    return _vgg("vgg13", [(64, 2), (128, 2), (256, 2), (512, 2), (512, 2)])


def vgg16():
    return _vgg("vgg16", [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)])


def vgg16_bn():
    """VGG-16 with batch norm after every convolution, the VGG-16 MTrain trains."""
    return _vgg("vgg16-bn", [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], batchnorm=True)


def vgg19():
    return _vgg("vgg19", [(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)])


def _basic_block(p, channels, stride, previous):
    """Two 3x3 convolutions (He et al. Fig. 2 left); returns the block's layers and its last name."""
    return [
        conv(f"{p}.conv1", channels, 3, stride=stride, pad=1, bias=False),
        Layer("batchnorm", f"{p}.bn1"), _relu(f"{p}.relu1"),
        conv(f"{p}.conv2", channels, 3, pad=1, bias=False), Layer("batchnorm", f"{p}.bn2"),
    ], f"{p}.bn2"


def _bottleneck(p, channels, stride, previous):
    """1x1 reduce, 3x3 (carrying the stride, as torchvision's v1.5), 1x1 expand by 4 (He et al. Fig. 5 right)."""
    return [
        conv(f"{p}.conv1", channels, 1, bias=False), Layer("batchnorm", f"{p}.bn1"), _relu(f"{p}.relu1"),
        conv(f"{p}.conv2", channels, 3, stride=stride, pad=1, bias=False),
        Layer("batchnorm", f"{p}.bn2"), _relu(f"{p}.relu2"),
        conv(f"{p}.conv3", 4 * channels, 1, bias=False), Layer("batchnorm", f"{p}.bn3"),
    ], f"{p}.bn3"


def _resnet(name, block, blocks_per_stage, expansion):
    layers = [conv("conv1", 64, 7, stride=2, pad=3, bias=False), Layer("batchnorm", "bn1"),
              _relu("relu1"), _pool("pool1", 3, 2, 1)]
    previous, channels_in = "pool1", 64
    for stage, (channels, count) in enumerate(zip((64, 128, 256, 512), blocks_per_stage), start=1):
        for index in range(count):
            p = f"layer{stage}.{index}"
            stride = 2 if stage > 1 and index == 0 else 1
            body, last = block(p, channels, stride, previous)
            layers += body
            shortcut = previous
            if stride != 1 or channels_in != channels * expansion:
                layers += [Layer("conv2d", f"{p}.down", out_channels=channels * expansion, kernel=1,
                                 stride=stride, bias=False, input=previous),
                           Layer("batchnorm", f"{p}.downbn")]
                shortcut = f"{p}.downbn"
            out = f"{p}.relu{sum(layer.type == 'relu' for layer in body) + 1}"
            layers += [Layer("add", f"{p}.add", inputs=(last, shortcut)), _relu(out)]
            previous, channels_in = out, channels * expansion
    layers += [Layer("avgpool", "avgpool", kernel=0), Layer("flatten", "flatten"), _fc("fc", 1000)]
    return infer(name, (3, 224, 224), layers)


def resnet18():
    return _resnet("resnet18", _basic_block, (2, 2, 2, 2), 1)


def resnet34():
    return _resnet("resnet34", _basic_block, (3, 4, 6, 3), 1)


def resnet50():
    return _resnet("resnet50", _bottleneck, (3, 4, 6, 3), 4)


NETWORKS = {
    "tiny": tiny,
    "tiny-grouped": tiny_grouped,
    "micro": micro,
    "lenet-digits": lenet_digits,
    "alexnet-digits": alexnet_digits,
    "alexnet-towers": alexnet_towers,
    "alexnet": alexnet,
    "alexnet-ungrouped": alexnet_ungrouped,
    "vgg16": vgg16,
    "vgg19": vgg19,
    "resnet18": resnet18,
    "lenet5": lenet5,
    "vgg11": vgg11,
    "vgg13": vgg13,
    "vgg16-bn": vgg16_bn,
    "resnet34": resnet34,
    "resnet50": resnet50,
}


def get(name_or_path):
    """A zoo network by name, or a network file by path."""
    if name_or_path in NETWORKS:
        return NETWORKS[name_or_path]()
    if Path(name_or_path).suffix in (".toml", ".json"):
        return load(name_or_path)
    raise SpecError(f"unknown network '{name_or_path}' (zoo: {', '.join(NETWORKS)}; "
                    f"or a .toml/.json file)")
