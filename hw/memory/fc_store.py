"""Corner turns between a fully connected layer's engines and the pixel streams around it.

A fully connected layer after a flatten takes the (C, H, W) map its input flattens: a
sample arrives as H*W pixels of C channels, but the layer's weights are laid out in the
flattened order ``f = c*H*W + p`` (``Layer("flatten")``), and an engine pass of b inputs
(``hw.memory.param_ram.WeightLayout``) needs flattened inputs ``i*b .. i*b+b-1``, which come
from many pixels. Holding the sample as one stream word of C*H*W words, as a flatten did,
passes Amaranth's value limit at paper scale (VGG-16's fc6: 401,408 bits). These stores turn
the corner instead:

- :class:`FcWindowStore` takes pixels and gives the engine one pass's window per step, in
  the FP and PG engines' group-major order (passes 0 .. v-1, ``replays`` = G times);
- :class:`FcErrorStore` takes the EB engine's input errors a pass at a time (its pass-major
  walk completes pass i after its last group) and gives them back as pixels.

Both keep ``slots`` samples (two: one being written while the other is read) in one memory
per pass of ``slots`` rows of b words, word j of pass i's row being flattened input
``i*b + j``: a pass is one row, and a pixel writes (or reads) word ``f mod b`` of memory
``f div b`` for each of its channels, all in one cycle, with word-granular write enables.
Any b works: a pass may hold part of a channel's pixels, or several channels. Words past
the C*H*W inputs in the last pass are never written and stay zero.
"""

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import WORD_BITS

from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter
from ..base.layouts import pixel_layout, window_layout
from ..base.ram import ram_attrs


class _PassMemories(wiring.Component):
    """What both stores share: one memory per pass of ``slots`` rows of ``tiles`` flattened
    inputs, the slots' full flags, and where each channel of each pixel lies."""

    def __init__(self, block, *, channels, pixels, tiles, slots, family, members):
        positive(self, block, channels=channels, pixels=pixels, tiles=tiles, slots=slots)
        if tiles > channels * pixels:
            refuse(self, f"{block}: tiles = {tiles} exceeds the {channels * pixels} inputs of {channels} "
                         f"channels of {pixels} pixels")
        self.channels, self.pixels, self.tiles, self.slots, self.family = channels, pixels, tiles, slots, family
        self.passes = -(-channels * pixels // tiles)
        super().__init__(members)

    def _memories(self, m):
        mems = [memory.Memory(shape=window_layout(self.tiles, 1), depth=self.slots, init=[],
                              attrs=ram_attrs(self.slots, self.family))
                for _ in range(self.passes)]
        for i, mem in enumerate(mems):
            m.submodules[f"pass_{i}"] = mem
        return mems

    def _slots(self, m, written, released):
        """(write slot, read slot, write slot free, read slot full): ``written`` fills the write
        slot and moves on, ``released`` empties the read slot and moves on."""
        write, read = (ModuloCounter(m, self.slots, step) for step in (written, released))
        full = Signal(self.slots)
        for k in range(self.slots):
            with m.If(written & (write.value == k)):
                m.d.sync += full[k].eq(1)
            with m.If(released & (read.value == k)):
                m.d.sync += full[k].eq(0)
        return write.value, read.value, ~full.bit_select(write.value, 1), full.bit_select(read.value, 1)

    def _placement(self, c, p):
        """(pass memory, word) of channel ``c`` of pixel ``p``."""
        return divmod(c * self.pixels + p, self.tiles)


class FcWindowStore(_PassMemories):
    """``i``: ``pixel_layout(channels)``, ``pixels`` beats a sample in raster order; ``o``:
    ``window_layout(tiles, 1)``, one beat per engine step: passes 0 .. v-1 of a sample,
    ``replays`` times over (module docstring)."""

    def __init__(self, *, channels, pixels, tiles, replays, slots=2, family=None):
        positive(self, "fc window store", replays=replays)
        self.replays = replays
        super().__init__("fc window store", channels=channels, pixels=pixels, tiles=tiles, slots=slots,
                         family=family, members={
            "i": In(stream.Signature(pixel_layout(channels))),
            "o": Out(stream.Signature(window_layout(tiles, 1))),
        })

    def elaborate(self, platform):
        m = Module()
        mems = self._memories(m)
        take, step = Signal(), Signal()
        pixel = ModuloCounter(m, self.pixels, take)
        pass_ = ModuloCounter(m, self.passes, step)
        replay = ModuloCounter(m, self.replays, step & pass_.last)
        wslot, rslot, free, have = self._slots(m, take & pixel.last, step & pass_.last & replay.last)
        # The output register loads whenever it is empty or taken.
        advance = ~self.o.valid | self.o.ready
        m.d.comb += [self.i.ready.eq(free), take.eq(self.i.valid & free), step.eq(advance & have)]

        # Pixel p's channels go to their passes' words in one write per pass memory.
        writes = [mem.write_port(granularity=1) for mem in mems]  # one word
        for write in writes:
            m.d.comb += write.addr.eq(wslot)
        for c in range(self.channels):
            for p in range(self.pixels):
                i, j = self._placement(c, p)
                m.d.comb += writes[i].data[j].eq(self.i.payload[c])
                with m.If(take & (pixel.value == p)):
                    m.d.comb += writes[i].en[j].eq(1)
        rows = []
        for mem in mems:
            read = mem.read_port(domain="comb")
            m.d.comb += read.addr.eq(rslot)
            rows.append(read.data.as_value())
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(have), self.o.payload.eq(Array(rows)[pass_.value])]
        return m


class FcErrorStore(_PassMemories):
    """``i``: ``pixel_layout(tiles)``, one beat per pass (word j: flattened input ``i*tiles + j``),
    v a sample; ``o``: ``pixel_layout(channels)``, ``pixels`` beats a sample in raster order
    (module docstring)."""

    def __init__(self, *, channels, pixels, tiles, slots=2, family=None):
        super().__init__("fc error store", channels=channels, pixels=pixels, tiles=tiles, slots=slots,
                         family=family, members={
            "i": In(stream.Signature(pixel_layout(tiles))),
            "o": Out(stream.Signature(pixel_layout(channels))),
        })

    def elaborate(self, platform):
        m = Module()
        mems = self._memories(m)
        take, step = Signal(), Signal()
        pass_ = ModuloCounter(m, self.passes, take)
        pixel = ModuloCounter(m, self.pixels, step)
        wslot, rslot, free, have = self._slots(m, take & pass_.last, step & pixel.last)
        advance = ~self.o.valid | self.o.ready
        m.d.comb += [self.i.ready.eq(free), take.eq(self.i.valid & free), step.eq(advance & have)]

        rows = []
        for i, mem in enumerate(mems):
            write = mem.write_port()
            m.d.comb += [write.addr.eq(wslot), write.data.eq(self.i.payload), write.en.eq(take & (pass_.value == i))]
            read = mem.read_port(domain="comb")
            m.d.comb += read.addr.eq(rslot)
            rows.append(read.data.as_value())
        words = []
        for c in range(self.channels):
            at = [rows[i][j * WORD_BITS:(j + 1) * WORD_BITS] for i, j in (self._placement(c, p) for p in range(self.pixels))]
            words.append(Array(at)[pixel.value] if self.pixels > 1 else at[0])
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(have),
                         self.o.payload.eq(Cat(*words))]
        return m
