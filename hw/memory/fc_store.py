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

A fully connected layer whose output vector is too wide for a beat (``LayerSlice.out_map``)
hands it on as the pixels of a (C, 1, N) map: the same two stores turn its SFU's beats of P
outputs into those pixels (an FcErrorStore of P tiles) and the error pixels coming back into
beats of P (an FcWindowStore replayed once), and :class:`ErrorReplay` gives its EB engine
those error beats once per pass.

Both keep ``slots`` samples (two: one being written while the other is read) in one memory
per pass of ``slots`` rows of b words, word j of pass i's row being flattened input
``i*b + j``: a pass is one row, and a pixel writes (or reads) word ``f mod b`` of memory
``f div b`` for each of its channels, all in one cycle, with word-granular write enables.
Any b works: a pass may hold part of a channel's pixels, or several channels. Words past
the C*H*W inputs in the last pass are never written and stay zero.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import WORD_BITS

from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter
from ..base.layouts import pixel_layout, window_layout
from ..base.ram import NO_RW_CHECK, ram_attrs, read_register


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
                m.d.comb += [writes[i].data[j].eq(self.i.payload[c]), writes[i].en[j].eq(take & (pixel.value == p))]
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


class _DeepPassMemory:
    """Mixin of the deep stores, over the interface of the store they replace: the ``slots`` samples in one memory of ``slots`` x v rows
    (block RAM at paper scale, where a memory per pass would be distributed RAM two rows deep:
    a LUT per bit on Xilinx), written or read a channel a cycle. Channel c of pixel p is word
    ``(c*pixels + p) mod b`` of the sample's row ``(c*pixels + p) div b``; both step by constants
    from channel to channel (:meth:`_walk`)."""

    def _memory(self, m):
        depth = self.slots * self.passes
        mem = m.submodules.passes = memory.Memory(shape=window_layout(self.tiles, 1), depth=depth, init=[],
                                                  attrs=NO_RW_CHECK | ram_attrs(depth, self.family))
        return mem

    def _base(self, m, step):
        """The first row of the slot ``step`` moves past: steps of v rows, wrapping after the slots."""
        base = Signal(range(self.slots * self.passes))
        with m.If(step):
            m.d.sync += base.eq(Mux(base == (self.slots - 1) * self.passes, 0, base + self.passes))
        return base

    def _give(self, m, mem, addr, step, have):
        """``o`` from ``mem[addr]``, its read register the output register: it loads whenever the
        output is empty or taken, ``step`` being that load while a sample is there (``have``)."""
        advance = ~self.o.valid | self.o.ready
        m.d.comb += [step.eq(advance & have), self.o.payload.eq(read_register(m, mem, addr, advance))]
        with m.If(advance):
            m.d.sync += self.o.valid.eq(have)

    def _walk(self, m, start, next_channel, next_pixel, last_pixel):
        """(row within the sample, word) of the current channel of the current pixel: channel 0 of
        the pixel at ``start`` (a pulse), one channel on at each ``next_channel``; ``next_pixel``
        moves to the next pixel (to pixel 0 after ``last_pixel``). Adders only: channel 0 of
        pixel p is (p div b, p mod b), kept in registers; a channel on is ``pixels`` words on."""
        step_rows, step_words = divmod(self.pixels, self.tiles)
        pixel_row, pixel_word = Signal(range(self.passes)), Signal(range(self.tiles))
        with m.If(next_pixel):
            last_word = pixel_word == self.tiles - 1
            m.d.sync += [pixel_word.eq(Mux(last_pixel | last_word, 0, pixel_word + 1)),
                         pixel_row.eq(Mux(last_pixel, 0, pixel_row + last_word))]
        row, word = Signal(range(self.passes)), Signal(range(self.tiles))
        wrapped = word + step_words >= self.tiles
        with m.If(start):
            m.d.sync += [row.eq(pixel_row), word.eq(pixel_word)]
        with m.Elif(next_channel):
            m.d.sync += [word.eq(Mux(wrapped, word + step_words - self.tiles, word + step_words)),
                         row.eq(row + step_rows + wrapped)]
        return row, word


class DeepFcWindowStore(_DeepPassMemory, FcWindowStore):
    """:class:`FcWindowStore`'s ports and beats from one deep memory: a pixel is written a channel
    a cycle (channels + 1 cycles a pixel), so it keeps up with an engine whose G x v steps a
    sample are at least the C x H x W inputs' cycles (b <= G)."""

    def elaborate(self, platform):
        m = Module()
        mem = self._memory(m)
        take, step, writing = Signal(), Signal(), Signal()
        channel = ModuloCounter(m, self.channels, writing)
        pixel = ModuloCounter(m, self.pixels, writing & channel.last)
        pass_ = ModuloCounter(m, self.passes, step)
        replay = ModuloCounter(m, self.replays, step & pass_.last)
        written = writing & channel.last & pixel.last
        _, _, free, have = self._slots(m, written, step & pass_.last & replay.last)
        write_base, read_base = self._base(m, written), self._base(m, step & pass_.last & replay.last)
        row, word = self._walk(m, take, writing, writing & channel.last, pixel.last)

        # The pixel is held and shifted a channel a cycle into the word of its row it belongs to.
        held = Signal(pixel_layout(self.channels))
        m.d.comb += [self.i.ready.eq(free & ~writing), take.eq(self.i.valid & self.i.ready)]
        with m.If(take):
            m.d.sync += [held.eq(self.i.payload), writing.eq(1)]
        with m.Elif(writing):
            m.d.sync += held.as_value().eq(held.as_value()[WORD_BITS:])  # a slice: a shift is an edge per bit pair
            with m.If(channel.last):
                m.d.sync += writing.eq(0)
        write = mem.write_port(granularity=1)
        m.d.comb += [write.addr.eq(write_base + row), write.data.eq(Cat(*([held[0]] * self.tiles)))]
        m.d.comb += [write.en[j].eq(writing & (word == j)) for j in range(self.tiles)]

        self._give(m, mem, read_base + pass_.value, step, have)
        return m


class DeepFcErrorStore(_DeepPassMemory, FcErrorStore):
    """:class:`FcErrorStore`'s ports and beats from one deep memory: a pass is written a row a cycle,
    a pixel read a channel a cycle (channels + 3 cycles a pixel to a consumer always ready)."""

    def elaborate(self, platform):
        m = Module()
        mem = self._memory(m)
        take, reading, start = Signal(), Signal(), Signal()
        pass_ = ModuloCounter(m, self.passes, take)
        channel = ModuloCounter(m, self.channels, reading)
        pixel = ModuloCounter(m, self.pixels, self.o.valid & self.o.ready)
        released = self.o.valid & self.o.ready & pixel.last
        _, _, free, have = self._slots(m, take & pass_.last, released)
        write_base, read_base = self._base(m, take & pass_.last), self._base(m, released)
        row, word = self._walk(m, start, reading, self.o.valid & self.o.ready, pixel.last)

        m.d.comb += [self.i.ready.eq(free), take.eq(self.i.valid & free)]
        write = mem.write_port()
        m.d.comb += [write.addr.eq(write_base + pass_.value), write.data.eq(self.i.payload), write.en.eq(take)]

        # A pixel: ``start`` loads its channel 0's place, then a read a channel a cycle; each word
        # arrives a cycle after its read and is shifted into the pixel, which is out after the last.
        arriving = Signal()
        m.d.comb += start.eq(have & ~reading & ~arriving & ~self.o.valid)
        with m.If(start):
            m.d.sync += reading.eq(1)
        with m.Elif(reading & channel.last):
            m.d.sync += reading.eq(0)
        data = read_register(m, mem, read_base + row, reading)
        word_at = Signal.like(word)
        m.d.sync += [arriving.eq(reading), word_at.eq(word)]
        value = Array(data[j] for j in range(self.tiles))[word_at]
        out = self.o.payload.as_value()
        with m.If(arriving):
            m.d.sync += out.eq(Cat(out[WORD_BITS:], value))
            with m.If(~reading):  # the last word
                m.d.sync += self.o.valid.eq(1)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


class ErrorReplay(_DeepPassMemory, _PassMemories):
    """The output errors of a fully connected layer whose vector travels a group a beat
    (``LayerSlice.out_map``), for its EB engine (``EBEngine(group_windows=True)``): ``i`` takes
    a sample's ``groups`` beats of ``lanes`` errors, ``o`` gives them ``replays`` (v) times, in
    the engine's walk order: the whole sample each time (pass-major, groups 0 .. G-1 per pass),
    or with ``consecutive`` each beat v times before the next (group-major, weights from DRAM).
    The deep stores' memory, a beat a row: ``slots`` samples of G rows."""

    def __init__(self, *, lanes, groups, replays, consecutive=False, slots=2, family=None):
        positive(self, "error replay", replays=replays)
        self.replays, self.consecutive = replays, consecutive
        super().__init__("error replay", channels=lanes, pixels=groups, tiles=lanes, slots=slots, family=family,
                         members={"i": In(stream.Signature(pixel_layout(lanes))),
                                  "o": Out(stream.Signature(window_layout(lanes, 1)))})

    def elaborate(self, platform):
        m = Module()
        mem = self._memory(m)
        take, step = Signal(), Signal()
        row_in = ModuloCounter(m, self.passes, take)
        if self.consecutive:
            replay = ModuloCounter(m, self.replays, step)
            row_out = ModuloCounter(m, self.passes, step & replay.last)
        else:
            row_out = ModuloCounter(m, self.passes, step)
            replay = ModuloCounter(m, self.replays, step & row_out.last)
        written, released = take & row_in.last, step & row_out.last & replay.last
        _, _, free, have = self._slots(m, written, released)
        write_base, read_base = self._base(m, written), self._base(m, released)
        m.d.comb += [self.i.ready.eq(free), take.eq(self.i.valid & free)]
        write = mem.write_port()
        m.d.comb += [write.addr.eq(write_base + row_in.value), write.data.eq(self.i.payload), write.en.eq(take)]

        self._give(m, mem, read_base + row_out.value, step, have)
        return m
