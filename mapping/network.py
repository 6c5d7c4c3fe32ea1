"""Network descriptions: layer types, shape inference, parameter and operation counts.

A network is a list of layers applied in order to an input of shape (C, H, W).
Each layer reads the previous layer's output unless it names another layer in
``input`` (only residual adds and their shortcut branches need that).

Operation counts are multiply-accumulates (MACs) per sample; one MAC is two
operations when throughput is quoted in GOPS. For convolution and fully
connected layers FP, EB and PG each perform the same number of useful MACs
(every (output, input, kernel tap, output pixel) product appears once in each);
the first layer has no EB because nobody consumes the errors of the image. A
convolution of ``groups`` G pairs each output channel with the IC / G input channels of
its group only (mapping/tensor_ops.py): G times fewer weights and MACs than ungrouped.
"""

from dataclasses import dataclass, fields
import math
from pathlib import Path

from .errors import SpecError, read_spec_file

TRAINABLE_TYPES = ("conv2d", "relu", "maxpool", "flatten", "linear")
DECLARED_ONLY_TYPES = ("batchnorm", "add", "avgpool")


@dataclass(frozen=True)
class Layer:
    """One layer as written in a network spec; geometry is filled in by :func:`infer`."""

    type: str
    name: str
    out_channels: int = 0          # conv2d; out_features for linear
    kernel: int = 1                # conv2d, maxpool, avgpool (0 = global)
    stride: int = 1
    padding: int = 0
    groups: int = 1
    bias: bool = True
    in_channels: int | None = None  # optional check that channels chain
    input: str | None = None        # name of the layer feeding this one (default: previous)
    inputs: tuple = ()              # add: the two layers summed


@dataclass(frozen=True)
class LayerInfo:
    """A layer with its inferred geometry and per-sample counts."""

    layer: Layer
    position: int
    in_shape: tuple   # (C, H, W)
    out_shape: tuple  # (C, H, W)
    weights: int
    biases: int
    fp_macs: int
    eb_macs: int
    pg_macs: int

    @property
    def name(self):
        return self.layer.name

    @property
    def type(self):
        return self.layer.type

    @property
    def params(self):
        return self.weights + self.biases

    @property
    def in_channels(self):
        return self.in_shape[0]

    @property
    def out_channels(self):
        return self.out_shape[0]

    @property
    def macs(self):
        return self.fp_macs + self.eb_macs + self.pg_macs

    @property
    def elementwise_ops(self):
        """(FP, EB, PG) arithmetic per sample of the layers that make no MACs, per output element.

        Batch norm: FP sums x and x^2 for the batch statistics (3 ops), then subtracts the
        mean, scales by 1/sigma, by gamma and adds beta (4); EB forms dy * x_hat and the two
        batch means of dy and dy * x_hat (3), then dy - mean(dy) - x_hat * mean(dy * x_hat)
        times gamma / sigma (4); PG sums dy * x_hat and dy into the gradients of gamma and
        beta (2). Residual add: one addition forward; its error goes to both inputs as is."""
        n = self.out_activations
        if self.type == "batchnorm":
            return 7 * n, 7 * n, 2 * n
        if self.type == "add":
            return n, 0, 0
        return 0, 0, 0

    @property
    def has_weights(self):
        return self.weights > 0

    @property
    def kernel(self):
        return self.layer.kernel

    @property
    def in_activations(self):
        return math.prod(self.in_shape)

    @property
    def out_activations(self):
        return math.prod(self.out_shape)


@dataclass(frozen=True)
class Network:
    name: str
    input_shape: tuple
    layers: tuple  # of LayerInfo

    def __iter__(self):
        return iter(self.layers)

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, key):
        if isinstance(key, str):
            for info in self.layers:
                if info.name == key:
                    return info
            raise KeyError(key)
        return self.layers[key]

    @property
    def params(self):
        return sum(info.params for info in self.layers)

    @property
    def fp_macs(self):
        return sum(info.fp_macs for info in self.layers)

    @property
    def macs(self):
        return sum(info.macs for info in self.layers)

    @property
    def weighted_layers(self):
        return tuple(info for info in self.layers if info.has_weights)

    @property
    def num_classes(self):
        return math.prod(self.layers[-1].out_shape)

    def check_trainable(self):
        """Refuse layer types the training model and the hardware do not support yet."""
        for info in self.layers:
            if info.type in DECLARED_ONLY_TYPES:
                raise SpecError(
                    f"network {self.name}: layer '{info.name}' is {info.type}, which is "
                    f"described (shapes and counts) but not yet supported for training")
            if info.layer.input is not None:
                raise SpecError(
                    f"network {self.name}: layer '{info.name}' reads '{info.layer.input}', "
                    f"but training supports only a plain chain of layers")
        if self.layers[-1].out_shape[1:] != (1, 1):
            raise SpecError(
                f"network {self.name}: the last layer '{self.layers[-1].name}' outputs "
                f"{self.layers[-1].out_shape}; training needs a vector of class scores")
        return self


def _window_out(size, kernel, stride, padding, what):
    padded = size + 2 * padding
    if kernel > padded:
        raise SpecError(f"{what}: kernel {kernel} is larger than the padded input {padded}")
    return (padded - kernel) // stride + 1


def _non_negative(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{what} must be an integer >= 0, got {value!r}")


def _positive(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"{what} must be a positive integer, got {value!r}")


def infer(name, input_shape, layers):
    """Shape inference and counting; raises SpecError naming the layer at fault."""
    if len(input_shape) != 3:
        raise SpecError(f"network {name}: input must be [channels, height, width], got {list(input_shape)}")
    for value, what in zip(input_shape, ("channels", "height", "width")):
        _positive(value, f"network {name}: input {what}")
    infos, shapes = [], {}
    shape = tuple(input_shape)
    for position, layer in enumerate(layers):
        where = f"network {name}, layer '{layer.name}' ({layer.type})"
        if layer.name in shapes or layer.name == "input":
            raise SpecError(f"{where}: the name is used twice")
        if layer.input is not None:
            if layer.input not in shapes:
                raise SpecError(f"{where}: input '{layer.input}' is not an earlier layer")
            shape = shapes[layer.input]
        c, h, w = shape
        weights = biases = macs = 0
        if layer.in_channels is not None:
            _positive(layer.in_channels, f"{where}: in_channels")
        if not isinstance(layer.bias, bool):
            raise SpecError(f"{where}: bias must be true or false, got {layer.bias!r}")
        if layer.in_channels is not None and layer.in_channels != c:
            raise SpecError(f"{where}: declares in_channels={layer.in_channels} but receives {c} channels")
        t = layer.type
        if t == "conv2d":
            _positive(layer.out_channels, f"{where}: out_channels")
            _positive(layer.kernel, f"{where}: kernel")
            _positive(layer.stride, f"{where}: stride")
            _positive(layer.groups, f"{where}: groups")
            _non_negative(layer.padding, f"{where}: padding")
            if c % layer.groups or layer.out_channels % layer.groups:
                raise SpecError(f"{where}: groups={layer.groups} does not divide {c} in / "
                                f"{layer.out_channels} out channels")
            oh = _window_out(h, layer.kernel, layer.stride, layer.padding, where)
            ow = _window_out(w, layer.kernel, layer.stride, layer.padding, where)
            out = (layer.out_channels, oh, ow)
            weights = layer.out_channels * (c // layer.groups) * layer.kernel ** 2
            biases = layer.out_channels if layer.bias else 0
            macs = weights * oh * ow
        elif t == "linear":
            _positive(layer.out_channels, f"{where}: out_features")
            if (h, w) != (1, 1):
                raise SpecError(f"{where}: input is {c}x{h}x{w}; add a flatten layer before it")
            out = (layer.out_channels, 1, 1)
            weights = layer.out_channels * c
            biases = layer.out_channels if layer.bias else 0
            macs = weights
        elif t in ("maxpool", "avgpool"):
            if t == "avgpool" and layer.kernel == 0:  # global average pool
                out = (c, 1, 1)
            else:
                _positive(layer.kernel, f"{where}: kernel")
                _positive(layer.stride, f"{where}: stride")
                _non_negative(layer.padding, f"{where}: padding")
                if not 0 <= layer.padding <= layer.kernel // 2:
                    raise SpecError(f"{where}: padding must be in 0..{layer.kernel // 2}, got {layer.padding}")
                out = (c, _window_out(h, layer.kernel, layer.stride, layer.padding, where),
                       _window_out(w, layer.kernel, layer.stride, layer.padding, where))
        elif t in ("relu", "batchnorm"):
            out = shape
            if t == "batchnorm":
                weights, biases = c, c
        elif t == "flatten":
            out = (c * h * w, 1, 1)
        elif t == "add":
            if len(layer.inputs) != 2:
                raise SpecError(f"{where}: needs inputs = [two earlier layers], got {list(layer.inputs)}")
            for other in layer.inputs:
                if other not in shapes:
                    raise SpecError(f"{where}: input '{other}' is not an earlier layer")
            a, b = (shapes[other] for other in layer.inputs)
            if a != b:
                raise SpecError(f"{where}: cannot add shapes {a} and {b}")
            out = a
        else:
            raise SpecError(f"network {name}, layer '{layer.name}': unknown layer type '{t}' "
                            f"(known: {', '.join(TRAINABLE_TYPES + DECLARED_ONLY_TYPES)})")
        eb = 0 if position == 0 else macs
        infos.append(LayerInfo(layer, position, shape, out, weights, biases, macs, eb, macs))
        shapes[layer.name] = out
        shape = out
    if not infos:
        raise SpecError(f"network {name}: has no layers")
    return Network(name, tuple(input_shape), tuple(infos))


_LAYER_FIELDS = {f.name for f in fields(Layer)}


def from_dict(spec, origin="network"):
    """Build a network from the parsed form of a TOML/JSON spec (see README)."""
    if not isinstance(spec, dict):
        raise SpecError(f"{origin}: expected a table with 'name', 'input' and 'layers'")
    for key in ("input", "layers"):
        if key not in spec:
            raise SpecError(f"{origin}: missing '{key}'")
    name = spec.get("name", origin)
    for key in ("input", "layers"):
        if not isinstance(spec[key], list):
            raise SpecError(f"network {name}: '{key}' must be a list, got {spec[key]!r}")
    layers = []
    for i, entry in enumerate(spec["layers"]):
        if not isinstance(entry, dict) or "type" not in entry:
            raise SpecError(f"network {name}: layer #{i} needs a 'type'")
        entry = dict(entry)
        if "out_features" in entry:
            entry["out_channels"] = entry.pop("out_features")
        entry.setdefault("name", f"{entry['type']}{i}")
        if entry["type"] in ("maxpool", "avgpool") and "kernel" in entry:
            entry.setdefault("stride", entry["kernel"])  # PyTorch's default
        unknown = set(entry) - _LAYER_FIELDS
        if unknown:
            raise SpecError(f"network {name}, layer '{entry['name']}': unknown field(s) "
                            f"{', '.join(sorted(unknown))}")
        if "inputs" in entry:
            entry["inputs"] = tuple(entry["inputs"])
        layers.append(Layer(**entry))
    return infer(name, tuple(spec["input"]), layers)


def load(path):
    """Load a network from a .toml or .json file."""
    return from_dict(read_spec_file(path, "network"), origin=Path(path).stem)

