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
4. max-pool over ``k x k`` windows at stride ``s``, no padding (others are refused);
   the first maximum in raster order wins, as in ``tensor_ops.maxpool_forward``, and
   rows and columns past the last window are dropped. :class:`SFU`, non-overlapping
   windows (k == s): a running maximum per window column, kept for the rows of a window
   band in a row memory of ``PW`` entries. :class:`OverlappingPoolSFU`, k > s (a conv
   pixel in up to ``r = ceil(k/s)`` windows per axis, AlexNet's 3x3 at stride 2): the
   maxima of a row's r open windows in registers, each window row's maximum then
   merged into the running maxima of the r pooled rows being built, one row memory of
   ``PW`` entries each. ``SFU.from_slice`` picks the class.

``fp_out``: OC words per beat, raster order of the pooled map (of the conv map
without a pool). One pixel per cycle in, no bubbles, when G = 1.

``group_beats``: a fully connected layer whose output vector no beat may hold whole
(``LayerSlice.out_map``, 4,096 words and more at paper scale): step 3 gathers nothing, each
rounded beat of P outputs is a "pixel" of P channels of a 1 x G raster, and everything
after (ReLU, its masks, the backward pass) works on those beats. ``fp_out``, ``eb_in``
and ``eb_out`` carry P words a beat, G beats a sample, lanes past OC in the last one
being don't-cares forward (the rounder's) and zero backward where ``eb_in``'s are.

Masks, and backward (``eb_in`` -> ``eb_out``)
--------------------------------------------
Per pooled output and channel the SFU keeps the window position of the maximum
(``ky*k + kx``) and, with ReLU, whether the maximum is > 0 (after ReLU that is
exactly "the winner's pre-activation is > 0"); without a pool, the ReLU bit of every
conv output. They go into a FIFO (``mask_level`` shows its occupancy) of
``samples_in_flight`` samples, on chip or (``mask_storage`` "dram") in the node's DRAM
through the ``dram`` port (hw/memory/dram_fifo.py); the forward stalls when it is full. ``eb_in`` brings
the errors of the pooled output in raster order; ``eb_out`` gives the errors of the
conv output in raster order: a pooled row's errors and masks are taken during the
first conv row of its windows, kept in a row memory and replayed for their other rows;
each conv pixel gets the error of every window whose maximum it was, where the ReLU
bit is set, else 0 (also for rows/columns outside every window). This is
``tensor_ops.maxpool_backward``, the golden model's saturation to a word, then
``relu_backward``: with non-overlapping windows no two errors meet and the saturation
never acts; with overlapping ones a pixel adds the errors of up to r x r windows
(r row memories, one per pooled row in use, and the records of its r window columns
in registers). One conv pixel per cycle.

Memories (``ram_style`` by ``mapping.resources.ram_style`` for ``family``), each with
one read port, PH x PW the pooled map, ``mask_bits = bit_length(k*k - 1) + relu``:
mask FIFO (OC*mask_bits, samples_in_flight*PH*PW) when mask_bits > 0 (in DRAM: its two
staging FIFOs); with a pool
(k > 1) per pooled row built at once (one for k == s, r for k > s:
``mapping.memories.sfu_pool_rows``) a forward band (OC*(16 + bit_length(k*k - 1)), PW)
and a backward replay (OC*(16 + mask_bits), PW).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping import numerics
from mapping.memories import SFU_ROUNDER_BUFFER
from mapping.nodeconfig import ACT_STORAGES

from ..arith.rounding import INDEX_BITS, SAMPLE_BITS, StochasticRounder, saturate
from ..base.checks import positive, refuse
from ..base.counter import gather
from ..base.layouts import pixel_layout, psum_layout
from ..base.ram import ram_attrs
from ..base.signatures import DramQueueSignature, WeightPortSignature
from ..engines.common import select_words
from ..memory.dram_fifo import DramFifo
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


class StridedRaster:
    """Position of the next pixel of a ``height x width`` raster scan under ``k x k`` windows
    at stride ``s`` < ``k`` (no padding), which overlap: a pixel lies in up to ``r = ceil(k/s)``
    windows along each axis. Advances on ``step``.

    Columns: ``start`` at the first pixel of each stride (``x % s == 0``), where window
    column ``column = x // s`` begins if it is one of the PW. The window that began ``d``
    strides ago (column ``column - d``) holds the pixel at its column ``kx[d] = x % s + d*s``
    where ``across[d]``; ``d = r-1`` is the oldest, and ``done`` says the pixel completes it.

    Rows: pooled row ``py`` is built in slot ``py % r``; ``live[j]`` says slot j's pooled row
    covers this conv row, ``top[j]`` is ``ky * k`` for the pixel's row ``ky`` in it (counted
    in steps of k: a product would take a hardware multiplier), ``fresh[j]`` its first row,
    ``ending[j]`` its last. A slot is free again before its next pooled row begins, r strides
    later, as ``k <= r*s``; rows past the last window leave every slot dead.
    """

    def __init__(self, m, height, width, k, s, step):
        r = -(-k // s)
        ph, pw = (height - k) // s + 1, (width - k) // s + 1
        self.r = r
        x, y = Signal(range(width)), Signal(range(height))
        phase, yphase = Signal(range(s)), Signal(range(s))  # x % s, y % s
        self.column = Signal(range((width - 1) // s + 1))
        self.start, self.done = Signal(), Signal()
        self.kx = [phase + d * s for d in range(r)]
        self.across = [Signal(name=f"across{d}") for d in range(r)]
        self.top = [Signal(range(k * k), name=f"top{j}") for j in range(r)]
        self.live = [Signal(init=j == 0, name=f"live{j}") for j in range(r)]
        self.fresh = [self.live[j] & (self.top[j] == 0) for j in range(r)]
        self.ending = [self.live[j] & (self.top[j] == (k - 1) * k) for j in range(r)]
        slot = Signal(range(r), init=1 % r)   # where the next pooled row begins
        begun = Signal(range(ph + 1), init=1)  # pooled rows begun in this sample
        m.d.comb += [self.start.eq(phase == 0), self.done.eq(self.across[r - 1] & (self.kx[r - 1] == k - 1))]
        for d in range(r):
            m.d.comb += self.across[d].eq((self.column >= d) & (self.column - d < pw) & (self.kx[d] < k))
        with m.If(step):
            with m.If(x == width - 1):
                m.d.sync += [x.eq(0), phase.eq(0), self.column.eq(0)]
                with m.If(y == height - 1):
                    m.d.sync += [y.eq(0), yphase.eq(0), slot.eq(slot.init), begun.eq(begun.init)]
                    m.d.sync += [v.eq(v.init) for v in self.top + self.live]
                with m.Else():
                    m.d.sync += y.eq(y + 1)
                    for j in range(r):
                        with m.If(self.ending[j]):
                            m.d.sync += self.live[j].eq(0)
                        with m.Elif(self.live[j]):
                            m.d.sync += self.top[j].eq(self.top[j] + k)
                    with m.If(yphase == s - 1):
                        m.d.sync += [yphase.eq(0), slot.eq(Mux(slot == r - 1, 0, slot + 1))]
                        with m.If(begun < ph):
                            m.d.sync += begun.eq(begun + 1)
                        for j in range(r):
                            with m.If(slot == j):
                                m.d.sync += [self.top[j].eq(0), self.live[j].eq(begun < ph)]
                    with m.Else():
                        m.d.sync += yphase.eq(yphase + 1)
            with m.Else():
                m.d.sync += x.eq(x + 1)
                with m.If(phase == s - 1):
                    m.d.sync += [phase.eq(0), self.column.eq(self.column + 1)]
                with m.Else():
                    m.d.sync += phase.eq(phase + 1)


class SFU(wiring.Component):
    """Special function unit of a layer's last node (see the module docstring), without a
    max-pool or with non-overlapping windows (kernel == stride); :class:`OverlappingPoolSFU`
    pools overlapping ones.

    ``pool``: a ``mapping.nodeconfig.Pool`` or None. Ports: ``fp_in`` (partial sums),
    ``fp_out`` (pixels), ``eb_in``/``eb_out`` (error pixels), ``bias`` (read port, with
    ``bias=True``), ``sample_base``, ``mask_level`` (with ReLU or a pool).
    ``family``: the device family the memories are built for; None simulates.
    """

    POOLS = "kernel == stride, padding 0; OverlappingPoolSFU pools kernel > stride"

    @staticmethod
    def builds(pool):
        return pool is None or (pool.stride == pool.kernel and pool.padding == 0)

    def __init__(self, *, out_channels, height, width, lanes, position, formats=numerics.Formats(),
                 bias=True, relu=True, pool=None, channel_base=0, samples_in_flight=1, mask_storage="chip",
                 group_beats=False, family=None):
        positive(self, "SFU", out_channels=out_channels, height=height, width=width, lanes=lanes,
                 samples_in_flight=samples_in_flight)
        name = type(self).__name__
        if not self.builds(pool):
            what = "no max-pool" if pool is None else \
                f"max-pool kernel {pool.kernel}, stride {pool.stride}, padding {pool.padding}"
            refuse(self, f"{name}: {what} is not supported ({self.POOLS})")
        if pool is not None and pool.kernel > min(height, width):
            refuse(self, f"{name}: max-pool kernel {pool.kernel} is larger than the {height} x {width} "
                         f"conv output")
        if group_beats and (pool is not None or (height, width) != (1, 1)):
            refuse(self, f"{name}: group beats are a 1 x 1 output without a pool, not {height} x {width}"
                         f"{' pooled' if pool is not None else ''}")
        self.out_channels, self.lanes, self.group_beats = out_channels, lanes, group_beats
        self.groups = -(-out_channels // lanes)
        # What the stages after the rounder see: pixels of OC channels on the conv map, or the
        # G beats of a sample as a 1 x G raster of P channels.
        self.beat_channels = lanes if group_beats else out_channels
        self.height, self.width = (1, self.groups) if group_beats else (height, width)
        self.position, self.formats, self.channel_base = position, formats, channel_base
        self.has_bias, self.relu, self.family = bias, relu, family
        self.k, self.stride = (pool.kernel, pool.stride) if pool is not None else (1, 1)
        self.out_shape = (self.beat_channels, *((n - self.k) // self.stride + 1 for n in (self.height, self.width)))
        self.code_bits = (self.k * self.k - 1).bit_length()
        self.mask_bits = self.code_bits + relu  # per channel and pooled output
        self.mask_depth = samples_in_flight * self.out_shape[1] * self.out_shape[2]
        members = {
            "fp_in": In(stream.Signature(psum_layout(lanes))),
            "fp_out": Out(stream.Signature(pixel_layout(self.beat_channels))),
            "eb_in": In(stream.Signature(pixel_layout(self.beat_channels))),
            "eb_out": Out(stream.Signature(pixel_layout(self.beat_channels))),
            "sample_base": In(SAMPLE_BITS),
        }
        if bias:
            members["bias"] = Out(WeightPortSignature(self.groups, lanes, 1))
        if mask_storage not in ACT_STORAGES:
            refuse(self, f"{name}: mask_storage must be one of {', '.join(ACT_STORAGES)}, not {mask_storage!r}")
        self.mask_storage = mask_storage
        if self.mask_bits:
            members["mask_level"] = Out(range(self.mask_depth + 1))
            if mask_storage == "dram":
                members["dram"] = Out(DramQueueSignature(self.beat_channels * self.mask_bits, self.mask_depth))
        super().__init__(members)

    @staticmethod
    def from_slice(layer_slice, formats, samples_in_flight=1, family=None):
        """The SFU of a LayerSlice: :class:`OverlappingPoolSFU` where its pool's windows overlap."""
        s = layer_slice
        cls = OverlappingPoolSFU if OverlappingPoolSFU.builds(s.pool) else SFU
        return cls(out_channels=s.sfu_channels, height=s.out_shape[1], width=s.out_shape[2],
                   lanes=s.fp.ces, position=s.position, formats=formats, bias=s.bias, relu=s.relu,
                   pool=s.pool, channel_base=s.sfu_range[0], samples_in_flight=samples_in_flight,
                   mask_storage=s.act_storage, group_beats=s.out_map is not None, family=family)

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
            if self.mask_storage == "dram":
                fifo = m.submodules.masks = DramFifo(self.beat_channels * self.mask_bits, self.mask_depth,
                                                     family=self.family, input_register=True)
                connect(m, fifo.dram, flipped(self.dram))
            else:
                fifo = m.submodules.masks = Fifo(self.beat_channels * self.mask_bits, self.mask_depth,
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
        oc, p, groups = self.out_channels, self.lanes, self.groups
        hw = 1 if self.group_beats else self.height * self.width  # conv output pixels
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
                acc = acc + self.bias.data[lane][0].shift_left(bias_shift)
            m.d.comb += [rounder.i.payload.acc[lane].eq(acc),
                         rounder.i.payload.index[lane].eq(s1.base + (self.channel_base + lane) * hw)]

        # Gather a pixel's G beats; the last one completes it (no extra stage).
        out_ready = ~self.fp_out.valid | self.fp_out.ready
        advance2 = Signal()
        m.d.comb += [advance2.eq(out_ready & (fifo.i.ready if fifo is not None else 1)),
                     rounder.o.ready.eq(advance2)]
        taken = rounder.o.valid & advance2
        if self.group_beats:
            self._pool(m, fifo, rounder.o.payload.value, taken, advance2)
            return
        pixel, last = gather(m, rounder.o.payload.value.as_value(), taken, groups, oc * WORD)
        self._pool(m, fifo, data.ArrayLayout(signed(WORD), oc)(pixel), taken & last, advance2)

    def _activation(self, word):
        return Mux(word > 0, word, 0) if self.relu else word

    def _pool(self, m, fifo, words, complete, advance2):
        """The pool stage: ``words`` (OC words, ReLU not yet applied) is a whole conv pixel
        where ``complete``; the stage moves on ``advance2``."""
        oc, k = self.beat_channels, self.k
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
                m.d.sync += p2.pixel[c].eq(self._activation(words[c]))

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
        self._output(m, fifo, advance2, emit, best)

    def _output(self, m, fifo, advance2, emit, best):
        """``best`` (per channel a value and its window position) leaves on ``fp_out``, and its
        masks enter the mask FIFO, where ``emit``."""
        with m.If(advance2):
            m.d.sync += self.fp_out.valid.eq(emit)
            for c in range(self.beat_channels):
                m.d.sync += self.fp_out.payload[c].eq(best[c].value)
        with m.Elif(self.fp_out.ready):  # taken while a full mask FIFO holds the pipeline
            m.d.sync += self.fp_out.valid.eq(0)
        if fifo is not None:
            masks = [Cat(best[c].code, best[c].value > 0) if self.relu else best[c].code
                     for c in range(self.beat_channels)]
            m.d.comb += [fifo.i.valid.eq(advance2 & emit), fifo.i.payload.eq(Cat(*masks))]

    def _intake(self, m, fifo, record, advance, fire, needs):
        """The backward pass's handshakes: the pixel ``needs`` a pooled error and its masks (a
        ``record``) and ``fire``s on ``advance`` once it has them. Returns the record on the
        inputs and a register that takes it as the pixel fires."""
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
        return incoming, arrived

    def _backward(self, m, fifo):
        oc, k, mb, cb = self.beat_channels, self.k, self.mask_bits, self.code_bits
        record = data.StructLayout({"error": pixel_layout(oc), "mask": oc * mb})

        eb_out = self.eb_out
        advance = ~eb_out.valid | eb_out.ready
        fire = Signal()
        pos = Raster(m, self.height, self.width, k, fire)
        # A new pooled pixel (its error and masks) enters at the top-left of each window.
        needs = pos.inside & (pos.kx == 0) & (pos.ky == 0)
        from_band = pos.inside & (pos.kx == 0) & (pos.ky != 0)
        incoming, arrived = self._intake(m, fifo, record, advance, fire, needs)

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


class OverlappingPoolSFU(SFU):
    """The SFU with a max-pool whose windows overlap (kernel > stride, no padding).

    Separable, so that each conv pixel meets one running maximum per direction at a time:
    a row's r windows in registers give each window row's maximum and column (``kx``), first
    in the row on ties; those go into the running maxima of the r pooled rows being built
    (one row memory each), which keep the first window row on ties: together the first
    maximum in raster order. Backward, a pooled row's errors and masks go into its slot's
    row memory during its first conv row; each conv pixel adds the errors of the up to r x r
    windows whose maximum it is, saturated to a word (the golden model's saturation).
    """

    POOLS = "kernel > stride, padding 0; SFU pools kernel == stride"

    @staticmethod
    def builds(pool):
        return pool is not None and pool.kernel > pool.stride and pool.padding == 0

    def _pool(self, m, fifo, words, complete, advance2):
        oc, k, pw = self.beat_channels, self.k, self.out_shape[2]
        pos = StridedRaster(m, self.height, self.width, k, self.stride, complete)
        r = pos.r
        slots = data.ArrayLayout(data.StructLayout(
            {"live": 1, "fresh": 1, "ending": 1, "top": range(k * k)}), r)
        row_max = data.ArrayLayout(data.StructLayout({"value": signed(WORD), "kx": range(k)}), oc)
        pool_max = data.ArrayLayout(data.StructLayout({"value": signed(WORD), "code": range(k * k)}), oc)

        # Stage p2: the pixel and where it lies, registered (the selects in front of the
        # comparators come from registers, as in SFU).
        p2 = Signal(data.StructLayout({"valid": 1, "pixel": pixel_layout(oc), "start": 1, "done": 1,
                                       "kx": data.ArrayLayout(range(k), r), "px": range(pw),
                                       "slots": slots}))
        with m.If(advance2):
            m.d.sync += [p2.valid.eq(complete), p2.start.eq(pos.start), p2.done.eq(pos.done),
                         p2.px.eq(pos.column - (r - 1))]  # the window the pixel completes
            m.d.sync += [p2.kx[d].eq(pos.kx[d]) for d in range(r)]
            for j in range(r):
                m.d.sync += [p2.slots[j].live.eq(pos.live[j]), p2.slots[j].fresh.eq(pos.fresh[j]),
                             p2.slots[j].ending.eq(pos.ending[j]), p2.slots[j].top.eq(pos.top[j])]
            for c in range(oc):
                m.d.sync += p2.pixel[c].eq(self._activation(words[c]))

        # Along the row: the maxima of the windows begun d strides ago; each stride's first
        # pixel begins one and moves the others on by one.
        held = [Signal(row_max, name=f"row_max{d}") for d in range(r)]
        nxt = [Signal(row_max, name=f"row_best{d}") for d in range(r)]
        for d in range(r):
            for c in range(oc):
                pixel = p2.pixel[c]
                if d == 0:
                    base, wins = held[0][c], p2.start | (pixel > held[0][c].value)
                else:  # both compares, then the select (see SFU._pool)
                    base = row_max.elem_shape(Mux(p2.start, held[d - 1][c], held[d][c]))
                    wins = Mux(p2.start, pixel > held[d - 1][c].value, pixel > held[d][c].value)
                m.d.comb += [nxt[d][c].value.eq(Mux(wins, pixel, base.value)),
                             nxt[d][c].kx.eq(Mux(wins, p2.kx[d], base.kx))]
        with m.If(advance2 & p2.valid):
            m.d.sync += [held[d].eq(nxt[d]) for d in range(r)]

        # Stage p3: a completed window row's maximum, merged into its pooled rows' maxima.
        p3 = Signal(data.StructLayout({"valid": 1, "row_max": row_max, "px": range(pw), "slots": slots}))
        with m.If(advance2):
            m.d.sync += [p3.valid.eq(p2.valid & p2.done), p3.row_max.eq(nxt[r - 1]), p3.px.eq(p2.px),
                         p3.slots.eq(p2.slots)]
        best = []
        for j in range(r):
            # Pooled rows j, j+r, ...: read as their window row completes, written back a
            # cycle later; the next access to a column is a conv row later, never the next pixel.
            mem = self._row_memory(m, f"band{j}", pool_max.size, pw)
            wr, rd = mem.write_port(), mem.read_port()
            m.d.comb += [rd.addr.eq(p2.px), rd.en.eq(advance2 & p2.valid & p2.done), wr.addr.eq(p3.px)]
            kept, slot = pool_max(rd.data), p3.slots[j]
            merged = Signal(pool_max, name=f"pool_best{j}")
            for c in range(oc):
                new = p3.row_max[c]
                wins = slot.fresh | (new.value > kept[c].value)
                m.d.comb += [merged[c].value.eq(Mux(wins, new.value, kept[c].value)),
                             merged[c].code.eq(Mux(wins, slot.top + new.kx, kept[c].code))]
            m.d.comb += [wr.en.eq(advance2 & p3.valid & slot.live), wr.data.eq(merged)]
            best.append(merged)
        result = best[r - 1]
        for j in reversed(range(r - 1)):  # the one pooled row that ends here
            result = pool_max(Mux(p3.slots[j].ending, best[j], result))
        emit = p3.valid & Cat(p3.slots[j].ending for j in range(r)).any()
        self._output(m, fifo, advance2, emit, result)

    def _backward(self, m, fifo):
        oc, k, mb, cb = self.beat_channels, self.k, self.mask_bits, self.code_bits
        pw = self.out_shape[2]
        record = data.StructLayout({"error": pixel_layout(oc), "mask": oc * mb})

        eb_out = self.eb_out
        advance = ~eb_out.valid | eb_out.ready
        fire = Signal()
        pos = StridedRaster(m, self.height, self.width, k, self.stride, fire)
        r = pos.r
        # A pooled pixel (its error and masks) enters at the start of its window column in
        # the first conv row of its window.
        enters = pos.start & (pos.column < pw)
        needs = enters & Cat(pos.fresh).any()
        incoming, arrived = self._intake(m, fifo, record, advance, fire, needs)

        # Stage B: the records of the windows holding the pixel, d strides old, per slot.
        terms = data.ArrayLayout(data.StructLayout({"valid": 1, "code": range(k * k)}), r * r)
        b = Signal(data.StructLayout({"valid": 1, "start": 1, "fresh": r, "terms": terms}))
        with m.If(advance):
            m.d.sync += [b.valid.eq(fire), b.start.eq(pos.start), b.fresh.eq(Cat(pos.fresh))]
            for j in range(r):
                for d in range(r):
                    m.d.sync += [b.terms[j * r + d].valid.eq(pos.live[j] & pos.across[d]),
                                 b.terms[j * r + d].code.eq(pos.top[j] + pos.kx[d])]
        held = [[Signal(record, name=f"held{j}_{d}") for d in range(r)] for j in range(r)]
        use = [[Signal(record, name=f"use{j}_{d}") for d in range(r)] for j in range(r)]
        for j in range(r):
            mem = self._row_memory(m, f"replay{j}", record.size, pw)
            wr, rd = mem.write_port(), mem.read_port()
            m.d.comb += [wr.addr.eq(pos.column), wr.en.eq(fire & needs & pos.fresh[j]), wr.data.eq(incoming),
                         rd.addr.eq(pos.column), rd.en.eq(fire & enters)]
            m.d.comb += use[j][0].eq(Mux(b.start, Mux(b.fresh[j], arrived, rd.data), held[j][0]))
            m.d.comb += [use[j][d].eq(Mux(b.start, held[j][d - 1], held[j][d])) for d in range(1, r)]
        with m.If(advance & b.valid):
            m.d.sync += [held[j][d].eq(use[j][d]) for j in range(r) for d in range(r)]

        with m.If(advance):
            m.d.sync += eb_out.valid.eq(b.valid)
            for c in range(oc):
                routed = []
                for j in range(r):
                    for d in range(r):
                        term, mask = b.terms[j * r + d], use[j][d].mask[c * mb:(c + 1) * mb]
                        hit = term.valid & (mask[:cb] == term.code) & (mask[cb] if self.relu else 1)
                        routed.append(Mux(hit, use[j][d].error[c], 0))
                m.d.sync += eb_out.payload[c].eq(saturate(sum(routed), WORD))


class BiasRows(wiring.Component):
    """The SFU's bias reads (``rows`` rows of ``lanes`` biases, one per beat of partial sums) from
    a bias RAM of ``banks`` biases a row, a multiple of ``lanes``: the layout of a grouped ICP
    layer's last slice, whose bias beats cover every group at once (``LayerSlice.bias_banks``).
    SFU row g is RAM row g // (banks / lanes), its lanes the (g mod banks / lanes)-th; the choice
    is registered with the read, as the RAM registers its data."""

    def __init__(self, *, rows, lanes, banks):
        if banks % lanes:
            refuse(self, f"bias rows: banks = {banks} is not a multiple of lanes = {lanes}")
        self.parts = banks // lanes
        super().__init__({"sfu": In(WeightPortSignature(rows, lanes, 1)),
                          "ram": Out(WeightPortSignature(-(-rows // self.parts), banks, 1))})

    def elaborate(self, platform):
        m = Module()
        part = Signal(range(self.parts))
        m.d.comb += [self.ram.addr.eq(self.sfu.addr // self.parts), self.ram.en.eq(self.sfu.en)]
        with m.If(self.sfu.en):
            m.d.sync += part.eq(self.sfu.addr % self.parts)
        m.d.comb += self.sfu.data.as_value().eq(select_words(self.ram.data, part, self.parts, len(self.sfu.data)))
        return m
