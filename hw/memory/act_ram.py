"""Act-RAM: the slice's input activations, kept from FP until PG replays them (paper 5.2.2).

A first-in first-out queue of pixels (``channels`` words per beat): FP pushes each
input pixel as it uses it, PG pops them in the same order once the sample's errors
arrive. It is a :class:`hw.memory.fifo.Fifo` of ``depth`` pixels (one memory and its output
register, ``level`` exact every cycle). Memory: (16*S bits, ``act_ram_words / S``),
S = ``channels``, one read port.
"""

from ..base.checks import refuse
from ..base.layouts import pixel_layout
from .fifo import Fifo


class ActRam(Fifo):
    """FIFO of ``depth`` pixels of ``channels`` 16-bit words; ``family`` as in :class:`hw.memory.fifo.Fifo`."""

    KIND = "act-ram"

    def __init__(self, *, channels, depth, family=None):
        if channels < 1:
            refuse(self, f"act-ram: channels = {channels} must be at least 1")
        self.channels = channels
        super().__init__(pixel_layout(channels), depth, family=family)

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The Act-RAM of a ``mapping.nodeconfig.LayerSlice``: ``act_ram_words`` / S pixels."""
        channels, words = layer_slice.in_channels, layer_slice.act_ram_words
        if words % channels or words < channels:
            raise ValueError(f"act-ram of layer '{layer_slice.layer}': act_ram_words = {words} is not a "
                             f"positive multiple of the slice's {channels} input channels")
        return cls(channels=channels, depth=words // channels, family=family)
