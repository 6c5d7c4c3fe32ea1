"""Rounding of a feature map's exact sums, a few channels per cycle.

The EB engine emits the 48-bit error sums of all C input channels of a pixel in one
beat, but only one beat per ``G * v`` cycles (its groups times passes). A
:class:`hw.arith.rounding.StochasticRounder` of C lanes would idle most of the time and costs
about 300 LUTs and 500 FFs per lane (a 32-bit noise hash per lane), so this unit rounds
``lanes`` channels per cycle over ``ceil(C / lanes)`` cycles and gathers the words into
one C-channel pixel again. With ``lanes = ceil(C / (G * v))`` it keeps the engine's
rate; with ``lanes = C`` it is the plain rounder.

The input beat is taken in the cycle of its first chunk and its other chunks are kept
in registers ((C - lanes) x 48 bits): the engine stalls its whole pipeline while its
output waits, so holding its beat for the ``ceil(C / lanes)`` cycles of the rounding
would cost it that many cycles per pixel, less one (31 cycles per sample on the
default chain's fc EB: 111 instead of 80 cycles per sample in steady state).

The noise index of channel c at pixel p of a sample is ``(channel_base + c) * pixels +
p`` (the (C, H, W) row-major position, ``requantize`` over the layer's input tensor).
With ``consecutive_beats`` the beats are instead a flattened vector cut into ``pixels``
beats of ``channels`` (the EB engine's ``pass_errors`` of a fully connected layer, one
beat per pass): lane c of beat p is ``channel_base + p * channels + c``.
The products are elaboration-time constants plus offsets stepped by adders, so no
multiplier is inferred.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import ACC_BITS, WORD_BITS

from ..base.checks import positive, refuse
from ..base.layouts import pixel_layout, psum_layout
from .rounding import INDEX_BITS, SAMPLE_BITS, StochasticRounder


class MapRounder(wiring.Component):
    """``i``: ``psum_layout(channels)`` beats, one per pixel in raster order, ``pixels`` per
    sample; ``o``: ``pixel_layout(channels)``, the words ``requantize`` gives over tensor
    ``tensor`` with ``shift`` and ``seed``. ``lanes``: channels rounded per cycle."""

    def __init__(self, *, channels, lanes, pixels, shift, seed, tensor, channel_base=0, consecutive_beats=False):
        positive(self, "map rounder", channels=channels, lanes=lanes, pixels=pixels)
        if lanes > channels:
            refuse(self, f"map rounder: lanes = {lanes} exceeds the {channels} channels")
        self.channels, self.lanes, self.pixels, self.channel_base = channels, lanes, pixels, channel_base
        # (index step per channel, per pixel)
        self.strides = (1, channels) if consecutive_beats else (pixels, 1)
        self.chunks = -(-channels // lanes)
        self.rounder = StochasticRounder(lanes=lanes, shift=shift, seed=seed, tensor=tensor)
        self.latency = self.rounder.latency + self.chunks - 1
        super().__init__({"i": In(stream.Signature(psum_layout(channels))),
                          "o": Out(stream.Signature(pixel_layout(channels)))})

    def elaborate(self, platform):
        m = Module()
        rounder = m.submodules.rounder = self.rounder
        lanes, chunks, pixels = self.lanes, self.chunks, self.pixels

        # Input side: chunk 0 goes to the rounder straight from the input beat, which is
        # taken then; chunks 1 .. n-1 from the registers that keep the rest of the beat.
        # Lanes past the channels in the last chunk round a zero.
        values = self.i.payload.values
        zero = Const(0, signed(ACC_BITS))
        kept = [Signal(signed(ACC_BITS), name=f"kept_{c}") if c < self.channels else zero
                for c in range(lanes, chunks * lanes)]
        channel_stride, pixel_stride = self.strides
        chunk, pixel, sample = Signal(range(chunks)), Signal(range(pixels)), Signal(SAMPLE_BITS)
        chunk_offset = Signal(range(chunks * lanes * channel_stride))  # chunk * lanes * channel_stride
        # pixel * pixel_stride: the pixel count itself at stride 1
        pixel_offset = pixel if pixel_stride == 1 else Signal(range(pixels * pixel_stride))
        for lane in range(lanes):
            live = values[lane] if lane < self.channels else zero
            by_chunk = Array([live] + [kept[(j - 1) * lanes + lane] for j in range(1, chunks)])
            base = (self.channel_base + lane) * channel_stride
            m.d.comb += [rounder.i.payload.acc[lane].eq(by_chunk[chunk]),
                         rounder.i.payload.index[lane].eq((base + chunk_offset + pixel_offset)[:INDEX_BITS])]
        first_chunk, last_chunk = chunk == 0, chunk == chunks - 1
        m.d.comb += [rounder.i.payload.sample.eq(sample),
                     rounder.i.valid.eq(Mux(first_chunk, self.i.valid, 1)),
                     self.i.ready.eq(rounder.i.ready & first_chunk)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [reg.eq(values[c]) for c, reg in enumerate(kept, start=lanes) if c < self.channels]
        with m.If(rounder.i.valid & rounder.i.ready):
            with m.If(last_chunk):
                m.d.sync += [chunk.eq(0), chunk_offset.eq(0)]
                with m.If(pixel == pixels - 1):
                    m.d.sync += [pixel.eq(0), sample.eq(sample + 1)]
                    if pixel_stride != 1:
                        m.d.sync += pixel_offset.eq(0)
                with m.Else():
                    m.d.sync += pixel.eq(pixel + 1)
                    if pixel_stride != 1:
                        m.d.sync += pixel_offset.eq(pixel_offset + pixel_stride)
            with m.Else():
                m.d.sync += [chunk.eq(chunk + 1), chunk_offset.eq(chunk_offset + lanes * channel_stride)]

        # Output side: chunks 0 .. n-2 wait in registers; the pixel leaves with the last one,
        # so a ready consumer takes one pixel per ``chunks`` cycles with no bubble.
        out_chunk = Signal(range(chunks))
        held = [Signal(pixel_layout(lanes), name=f"held_{j}") for j in range(chunks - 1)]
        out_last = out_chunk == chunks - 1
        m.d.comb += [self.o.valid.eq(rounder.o.valid & out_last),
                     rounder.o.ready.eq(~out_last | self.o.ready),
                     self.o.payload.eq(Cat(*held, rounder.o.payload.value)[:self.channels * WORD_BITS])]
        with m.If(rounder.o.valid & rounder.o.ready):
            m.d.sync += out_chunk.eq(Mux(out_last, 0, out_chunk + 1))
            for j, reg in enumerate(held):
                with m.If(out_chunk == j):
                    m.d.sync += reg.eq(rounder.o.payload.value)
        return m
