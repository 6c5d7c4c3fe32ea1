"""EB's windows in chunks of output channels, for layers whose whole windows no word may hold.

The EB engine takes, per input pixel, the K x K error taps of the slice's O output channels
(hw/memory/line_buffer.LineBuffer.for_errors): O x K x K words, 4,608 for VGG's conv4 and
conv5 (73,728 bits), past Amaranth's value limit. :class:`ChunkedErrorWindows` splits the
error pixels into chunks of ``LayerSlice.eb_chunk`` channels, each with a line buffer and a
FIFO of windows of its own, and gives the engine its windows a group of P channels at a
time, one beat of P x K x K taps per engine step in the pass-major walk (groups 0 .. G-1,
v times over: ``EBEngine(group_windows=True)``). A group may take channels from two chunks
(a chunk need not be a multiple of P); the taps past O of the last group are zero, as the
whole-window select's are.

The window being given is held in one register per chunk, as the whole window was held in
the line buffer's output register; the chunks' next windows wait in their FIFOs and load
as the last beat leaves, so the beats follow without a gap.
"""

from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping.memories import window_slack
from mapping.numerics import WORD_BITS

from ..base.checks import positive
from ..base.counter import ModuloCounter
from ..base.layouts import pixel_layout, window_layout
from ..streams.channels import ChannelFork
from .fifo import Fifo
from .line_buffer import LineBuffer


class ChunkedErrorWindows(wiring.Component):
    """``i``: error pixels of the ``chunks``' channels (consecutive ranges from 0); ``o``: per
    window ``groups`` x ``passes`` beats of ``window_layout(lanes, kernel)`` (module docstring).
    ``in_height`` .. ``padding``: the geometry of LineBuffer.for_errors; ``slack``: the windows
    each chunk's FIFO holds."""

    def __init__(self, *, chunks, lanes, passes, in_height, in_width, kernel, stride, padding, slack, family=None):
        positive(self, "chunked error windows", lanes=lanes, passes=passes, slack=slack)
        self.chunks, self.lanes, self.passes, self.kernel, self.slack = tuple(chunks), lanes, passes, kernel, slack
        self.geometry = dict(in_height=in_height, in_width=in_width, kernel=kernel, stride=stride, padding=padding)
        self.family = family
        self.channels = self.chunks[-1][1]
        self.groups = -(-self.channels // lanes)
        super().__init__({"i": In(stream.Signature(pixel_layout(self.channels))),
                          "o": Out(stream.Signature(window_layout(lanes, kernel)))})

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        s = layer_slice
        return cls(chunks=s.eb_chunks, lanes=s.fp.ces, passes=-(-s.in_channels // s.fp.tiles),
                   in_height=s.in_shape[1], in_width=s.in_shape[2], kernel=s.kernel, stride=s.stride,
                   padding=s.padding, slack=window_slack(s, "eb"), family=family)

    def elaborate(self, platform):
        m = Module()
        split = m.submodules.split = ChannelFork(self.channels, self.chunks)
        connect(m, flipped(self.i), split.i)
        windows = []
        for k, (lo, hi) in enumerate(self.chunks):
            line_buffer = m.submodules[f"lb{k}"] = LineBuffer.for_errors(channels=hi - lo, family=self.family,
                                                                         **self.geometry)
            fifo = m.submodules[f"windows{k}"] = Fifo(line_buffer.o.payload.shape(), self.slack, family=self.family)
            connect(m, split.outputs()[k], line_buffer.i)
            connect(m, line_buffer.o, fifo.i)
            windows.append(fifo.o)

        held = [Signal(w.payload.shape(), name=f"held{k}") for k, w in enumerate(windows)]
        full, step, load = Signal(), Signal(), Signal()
        group = ModuloCounter(m, self.groups, step)
        pass_ = ModuloCounter(m, self.passes, step & group.last)
        done = step & group.last & pass_.last
        m.d.comb += load.eq(Cat(w.valid for w in windows).all() & (~full | done))
        m.d.comb += [w.ready.eq(load) for w in windows]
        with m.If(load):
            m.d.sync += [h.eq(w.payload) for h, w in zip(held, windows)]
            m.d.sync += full.eq(1)
        with m.Elif(done):
            m.d.sync += full.eq(0)

        advance = ~self.o.valid | self.o.ready
        m.d.comb += step.eq(advance & full)
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(full), self.o.payload.eq(Array(self._group_taps(held))[group.value])]
        return m

    def _group_taps(self, held):
        """Each group's P x K x K taps (channel-major, as a window's) from the held chunks, zero
        past the last channel."""
        kk = self.kernel * self.kernel
        taps = []
        for g in range(self.groups):
            parts = []
            for (lo, hi), window in zip(self.chunks, held):
                first, last = max(lo, g * self.lanes), min(hi, (g + 1) * self.lanes)
                if first < last:
                    parts.append(window.as_value()[(first - lo) * kk * WORD_BITS:(last - lo) * kk * WORD_BITS])
            missing = (g + 1) * self.lanes - min(self.channels, (g + 1) * self.lanes)
            if missing:
                parts.append(Const(0, missing * kk * WORD_BITS))
            taps.append(Cat(*parts))
        return taps
