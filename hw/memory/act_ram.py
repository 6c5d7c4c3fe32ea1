"""Act-RAM: the slice's input activations, kept from FP until PG replays them (paper 5.2.2).

A first-in first-out queue of pixels (``channels`` words per beat): FP pushes each
input pixel as it uses it, PG pops them in the same order once the sample's errors
arrive. :class:`ActRam` is a :class:`hw.memory.fifo.Fifo` of ``depth`` pixels in block RAM
(one memory and its output register, ``level`` exact every cycle; memory: (16*S bits,
``act_ram_words / S``), S = ``channels``, one read port); :class:`DramActRam`, for a slice
whose ``act_storage`` is "dram", the same queue in the node's DRAM
(:class:`hw.memory.dram_fifo.DramFifo`: two staging FIFOs on chip and its ``dram`` port).
"""

from ..base.checks import refuse
from ..base.layouts import pixel_layout
from .dram_fifo import DramFifo
from .fifo import Fifo


def _channels(component, channels):
    if channels < 1:
        refuse(component, f"act-ram: channels = {channels} must be at least 1")
    component.channels = channels
    return pixel_layout(channels)


class ActRam(Fifo):
    """FIFO of ``depth`` pixels of ``channels`` 16-bit words; ``family`` as in :class:`hw.memory.fifo.Fifo`."""

    KIND = "act-ram"

    def __init__(self, *, channels, depth, family=None):
        super().__init__(_channels(self, channels), depth, family=family)

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The Act-RAM of a ``mapping.nodeconfig.LayerSlice``: ``act_ram_words`` / S pixels of its S
        input channels (of the map a fully connected layer flattens), in block RAM or
        (``act_storage`` "dram") a :class:`DramActRam`."""
        channels = layer_slice.map_channels(layer_slice.in_channels)
        words = layer_slice.act_ram_words
        if words % channels or words < channels:
            raise ValueError(f"act-ram of layer '{layer_slice.layer}': act_ram_words = {words} is not a "
                             f"positive multiple of the slice's {channels} input channels")
        kind = DramActRam if layer_slice.act_storage == "dram" else cls
        return kind(channels=channels, depth=words // channels, family=family)


class DramActRam(DramFifo):
    """The Act-RAM's queue of ``depth`` pixels of ``channels`` words in the node's DRAM."""

    KIND = "act-ram (dram)"

    def __init__(self, *, channels, depth, family=None):
        super().__init__(_channels(self, channels), depth, family=family)
