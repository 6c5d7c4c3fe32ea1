"""A node between the host and the owner of a block of rows passes its streams on."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping.memories import RELAY_DEPTH

from ..memory.fifo import Fifo
from .blocks import RowStreams


class Relay(wiring.Component):
    """The streams of a merged ``block`` through a node between its host and owner:
    ``host_side`` (as the owner would see them) to ``owner_side`` (as the host would), each
    stream through a FIFO of RELAY_DEPTH beats, which passes one beat per cycle and
    registers the path (no combinational path crosses a node)."""

    def __init__(self, block, *, family=None):
        self.block, self.family = block, family
        streams = RowStreams(block)
        super().__init__({"host_side": In(streams), "owner_side": Out(streams)})

    def elaborate(self, platform):
        m = Module()
        for name, member in self.signature.members["owner_side"].signature.members.items():
            host_end, owner_end = getattr(self.host_side, name), getattr(self.owner_side, name)
            source, sink = (host_end, owner_end) if member.flow == Out else (owner_end, host_end)
            fifo = m.submodules[name] = Fifo(host_end.payload.shape(), RELAY_DEPTH, family=self.family)
            connect(m, flipped(source), fifo.i)
            connect(m, fifo.o, flipped(sink))
        return m
