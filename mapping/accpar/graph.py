"""A network's weighted layers as AccPar searches them: a chain of layers and multi-path blocks.

Non-weighted layers (ReLU, pooling, batch norm, flatten) are computed where
their input lies and cost nothing in AccPar's model; a residual ``add`` joins
the paths that leave a common tensor (its fork) into a :class:`Block`
(AccPar section 5.2). A path may be empty (an identity shortcut).
"""

from dataclasses import dataclass, replace

from ..errors import SpecError
from .costs import dims_of


@dataclass(frozen=True)
class Block:
    """Paths from one fork to one join; the join's tensor is ``batch x channels x area``."""

    name: str
    paths: tuple      # of tuples of LayerDims
    batch: float
    channels: float
    area: int

    @property
    def out_features(self):
        return self.batch * self.channels * self.area

    def layers(self):
        return [layer for path in self.paths for layer in path]

    def split(self, layout, share):
        """The part of the join tensor one side holds in ``layout`` (paths are split separately)."""
        if layout == "B":
            return replace(self, batch=self.batch * share)
        if layout == "C":
            return replace(self, channels=self.channels * share)
        return self


def items_of(network, batch):
    """The network as a tuple of LayerDims and Blocks, in order."""
    state = {"input": ("input", ())}   # tensor name -> (last join, weighted layers since it)
    items, emitted_origin = [], "input"
    previous = "input"

    def emit(origin, path):
        if origin != emitted_origin:
            raise SpecError(f"network {network.name}: branches leave '{origin}' after the chain "
                            f"moved on past it; only nested-free residual blocks are supported")
        items.extend(path)

    first = True
    for info in network:
        source = info.layer.input or previous
        if info.type == "add":
            (origin_a, path_a), (origin_b, path_b) = (state[name] for name in info.layer.inputs)
            if origin_a != origin_b:
                raise SpecError(f"network {network.name}: '{info.name}' adds branches that start "
                                f"at different joins ('{origin_a}', '{origin_b}')")
            common = 0
            while common < min(len(path_a), len(path_b)) and path_a[common] is path_b[common]:
                common += 1
            emit(origin_a, path_a[:common])
            channels, height, width = info.out_shape
            items.append(Block(info.name, (path_a[common:], path_b[common:]), float(batch),
                               float(channels), height * width))
            emitted_origin = info.name
            state[info.name] = (info.name, ())
        elif info.has_weights and info.type in ("conv2d", "linear"):
            origin, path = state[source]
            state[info.name] = (origin, path + (dims_of(info, batch, first),))
            first = False
        else:
            state[info.name] = state[source]
        previous = info.name
    origin, path = state[previous]
    emit(origin, path)
    return tuple(items)


def weighted_layers(items):
    for item in items:
        yield from (item.layers() if isinstance(item, Block) else [item])
