"""Corner turns between a fully connected layer's engines and the pixel streams around it.

A fully connected layer after a flatten takes the (C, H, W) map its input flattens: a
sample arrives as H*W pixels of C channels, but the layer's weights are laid out in the
flattened order ``c*H*W + p`` (``Layer("flatten")``), and an engine pass of b input
channels (``hw.memory.param_ram.WeightLayout``; b a multiple of H*W, passes that start
on a channel) needs channels ``i*b/(H*W)`` onwards of *every* pixel at once. Holding the
sample as one stream word of C*H*W words, as a flatten did, passes Amaranth's value limit
at paper scale (VGG-16's fc6: 401,408 bits). These stores turn the corner instead:

- :class:`FcWindowStore` takes pixels and gives the engine one pass's window per step, in
  the FP and PG engines' group-major order (passes 0 .. v-1, ``replays`` = G times);
- :class:`FcErrorStore` takes the EB engine's input errors a pass at a time (its pass-major
  walk completes pass i after its last group) and gives them back as pixels.

Both keep ``slots`` samples (two: one being written while the other is read) in one memory
per pass, each row the pass's ``tiles`` channels of every pixel, pixel-major, so that a
pixel (a bank of each memory, written with byte-lane enables) and a pass (a whole row of
one memory) are each one access. The words of a window are the flattened order's:
word ``c*pixels + p`` is channel ``i*tiles + c`` of pixel p (zero past the channels).
"""

from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import WORD_BITS

from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter
from ..base.layouts import pixel_layout, window_layout


class _PassMemories(wiring.Component):
    """What both stores share: one memory per pass of ``slots`` rows of ``pixels`` banks of
    ``tiles`` words, the slots' full flags, and the pixel / pass order conversions."""

    def __init__(self, block, *, channels, pixels, tiles, slots, members):
        positive(self, block, channels=channels, pixels=pixels, tiles=tiles, slots=slots)
        if tiles > channels:
            refuse(self, f"{block}: tiles = {tiles} exceeds the {channels} channels")
        self.channels, self.pixels, self.tiles, self.slots = channels, pixels, tiles, slots
        self.passes = -(-channels // tiles)
        super().__init__(members)

    def _memories(self, m):
        bank = self.tiles * WORD_BITS
        mems = [memory.Memory(shape=self.pixels * bank, depth=self.slots, init=[]) for _ in range(self.passes)]
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

    def _pixel_words(self, words):
        """A pixel's channel words as the pass memories' banks: pass i's ``tiles`` words."""
        padded = Cat(*words, Const(0, (self.passes * self.tiles - self.channels) * WORD_BITS))
        bank = self.tiles * WORD_BITS
        return [padded[i * bank:(i + 1) * bank] for i in range(self.passes)]

    def _window_to_row(self, words):
        """A window (words ``c*pixels + p``) as a memory row (pixel-major: bank p, word c)."""
        return Cat(*(words[c * self.pixels + p] for p in range(self.pixels) for c in range(self.tiles)))

    def _row_to_window(self, row):
        bank = self.tiles * WORD_BITS
        return Cat(*(row[p * bank + c * WORD_BITS:p * bank + (c + 1) * WORD_BITS]
                     for c in range(self.tiles) for p in range(self.pixels)))


class FcWindowStore(_PassMemories):
    """``i``: ``pixel_layout(channels)``, ``pixels`` beats a sample in raster order; ``o``:
    ``window_layout(tiles * pixels, 1)``, one beat per engine step: passes 0 .. v-1 of a sample,
    ``replays`` times over (module docstring)."""

    def __init__(self, *, channels, pixels, tiles, replays, slots=2):
        positive(self, "fc window store", replays=replays)
        self.replays = replays
        super().__init__("fc window store", channels=channels, pixels=pixels, tiles=tiles, slots=slots, members={
            "i": In(stream.Signature(pixel_layout(channels))),
            "o": Out(stream.Signature(window_layout(tiles * pixels, 1))),
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

        banks = self._pixel_words([self.i.payload[c] for c in range(self.channels)])
        rows = []
        for mem, bank in zip(mems, banks):
            write = mem.write_port(granularity=self.tiles * WORD_BITS)
            m.d.comb += [write.addr.eq(wslot), write.data.eq(Cat(*([bank] * self.pixels)))]
            m.d.comb += [write.en[p].eq(take & (pixel.value == p)) for p in range(self.pixels)]
            read = mem.read_port(domain="comb")
            m.d.comb += read.addr.eq(rslot)
            rows.append(read.data)
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(have), self.o.payload.eq(self._row_to_window(Array(rows)[pass_.value]))]
        return m


class FcErrorStore(_PassMemories):
    """``i``: ``pixel_layout(tiles * pixels)``, one beat per pass (words ``c*pixels + p``: channel
    ``i*tiles + c`` of pixel p), v a sample; ``o``: ``pixel_layout(channels)``, ``pixels`` beats a
    sample in raster order (module docstring)."""

    def __init__(self, *, channels, pixels, tiles, slots=2):
        super().__init__("fc error store", channels=channels, pixels=pixels, tiles=tiles, slots=slots, members={
            "i": In(stream.Signature(pixel_layout(tiles * pixels))),
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

        row = self._window_to_row([self.i.payload[k] for k in range(self.tiles * self.pixels)])
        bank = self.tiles * WORD_BITS
        banks = []
        for i, mem in enumerate(mems):
            write = mem.write_port()
            m.d.comb += [write.addr.eq(wslot), write.data.eq(row), write.en.eq(take & (pass_.value == i))]
            read = mem.read_port(domain="comb")
            m.d.comb += read.addr.eq(rslot)
            banks.append(Array(read.data[p * bank:(p + 1) * bank] for p in range(self.pixels))[pixel.value])

        with m.If(advance):
            m.d.sync += [self.o.valid.eq(have),
                         self.o.payload.eq(Cat(*banks)[:self.channels * WORD_BITS])]
        return m
