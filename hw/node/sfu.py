"""Special function unit (paper 5.3): bias, rounding, ReLU, max-pool, and back.

Runs on the node that finishes a layer's output channels (the last node of an ICP
layer). Golden model (mapping/golden.py): ``y = R(conv + (b << act+weight-bias))``,
then ReLU, then max-pool; backward, the pool routes each error to its window's
maximum and ReLU keeps it where the pre-activation word is > 0.

Forward (``fp_in`` -> ``fp_out``)
---------------------------------
``fp_in``: final partial sums, ``G = ceil(OC/P)`` beats of P lanes per conv output
pixel, raster order, samples back to back. Per beat:

1. the bias row of the beat's group is read through ``bias`` (a weight read port of
   one word per bank: connect a ``hw.memory.param_ram.ParamRam(banks=P, rows=G, words=1)``,
   which the bias update writes like any LPRAM) and added, aligned by
   ``<< act_frac + weight_frac - bias_frac``;
2. :class:`hw.arith.rounding.StochasticRounder` rounds with ``fp_shift``, tensor
   ``tensor_id(position, FP_OUT)``, index = row-major ``(c, y, x)`` in the whole
   (OC, OH, OW) tensor (``channel_base`` offsets the channels of an OCP slice) and
   sample = ``sample_base`` + samples completed since reset (``sample_base`` is an
   input port held constant; tie it to 0 to count from the first sample);
3. the G beats of a pixel are gathered into one pixel of OC words, ReLU'd;
4. max-pool over non-overlapping ``k x k`` windows (kernel == stride, no padding;
   others are refused): a running maximum per window column, kept for the rows of a
   window band in a row memory of ``PW`` entries; the first maximum in raster order
   wins, as in ``tensor_ops.maxpool_forward``. Rows and columns past ``PH*k``/``PW*k``
   belong to no window and are dropped.

``fp_out``: OC words per beat, raster order of the pooled map (of the conv map
without a pool). One pixel per cycle in, no bubbles, when G = 1.

Masks, and backward (``eb_in`` -> ``eb_out``)
--------------------------------------------
Per pooled output and channel the SFU keeps the window position of the maximum
(``ky*k + kx``) and, with ReLU, whether the maximum is > 0 (after ReLU that is
exactly "the winner's pre-activation is > 0"); without a pool, the ReLU bit of every
conv output. They go into a FIFO (``mask_level`` shows its occupancy) of
``samples_in_flight`` samples; the forward stalls when it is full. ``eb_in`` brings
the errors of the pooled output in raster order; ``eb_out`` gives the errors of the
conv output in raster order: a pooled row's errors and masks are kept in a row
memory and replayed for the k conv rows of the band; each conv pixel gets its
window's error where it was the maximum and the ReLU bit is set, else 0 (also for
rows/columns outside every window). This is ``tensor_ops.maxpool_backward`` then
``relu_backward``; with non-overlapping windows no two errors meet, so the golden
model's saturation never acts. One conv pixel per cycle.

Memories (``ram_style`` by ``mapping.resources.ram_style`` for ``family``), each with
one read port, PH x PW the pooled map, ``mask_bits = bit_length(k*k - 1) + relu``:
mask FIFO (OC*mask_bits, samples_in_flight*PH*PW) when mask_bits > 0; with a pool
(k > 1) the forward band (OC*(16 + bit_length(k*k - 1)), PW) and the backward replay
(OC*(16 + mask_bits), PW).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping import numerics
from mapping.memories import SFU_ROUNDER_BUFFER

from ..arith.rounding import INDEX_BITS, SAMPLE_BITS, StochasticRounder
from ..base.checks import positive, refuse
from ..base.layouts import pixel_layout, psum_layout
from ..base.ram import ram_attrs
from ..base.signatures import WeightPortSignature
from ..memory.fifo import Fifo

WORD = numerics.WORD_BITS


class Raster:
    """Position of the next pixel of a ``height x width`` raster scan tiled by ``k x k`` windows.

    Advances on ``step``; ``inside`` is false for pixels past the last whole window.
    """

    def __init__(self, m, height, width, k, step):
        pw, ph = width // k, height // k
        self.x, self.y = Signal(range(width)), Signal(range(height))
        self.kx, self.ky = Signal(range(k)), Signal(range(k))
        self.px = Signal(range(max(pw, 1) + 1))
        self.inside = Signal()
        self.code = Signal(range(k * k))  # ky * k + kx
        m.d.comb += [self.inside.eq((self.px < pw) & (self.y < ph * k)),
                     self.code.eq(self.ky * k + self.kx)]
        with m.If(step):
            with m.If(self.x == width - 1):
                m.d.sync += [self.x.eq(0), self.kx.eq(0), self.px.eq(0)]
                with m.If(self.y == height - 1):
                    m.d.sync += [self.y.eq(0), self.ky.eq(0)]
                with m.Else():
                    m.d.sync += [self.y.eq(self.y + 1), self.ky.eq(Mux(self.ky == k - 1, 0, self.ky + 1))]
            with m.Else():
                m.d.sync += self.x.eq(self.x + 1)
                with m.If(self.kx == k - 1):
                    m.d.sync += [self.kx.eq(0), self.px.eq(self.px + 1)]
                with m.Else():
                    m.d.sync += self.kx.eq(self.kx + 1)


class SFU(wiring.Component):
    """Special function unit of a layer's last node (see the module docstring).

    ``pool``: a ``mapping.nodeconfig.Pool`` or None. Ports: ``fp_in`` (partial sums),
    ``fp_out`` (pixels), ``eb_in``/``eb_out`` (error pixels), ``bias`` (read port, with
    ``bias=True``), ``sample_base``, ``mask_level`` (with ReLU or a pool).
    ``family``: the device family the memories are built for; None simulates.
    """

    def __init__(self, *, out_channels, height, width, lanes, position, formats=numerics.Formats(),
                 bias=True, relu=True, pool=None, channel_base=0, samples_in_flight=1, family=None):
        positive(self, "SFU", out_channels=out_channels, height=height, width=width, lanes=lanes,
                 samples_in_flight=samples_in_flight)
        if pool is not None:
            if pool.stride != pool.kernel or pool.padding != 0:
                refuse(self, f"SFU: max-pool kernel {pool.kernel}, stride {pool.stride}, padding "
                             f"{pool.padding} is not supported (only kernel == stride, padding 0)")
            if pool.kernel > min(height, width):
                refuse(self, f"SFU: max-pool kernel {pool.kernel} is larger than the {height} x {width} "
                             f"conv output")
        self.out_channels, self.height, self.width, self.lanes = out_channels, height, width, lanes
        self.groups = -(-out_channels // lanes)
        self.position, self.formats, self.channel_base = position, formats, channel_base
        self.has_bias, self.relu, self.family = bias, relu, family
        self.k = pool.kernel if pool is not None else 1
        self.out_shape = (out_channels, height // self.k, width // self.k)
        self.code_bits = (self.k * self.k - 1).bit_length()
        self.mask_bits = self.code_bits + relu  # per channel and pooled output
        self.mask_depth = samples_in_flight * self.out_shape[1] * self.out_shape[2]
        members = {
            "fp_in": In(stream.Signature(psum_layout(lanes))),
            "fp_out": Out(stream.Signature(pixel_layout(out_channels))),
            "eb_in": In(stream.Signature(pixel_layout(out_channels))),
            "eb_out": Out(stream.Signature(pixel_layout(out_channels))),
            "sample_base": In(SAMPLE_BITS),
        }
        if bias:
            members["bias"] = Out(WeightPortSignature(self.groups, lanes, 1))
        if self.mask_bits:
            members["mask_level"] = Out(range(self.mask_depth + 1))
        super().__init__(members)

    @classmethod
    def from_slice(cls, layer_slice, formats, samples_in_flight=1, family=None):
        s = layer_slice
        return cls(out_channels=s.out_channels, height=s.out_shape[1], width=s.out_shape[2],
                   lanes=s.fp.ces, position=s.position, formats=formats, bias=s.bias, relu=s.relu,
                   pool=s.pool, channel_base=s.out_range[0], samples_in_flight=samples_in_flight,
                   family=family)

    @property
    def tensor(self):
        return numerics.tensor_id(self.position, numerics.FP_OUT)

    def elaborate(self, platform):
        m = Module()
        fifo = None
        if self.mask_bits:
            # Registered in front of its memory: the masks come out of the pool's compare, and
            # band select -> compare -> block RAM data pins was the CI node's worst path (8.9 ns).
            # Its pops counted from a register: the backward pass's stall (from the errors'
            # skid buffer, by the consumers) into the level and full flag was node 0's worst
            # path at 125 MHz (1.0 ns logic, 7.4 ns routing).
            fifo = m.submodules.masks = Fifo(self.out_channels * self.mask_bits, self.mask_depth,
                                             family=self.family, input_register=True, pop_register=True)
            m.d.comb += self.mask_level.eq(fifo.level)
        self._forward(m, fifo)
        self._backward(m, fifo)
        return m

    def _row_memory(self, m, name, width, depth):
        mem = m.submodules[name] = memory.Memory(shape=width, depth=depth, init=[],
                                                 attrs=ram_attrs(depth, self.family))
        return mem

    def _forward(self, m, fifo):
        oc, p, groups, k = self.out_channels, self.lanes, self.groups, self.k
        hw = self.height * self.width
        f = self.formats

        # Credited: its input's ready (so this stage's and the sample counters' enables) is a
        # register, not the next slice's or the link's handshake through the output stage and
        # the mask FIFO into some two thousand flip-flops' enables (ECP5 timing at 125 MHz).
        # Its buffer is as deep for any shift, so mapping/memories.py lists it without formats.
        rounder = m.submodules.rounder = StochasticRounder(
            lanes=p, shift=f.fp_shift, seed=f.seed, tensor=self.tensor, credited=True,
            capacity=SFU_ROUNDER_BUFFER, family=self.family)

        # Stage 0: accept a beat, read its bias row. Stage 1 feeds the rounder.
        advance = rounder.i.ready
        accept = self.fp_in.valid & advance
        g = Signal(range(groups))
        pix = Signal(range(hw))
        gbase = Signal(INDEX_BITS)      # g * P * OH * OW
        done = Signal(SAMPLE_BITS)      # samples completed since reset
        m.d.comb += self.fp_in.ready.eq(advance)
        if self.has_bias:
            # Read only for a beat: an idle SFU leaves the bias RAM free for the update.
            m.d.comb += [self.bias.addr.eq(g), self.bias.en.eq(accept)]
        with m.If(accept):
            with m.If(g == groups - 1):
                m.d.sync += [g.eq(0), gbase.eq(0)]
                with m.If(pix == hw - 1):
                    m.d.sync += [pix.eq(0), done.eq(done + 1)]
                with m.Else():
                    m.d.sync += pix.eq(pix + 1)
            with m.Else():
                m.d.sync += [g.eq(g + 1), gbase.eq(gbase + p * hw)]

        s1 = Signal(data.StructLayout({"valid": 1, "psum": psum_layout(p), "base": INDEX_BITS,
                                       "sample": SAMPLE_BITS}))
        with m.If(advance):
            m.d.sync += [s1.valid.eq(self.fp_in.valid), s1.psum.eq(self.fp_in.payload),
                         s1.base.eq(gbase + pix), s1.sample.eq(self.sample_base + done)]
        bias_shift = f.act_frac + f.weight_frac - f.bias_frac
        m.d.comb += [rounder.i.valid.eq(s1.valid), rounder.i.payload.sample.eq(s1.sample)]
        for lane in range(p):
            acc = s1.psum.values[lane]
            if self.has_bias:
                acc = acc + (self.bias.data[lane][0] << bias_shift)
            m.d.comb += [rounder.i.payload.acc[lane].eq(acc),
                         rounder.i.payload.index[lane].eq(s1.base + (self.channel_base + lane) * hw)]

        # Gather a pixel's G beats; the last one completes it (no extra stage).
        out_ready = ~self.fp_out.valid | self.fp_out.ready
        advance2 = Signal()
        m.d.comb += [advance2.eq(out_ready & (fifo.i.ready if fifo is not None else 1)),
                     rounder.o.ready.eq(advance2)]
        taken = rounder.o.valid & advance2
        gq = Signal(range(groups))
        held = Signal(data.ArrayLayout(signed(WORD), p * (groups - 1)))
        with m.If(taken):
            m.d.sync += gq.eq(Mux(gq == groups - 1, 0, gq + 1))
            for n in range(groups - 1):
                with m.If(gq == n):
                    m.d.sync += held.as_value()[n * p * WORD:(n + 1) * p * WORD].eq(
                        rounder.o.payload.value)
        words = data.ArrayLayout(signed(WORD), oc)(
            Cat(held.as_value(), rounder.o.payload.value.as_value())[:oc * WORD])
        complete = taken & (gq == groups - 1)
        pos = Raster(m, self.height, self.width, k, complete)

        # Pool stage: running window maxima and their positions.
        entry = data.ArrayLayout(
            data.StructLayout({"value": signed(WORD), "code": unsigned(self.code_bits)}), oc)
        # The window position's two selects are registered with the pixel: decoded from kx and ky
        # in this stage, they sat in front of every channel's comparator, and that path (kx ->
        # select -> compare -> mask FIFO data) was node 2's worst at 95.6 MHz.
        p2 = Signal(data.StructLayout({"valid": 1, "pixel": pixel_layout(oc), "kx": range(k),
                                       "ky": range(k), "px": pos.px.shape(), "code": pos.code.shape(),
                                       "inside": 1, "fresh": 1, "from_band": 1}))
        with m.If(advance2):
            m.d.sync += [p2.valid.eq(complete), p2.kx.eq(pos.kx), p2.ky.eq(pos.ky), p2.px.eq(pos.px),
                         p2.code.eq(pos.code), p2.inside.eq(pos.inside),
                         p2.fresh.eq((pos.kx == 0) & (pos.ky == 0)),
                         p2.from_band.eq((pos.kx == 0) & (pos.ky != 0))]
            for c in range(oc):
                m.d.sync += p2.pixel[c].eq(Mux(words[c] > 0, words[c], 0) if self.relu else words[c])

        running = Signal(entry)
        base = entry(running)
        write = p2.valid & p2.inside & (p2.kx == k - 1) & (p2.ky != k - 1)
        band_max = None
        if k > 1:
            # Window maxima of the rows above in this band; written when a window row ends.
            band = self._row_memory(m, "band", entry.size, self.out_shape[2])
            wr = band.write_port()
            rd = band.read_port(transparent_for=(wr,))  # a one-window-wide map reads what it writes
            m.d.comb += [rd.addr.eq(pos.px), rd.en.eq(advance2), wr.addr.eq(p2.px)]
            base = entry(Mux(p2.from_band, rd.data, running))
            band_max = entry(rd.data)
        best = Signal(entry)
        for c in range(oc):
            # The pixel against both candidates, then the select: from_band in front of the
            # comparators, on into the mask FIFO's data, was the CI bitstream's worst path
            # (2.8 ns logic, 8.0 ns routing).
            above = p2.pixel[c] > running[c].value
            if band_max is not None:
                above = Mux(p2.from_band, p2.pixel[c] > band_max[c].value, above)
            m.d.comb += best[c].eq(Mux(p2.fresh | above, Cat(p2.pixel[c], p2.code), base[c]))
        emit = p2.valid & p2.inside & (p2.kx == k - 1) & (p2.ky == k - 1)
        with m.If(advance2 & p2.valid & p2.inside):
            m.d.sync += running.eq(best)
        if k > 1:
            m.d.comb += [wr.en.eq(advance2 & write), wr.data.eq(best)]
        with m.If(advance2):
            m.d.sync += self.fp_out.valid.eq(emit)
            for c in range(oc):
                m.d.sync += self.fp_out.payload[c].eq(best[c].value)
        with m.Elif(self.fp_out.ready):  # taken while a full mask FIFO holds the pipeline
            m.d.sync += self.fp_out.valid.eq(0)
        if fifo is not None:
            masks = [Cat(best[c].code, best[c].value > 0) if self.relu else best[c].code
                     for c in range(oc)]
            m.d.comb += [fifo.i.valid.eq(advance2 & emit), fifo.i.payload.eq(Cat(*masks))]

    def _backward(self, m, fifo):
        oc, k, mb, cb = self.out_channels, self.k, self.mask_bits, self.code_bits
        record = data.StructLayout({"error": pixel_layout(oc), "mask": oc * mb})

        eb_out = self.eb_out
        advance = ~eb_out.valid | eb_out.ready
        fire = Signal()
        pos = Raster(m, self.height, self.width, k, fire)
        # A new pooled pixel (its error and masks) enters at the top-left of each window.
        needs = pos.inside & (pos.kx == 0) & (pos.ky == 0)
        from_band = pos.inside & (pos.kx == 0) & (pos.ky != 0)
        mask_ready = fifo.o.valid if fifo is not None else Const(1)
        m.d.comb += [
            fire.eq(advance & (~needs | (self.eb_in.valid & mask_ready))),
            self.eb_in.ready.eq(advance & needs & mask_ready),
        ]
        if fifo is not None:
            m.d.comb += fifo.o.ready.eq(advance & needs & self.eb_in.valid)

        incoming = Cat(self.eb_in.payload.as_value(), fifo.o.payload if fifo is not None else Const(0, 0))
        arrived = Signal(record)
        with m.If(fire & needs):
            m.d.sync += arrived.eq(incoming)

        # Stage B = the output: the record in use and the pixel's window position.
        NEW, BAND, KEEP, ZERO = range(4)
        src = Signal(range(4))
        code = Signal(range(k * k))
        with m.If(advance):
            m.d.sync += [eb_out.valid.eq(fire), code.eq(pos.code),
                         src.eq(Mux(needs, NEW, Mux(from_band, BAND, Mux(pos.inside, KEEP, ZERO))))]
        current = Signal(record)
        use = Signal(record)
        band_data = current
        if k > 1:
            # The pooled row's records, replayed for the other k-1 conv rows of the band.
            band = self._row_memory(m, "replay", record.size, self.out_shape[2])
            wr, rd = band.write_port(), band.read_port()
            # Written in the cycle the record arrives (when `arrived` takes it too).
            m.d.comb += [wr.addr.eq(pos.px), wr.en.eq(fire & needs), wr.data.eq(incoming),
                         rd.addr.eq(pos.px), rd.en.eq(fire & from_band)]
            band_data = rd.data
        m.d.comb += use.eq(Mux(src == NEW, arrived, Mux(src == BAND, band_data, current)))
        with m.If(advance & eb_out.valid):
            m.d.sync += current.eq(use)
        for c in range(oc):
            mask = use.mask[c * mb:(c + 1) * mb]
            hit = (src != ZERO) & (mask[:cb] == code if cb else 1) & (mask[cb] if self.relu else 1)
            m.d.comb += eb_out.payload[c].eq(Mux(hit, use.error[c], 0))
