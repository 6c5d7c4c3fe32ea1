"""Line buffer: a raster stream of pixels in, K x K windows out.

Geometry
--------
The buffer walks a *virtual* map: the input (``height`` x ``width`` pixels of
``channels`` words) with ``dilation - 1`` zero rows/columns inserted between
neighbouring pixels, ``pad_before`` zero rows/columns before and ``pad_after``
after. It emits the K x K windows of that map at ``stride``, so per dimension
``out = (pad_before + (n - 1) * dilation + 1 + pad_after - K) // stride + 1``.
Each window is ``tensor_ops.windows(...)[oy, ox].reshape(-1)`` of the virtual map
(channel-major, then ky, then kx). The three users:

- FP and PG: ``pad_before = pad_after = p``, ``stride = s``, ``dilation = 1``;
- EB (:meth:`LineBuffer.for_errors`): the errors of the layer output with
  ``dilation = s``, ``pad_before = K-1-p``, ``pad_after = H-1+p-(OH-1)*s`` and
  stride 1, which is ``tensor_ops.dilate_pad_errors`` cropped at ``[p, p+H)``:
  exactly H x W windows, each convolved with the flipped kernels (the flip lives
  in the weights).

Zeros of padding and dilation are generated, never stored: whole virtual rows
and columns are either real (hold input pixels) or zero.

Microarchitecture
-----------------
``M = ceil((K-1)/dilation)`` row memories (``lib.memory.Memory``, ``width`` deep,
one pixel of ``channels`` words wide) keep the real rows above the current one;
the current row comes straight from the input. Real row ``r`` goes to memory
``r mod M`` in a ring, column by column, over the row it replaces (the read of
the same address in the same cycle still returns the old row, which the current
window may need as its oldest row). A K x K register window shifts one column
per cycle. Memories: M x (16*C bits, W), each with one read port, ``ram_style`` by
``mapping.resources.ram_style`` for ``family``.

The walk over one sample is a fixed list of *row steps*, computed here at
elaboration time and kept in a small ROM: one per virtual row that brings an
input row and/or ends windows (rows with neither, e.g. top padding, cost
nothing). A step scans columns ``min(pad_before, K-1)`` .. its last needed column
at one column per cycle: it takes an input pixel at real columns of real rows and
emits a window where one ends. For each window row the ROM says whether it is
zero and how many rows ago its real row was written (0 = the incoming pixel), so
the memory holding it is ``(write pointer - age) mod M`` whatever the sample.

Throughput: one column per cycle when neither side stalls; consecutive samples
follow without a gap. Cycles per sample (:attr:`LineBuffer.cycles_per_sample`)
are the sum of the steps' column counts. Against the ideal of one input pixel per
cycle the overhead is the padding the window walks over: for stride 1 and
``pad_before = pad_after = p <= K-1`` a sample takes ``(K-1-p)*W + (H+1-K+2p)(W+p)``
cycles, i.e. ``p`` right-padding windows per row with output and ``p`` bottom-padding
rows over ``H*W`` (8x8, K=3, p=1: 80 vs 64; 224x224: 50624 vs 50176); stride > 1 without
padding costs nothing (``H*W``); EB with dilation d is window-bound (one output
per cycle) plus the dilated columns of the few real rows above the first window.

Pipeline: stage A walks the positions (issues memory reads, writes the input
pixel), stage B holds the read column, and the window register is the output
payload; ``i.ready`` and the output advance depend combinationally on ``o.ready``.
"""

from amaranth.hdl import Array, Assert, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mapping.line_walk import Axis, error_axis, row_steps, walk_cycles

from ..base.checks import refuse
from ..base.counter import next_value
from ..base.layouts import flat_elements, pixel_layout, window_layout
from ..base.ram import ram_attrs


def _pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


class LineBuffer(wiring.Component):
    """Pixels (``channels`` words per beat, raster order, samples back to back) in, windows out.

    ``pad_before``/``pad_after`` are an int or a (rows, columns) pair;
    ``pad_after=None`` means the same as ``pad_before``. ``family``: the device family
    the row memories are built for; None simulates.
    """

    def __init__(self, *, channels, height, width, kernel, stride=1, pad_before=0, pad_after=None,
                 dilation=1, family=None):
        pad_after = pad_before if pad_after is None else pad_after
        for name, value, low in (("channels", channels, 1), ("height", height, 1), ("width", width, 1),
                                 ("kernel", kernel, 1), ("stride", stride, 1), ("dilation", dilation, 1)):
            if value < low:
                refuse(self, f"line buffer: {name} = {value} must be at least {low}")
        for name, value in (("pad_before", pad_before), ("pad_after", pad_after)):
            if len(_pair(value)) != 2 or min(_pair(value)) < 0:
                refuse(self, f"line buffer: {name} = {value} is not a non-negative int or "
                             f"(rows, columns) pair")
        self.rows, self.cols = (Axis(n, kernel, stride, before, after, dilation)
                                for n, before, after in zip((height, width), _pair(pad_before),
                                                            _pair(pad_after)))
        for axis, name in ((self.rows, "rows"), (self.cols, "columns")):
            if axis.out < 1:
                refuse(self, f"line buffer: the padded map has {axis.virtual} {name}, fewer than "
                             f"the {kernel} x {kernel} window")
        self.channels, self.kernel, self.family = channels, kernel, family
        self.memories = -(-(kernel - 1) // dilation)
        self.steps = row_steps(self.rows, self.cols)
        assert all(a <= self.memories for s in self.steps for a, r in zip(s.age, s.real) if r)
        super().__init__({
            "i": In(stream.Signature(pixel_layout(channels))),
            "o": Out(stream.Signature(window_layout(channels, kernel))),
        })

    @classmethod
    def for_errors(cls, *, channels, in_height, in_width, kernel, stride, padding, family=None):
        """EB: windows over the errors of a conv layer's output whose input is in_height x in_width.

        One window per input pixel; with the flipped kernels each gives that pixel's error.
        """
        rows, cols = (error_axis(n, kernel, stride, padding) for n in (in_height, in_width))
        return cls(channels=channels, height=rows.size, width=cols.size, kernel=kernel, stride=1,
                   pad_before=rows.pad_before, dilation=stride,
                   pad_after=(rows.pad_after, cols.pad_after), family=family)

    @classmethod
    def from_slice(cls, layer_slice, role="fp", family=None):
        """The line buffer of a layer slice's FP, PG (input activations) or EB (output errors)."""
        s = layer_slice
        if role in ("fp", "pg"):
            return cls(channels=s.in_channels, height=s.in_shape[1], width=s.in_shape[2],
                       kernel=s.kernel, stride=s.stride, pad_before=s.padding, family=family)
        if role == "eb":
            return cls.for_errors(channels=s.out_channels, in_height=s.in_shape[1],
                                  in_width=s.in_shape[2], kernel=s.kernel, stride=s.stride,
                                  padding=s.padding, family=family)
        raise ValueError(f"line buffer: role '{role}' is not one of fp, pg, eb")

    @property
    def out_shape(self):
        return (self.rows.out, self.cols.out)

    @property
    def words(self):
        """Words of row memory (the mapping's line_buffer_words)."""
        return self.memories * self.cols.size * self.channels

    @property
    def cycles_per_sample(self):
        """Cycles per sample with neither side stalling."""
        return walk_cycles(self.steps, self.cols)

    def elaborate(self, platform):
        m = Module()
        k, c, mems, cols = self.kernel, self.channels, self.memories, self.cols
        pixel = pixel_layout(c)
        column = data.ArrayLayout(pixel, k)

        # Row-step ROM.
        step_layout = data.StructLayout({
            "has_in": 1, "has_out": 1, "real": k,
            "age": data.ArrayLayout(unsigned(max(mems, 1).bit_length()), k),
            "end": unsigned(cols.virtual.bit_length()),
        })
        rom = m.submodules.steps = Memory(shape=step_layout, depth=len(self.steps), init=[
            {"has_in": s.has_in, "has_out": s.has_out, "real": sum(r << n for n, r in enumerate(s.real)),
             "age": list(s.age), "end": s.end} for s in self.steps])
        step = Signal(range(len(self.steps)))
        rom_port, next_port = rom.read_port(domain="comb"), rom.read_port(domain="comb")
        info = rom_port.data
        m.d.comb += rom_port.addr.eq(step)

        # Stage A: the column position of the current row step.
        vx = Signal(range(cols.virtual), init=cols.scan_start)
        x = Signal(range(cols.size))                      # next real column
        dphase = Signal(range(cols.dilation), init=(cols.scan_start - cols.first_real) % cols.dilation)
        sphase = Signal(range(cols.stride), init=(cols.scan_start - cols.first_end) % cols.stride)
        wptr = Signal(range(max(mems, 1)))                # memory the next real row goes to

        def real(vx, dphase):
            return (vx >= cols.first_real) & (vx <= cols.last_real) & (dphase == 0)

        col_real = Signal()
        col_end = Signal()
        m.d.comb += [
            col_real.eq(real(vx, dphase)),
            col_end.eq(info.has_out & (vx >= cols.first_end) & (vx <= cols.last_end) & (sphase == 0)),
        ]
        # ``i.ready`` and the step's "has an output" from registers loaded with their next
        # values: the ready runs into the producer's FIFO (an Act-RAM's occupancy count, an
        # ECP5-85 node's worst path at 125 MHz), the comparisons and the step ROM stay behind.
        step_next, vx_next, dphase_next = next_value(m, step), next_value(m, vx), next_value(m, dphase)
        m.d.comb += next_port.addr.eq(step_next)
        first = self.steps[0]
        takes_input = Signal(init=bool(first.has_in and cols.first_real <= cols.scan_start <= cols.last_real
                                       and dphase.init == 0))
        has_out = Signal(init=bool(first.has_out))
        m.d.sync += [takes_input.eq(next_port.data.has_in & real(vx_next, dphase_next)),
                     has_out.eq(next_port.data.has_out),
                     Assert(takes_input == info.has_in & col_real, "line buffer: takes_input disagrees"),
                     Assert(has_out == info.has_out, "line buffer: has_out disagrees")]

        # Stage B: a column waiting to enter the window. Source per window row:
        # 0 = zero, 1 = the incoming pixel, 2 + j = row memory j.
        b_valid = Signal()
        b_end = Signal()
        b_first = Signal()
        b_src = Signal(data.ArrayLayout(unsigned((mems + 1).bit_length()), k))
        b_pixel = Signal(pixel)
        # window[kx][ky][channel]. Off the reset net: its only clear is the left padding at a
        # row's first column, which then maps to the flip-flops' synchronous reset; a second
        # clear besides the domain's reset took a LUT per window bit.
        window = Signal(data.ArrayLayout(column, k), reset_less=True)

        o_valid = self.o.valid
        b_fire = Signal()
        b_free = Signal()
        a_fire = Signal()
        m.d.comb += [
            b_fire.eq(b_valid & (~o_valid | self.o.ready)),
            b_free.eq(~b_valid | b_fire),
            a_fire.eq((~takes_input | self.i.valid) & (~has_out | b_free)),
            self.i.ready.eq(takes_input & (~has_out | b_free)),
        ]

        # Row memories; all read at column x, the incoming pixel written to memory wptr.
        reads = []
        for j in range(mems):
            mem = m.submodules[f"row{j}"] = Memory(shape=pixel, depth=cols.size, init=[],
                                                   attrs=ram_attrs(cols.size, self.family))
            wr, rd = mem.write_port(), mem.read_port()
            m.d.comb += [
                wr.addr.eq(x), wr.data.eq(self.i.payload),
                wr.en.eq(a_fire & takes_input & (wptr == j)),
                rd.addr.eq(x), rd.en.eq(a_fire & has_out),
            ]
            reads.append(rd.data)

        with m.If(a_fire):
            with m.If(has_out):
                # Only a column bound for the window latches the pixel: an input-only
                # step may run while stage B still holds a column that uses it.
                m.d.sync += [b_pixel.eq(self.i.payload), b_end.eq(col_end),
                             b_first.eq(vx == cols.scan_start)]
                for ky in range(k):
                    age = info.age[ky]
                    slot = wptr + mems - age  # in [0, 2M): age <= M
                    slot = Mux(slot >= mems, slot - mems, slot) if mems else 0
                    m.d.sync += b_src[ky].eq(Mux(info.real[ky] & col_real,
                                                 Mux(age == 0, 1, 2 + slot), 0))
            with m.If(vx == info.end):
                m.d.comb += [step_next.eq(Mux(step == len(self.steps) - 1, 0, step + 1)),
                             vx_next.eq(cols.scan_start), dphase_next.eq(dphase.init)]
                m.d.sync += [x.eq(0), sphase.eq(sphase.init)]
                if mems > 1:
                    with m.If(info.has_in):
                        m.d.sync += wptr.eq(Mux(wptr == mems - 1, 0, wptr + 1))
            with m.Else():
                m.d.comb += [vx_next.eq(vx + 1), dphase_next.eq(Mux(dphase == cols.dilation - 1, 0, dphase + 1))]
                m.d.sync += sphase.eq(Mux(sphase == cols.stride - 1, 0, sphase + 1))
                with m.If(col_real & (x != cols.size - 1)):
                    m.d.sync += x.eq(x + 1)

        with m.If(a_fire & has_out):
            m.d.sync += b_valid.eq(1)
        with m.Elif(b_fire):
            m.d.sync += b_valid.eq(0)

        # The column entering the window, and the window shift.
        sources = Array([Const(0, pixel.size), b_pixel.as_value()] + [r.as_value() for r in reads])
        incoming = [sources[b_src[ky]] for ky in range(k)]
        with m.If(b_fire):
            for kx in range(k - 1):
                m.d.sync += window[kx].eq(Mux(b_first, 0, window[kx + 1]))
            for ky in range(k):
                m.d.sync += window[k - 1][ky].eq(incoming[ky])
            m.d.sync += o_valid.eq(b_end)
        with m.Elif(self.o.ready):
            m.d.sync += o_valid.eq(0)

        # Output order: channel-major, then ky, then kx (the window's words sliced flat).
        words = flat_elements(window.as_value(), window.shape())  # kx-major, then ky, then channel
        m.d.comb += self.o.payload.as_value().eq(Cat(*(words[(kx * k + ky) * c + ch]
                                                      for ch in range(c) for ky in range(k) for kx in range(k))))
        return m
