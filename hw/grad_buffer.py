"""LGB and BGB: weight gradients summed over a mini-batch, then the SGD update (paper 5.2.2).

Accumulation
------------
``i`` carries one row of gradient terms per beat: ``row`` is a local output channel
(0 .. out_channels-1) and ``values`` its ``words = S*K*K`` 48-bit terms, flattened
(S, K, K) like a ParamRam row. Each beat is added into a 48-bit accumulator row of a
block RAM (``out_channels`` rows of ``words * 48`` bits), one beat per cycle:

- cycle 0: the beat is accepted and its row is read;
- cycle 1: old sum + values is written back.

A beat for the row written in the very cycle its read happens would read a stale
sum (and in the block RAM a collision), so the sum just written is kept in a
register and forwarded instead; back-to-back beats for one row therefore run at
full rate. As in the golden model the sums are exact: the mapping guarantees they fit
48 bits (ACC_BITS).

Update
------
A one-cycle ``update`` strobe at the mini-batch boundary (``batch`` = the mini-batch
number, the noise's sample number) starts the SGD update of every weight word:

    w_new = saturate(w - requantize(gsum * lr, shift, seed, tensor, batch, index))

with ``index`` the word's row-major position in the whole layer tensor (OC, IC, K, K)
in global channel numbers: ``((out_offset + r) * in_total + in_offset) * K*K + j``
for word j of local row r. Biases are the same with IC = K = 1 (index = global
output channel): instantiate a second GradientBuffer with ``in_channels=1,
kernel=1, in_total=1`` and the bias shift / constant / tensor id (``from_slice(...,
bias=True)``), writing a one-word-per-row ParamRam.

One word per cycle goes through a single lane: the word is selected from the held
accumulator row and ParamRam row, ``gsum * lr`` is formed by three 18x17
multipliers (hw.mult, 48-bit gsum split 17 + 17 + 14 bits; 3 MULT18X18D on ECP5,
3 DSP48E1 on xc7) whose partial products are added as they enter the
StochasticRounder (lanes=1, 64-bit accumulator), and the rounded step is subtracted
and saturated on the way into the ParamRam's word write. The accumulator row is
cleared once read. From the strobe to ``done`` (which pulses once, with the last word
written) the update takes ``out_channels * words + ceil(out_channels / banks) + 3 +
rounder latency`` cycles (11 + 8 for shift > 0): one word per cycle, one cycle per
ParamRam address. Meanwhile ``i`` is not ready and ``busy`` is high.

Port B of the ParamRam (``upd``) belongs to the update while ``busy``: EB must be idle,
as hw.update_gate arranges (asserted inside ParamRam).
"""

from amaranth.hdl import Assert, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.mult import Multiplier
from hw.param_ram import NO_RW_CHECK, read_register, update_port_signature
from hw.rounding import INDEX_BITS, SAMPLE_BITS, StochasticRounder, refuse, saturate
from mapping import numerics

PRODUCT_BITS = 64  # |gsum| < 2**47 and lr < 2**16: the product fits a signed 64-bit value
LR_BITS = numerics.WORD_BITS + 1  # the unsigned 16-bit constant as a signed operand
CHUNK_BITS = 17  # gsum is split so every multiplier operand fits 18 signed bits


def gradient_layout(out_channels, words):
    """One beat of ``i``: a local output channel and its ``words`` gradient terms."""
    return data.StructLayout({"row": range(out_channels),
                              "values": data.ArrayLayout(signed(numerics.ACC_BITS), words)})


class GradientBuffer(wiring.Component):
    """Gradient sums of ``out_channels`` rows of ``in_channels * kernel**2`` words, and their update.

    ``banks``: the ParamRam's banks P (local row r is its bank r % P, address r // P).
    ``out_offset``, ``in_offset``, ``in_total``: the slice's first global output and input
    channel and the layer's input channel count (for the noise index).
    ``shift``, ``lr``, ``seed``, ``tensor``: the update's rounding, as in ``numerics.requantize``.
    ``family``: passed to hw.mult (ECP5 instantiates MULT18X18D).
    """

    def __init__(self, *, out_channels, in_channels, kernel, banks, shift, lr, seed, tensor,
                 out_offset=0, in_offset=0, in_total=None, family=None):
        in_total = in_offset + in_channels if in_total is None else in_total
        for name, value in (("out_channels", out_channels), ("in_channels", in_channels),
                            ("kernel", kernel), ("banks", banks)):
            if value < 1:
                refuse(self, f"gradient buffer: {name} = {value} must be at least 1")
        if out_offset < 0 or in_offset < 0 or in_offset + in_channels > in_total:
            refuse(self, f"gradient buffer: input channels {in_offset}..{in_offset + in_channels - 1} "
                         f"are not inside the layer's {in_total}")
        if not 0 < lr < 1 << numerics.WORD_BITS:
            refuse(self, f"gradient buffer: lr constant {lr} is not an unsigned "
                         f"{numerics.WORD_BITS}-bit value above 0")
        last_index = ((out_offset + out_channels) * in_total) * kernel * kernel - 1
        if last_index >= 1 << INDEX_BITS:
            refuse(self, f"gradient buffer: weight index {last_index} exceeds {INDEX_BITS} bits")
        self.out_channels, self.words, self.banks = out_channels, in_channels * kernel * kernel, banks
        self.rows = -(-out_channels // banks)  # ParamRam addresses
        self.index_base = (out_offset * in_total + in_offset) * kernel * kernel
        self.index_stride = in_total * kernel * kernel
        self.family = family
        self.rounder = StochasticRounder(lanes=1, shift=shift, seed=seed, tensor=tensor,
                                         acc_width=PRODUCT_BITS, extra=self._extra_layout())
        self.lr = lr
        super().__init__({
            "i": In(stream.Signature(gradient_layout(out_channels, self.words))),
            "update": In(1),
            "batch": In(SAMPLE_BITS),
            "busy": Out(1),
            "done": Out(1),
            "upd": Out(update_port_signature(self.rows, banks, self.words)),
        })

    def _extra_layout(self):
        """What travels with a word through the rounder: its old value and destination."""
        return data.StructLayout({"w": signed(numerics.WORD_BITS), "addr": range(self.rows),
                                  "lane": range(self.banks * self.words), "last": 1})

    @classmethod
    def from_slice(cls, layer_slice, formats, training, *, bias=False, family=None):
        """The LGB of a slice's weights, or (``bias=True``) of its biases."""
        s = layer_slice
        common = dict(out_channels=s.out_channels, banks=s.fp.ces, seed=formats.seed,
                      out_offset=s.out_range[0], family=family)
        if not bias:
            return cls(in_channels=s.in_channels, kernel=s.kernel, in_offset=s.in_range[0],
                       in_total=s.in_shape[0], shift=formats.weight_update_shift,
                       lr=training.lr_constant,
                       tensor=numerics.tensor_id(s.position, numerics.WEIGHT_UPDATE), **common)
        if not (s.bias and (s.mode == "ocp" or s.last)):
            raise ValueError(f"gradient buffer: the {s.mode} slice of layer '{s.layer}' on channels "
                             f"{s.in_range}->{s.out_range} owns no biases")
        return cls(in_channels=1, kernel=1, in_total=1, shift=formats.bias_update_shift,
                   lr=training.bias_lr_constant,
                   tensor=numerics.tensor_id(s.position, numerics.BIAS_UPDATE), **common)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rounder = rounder = self.rounder
        words, last_row = self.words, self.out_channels - 1
        sum_layout = data.ArrayLayout(signed(numerics.ACC_BITS), words)
        m.submodules.mem = mem = memory.Memory(shape=sum_layout, depth=self.out_channels, init=[],
                                               attrs=NO_RW_CHECK)
        write = mem.write_port()

        # Update state: local row r (ParamRam bank p, address g), word j, lane = p*words + j.
        r, g = Signal(range(self.out_channels)), Signal(range(self.rows))
        p, j = Signal(range(self.banks)), Signal(range(words))
        lane, index = Signal(range(self.banks * words)), Signal(INDEX_BITS)
        batch = Signal(SAMPLE_BITS)
        acc_read, acc_read_addr = Signal(), Signal(range(self.out_channels))
        feeding, clearing = Signal(), Signal()
        advance = rounder.i.ready  # the whole update pipeline moves together

        # Accumulation, stage 0: accept a beat and read its row.
        accept = self.i.valid & self.i.ready
        m.d.comb += self.i.ready.eq(~self.busy & ~self.update)
        sums = read_register(m, mem, Mux(self.busy, acc_read_addr, self.i.payload.row),
                             accept | acc_read)
        # Stage 1: add and write back, forwarding the previous cycle's write.
        s1_valid, s1_row = Signal(), Signal(range(self.out_channels))
        s1_values = Signal(sum_layout, reset_less=True)
        prev_valid, prev_row = Signal(), Signal(range(self.out_channels))
        prev_sum, new_sum = Signal(sum_layout, reset_less=True), Signal(sum_layout)
        m.d.sync += [s1_valid.eq(accept), prev_valid.eq(s1_valid), prev_row.eq(s1_row),
                     prev_sum.eq(new_sum)]
        with m.If(accept):
            m.d.sync += [s1_row.eq(self.i.payload.row), s1_values.eq(self.i.payload.values)]
        old = sum_layout(Mux(prev_valid & (prev_row == s1_row), prev_sum, sums))
        m.d.comb += [new_sum[k].eq(old[k] + s1_values[k]) for k in range(words)]
        m.d.comb += [
            write.en.eq(s1_valid | clearing),
            write.addr.eq(Mux(clearing, r, s1_row)),
            write.data.eq(Mux(clearing, 0, new_sum)),
        ]
        m.d.sync += [  # checked at clock edges
            Assert(~(s1_valid & clearing), "gradient buffer: accumulation during the update"),
            Assert(~(accept & (self.i.payload.row > last_row)),
                   "gradient buffer: gradient row beyond the slice's output channels"),
        ]

        # Update sequencer: one word per advancing cycle, rows in order. The ParamRam is
        # read once per address (LOAD); the next row's sums are read as the current row's
        # last word is taken, so rows of one address follow each other without a gap.
        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.update):
                    m.d.sync += [batch.eq(self.batch), r.eq(0), g.eq(0), p.eq(0), j.eq(0),
                                 lane.eq(0), index.eq(self.index_base)]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += [acc_read.eq(1), acc_read_addr.eq(r), self.upd.read.eq(1)]
                m.next = "WORDS"
            with m.State("WORDS"):
                m.d.comb += [feeding.eq(1), clearing.eq(j == 0)]
                with m.If(advance):
                    m.d.sync += [j.eq(j + 1), lane.eq(lane + 1), index.eq(index + 1)]
                    with m.If(j == words - 1):
                        m.d.sync += [j.eq(0), r.eq(r + 1),
                                     index.eq(index + (self.index_stride - words + 1))]
                        with m.If(r == last_row):
                            m.next = "FLUSH"
                        with m.Elif(p == self.banks - 1):
                            m.d.sync += [p.eq(0), g.eq(g + 1), lane.eq(0)]
                            m.next = "LOAD"
                        with m.Else():
                            m.d.sync += p.eq(p + 1)
                            m.d.comb += [acc_read.eq(1), acc_read_addr.eq(r + 1)]
            with m.State("FLUSH"):
                with m.If(self.done):
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        m.d.sync += Assert(~(self.update & self.busy), "gradient buffer: update strobe while updating")

        # Word select, then gsum * lr (three multipliers, LATENCY enabled cycles).
        gsum = sums[j]
        w = self.upd.data.as_value().word_select(lane, numerics.WORD_BITS).as_signed()
        chunks = [gsum[0:CHUNK_BITS], gsum[CHUNK_BITS:2 * CHUNK_BITS],
                  gsum[2 * CHUNK_BITS:].as_signed()]
        product = 0
        for n, chunk in enumerate(chunks):
            mult = Multiplier(CHUNK_BITS + 1, LR_BITS, family=self.family)
            m.submodules[f"mult{n}"] = mult
            m.d.comb += [mult.a.eq(chunk), mult.b.eq(Const(self.lr, signed(LR_BITS))),
                         mult.en.eq(advance)]
            product = product + (mult.p << (n * CHUNK_BITS))
        side_layout = data.StructLayout({"valid": 1, "index": INDEX_BITS, "extra": self._extra_layout()})
        side = Signal(side_layout)
        m.d.comb += [side.valid.eq(feeding), side.index.eq(index), side.extra.w.eq(w),
                     side.extra.addr.eq(g), side.extra.lane.eq(lane),
                     side.extra.last.eq((r == last_row) & (j == words - 1))]
        for _ in range(Multiplier.latency):
            delayed = Signal(side_layout)
            with m.If(advance):
                m.d.sync += delayed.eq(side)
            side = delayed
        m.d.comb += [rounder.i.valid.eq(side.valid), rounder.i.payload.acc[0].eq(product),
                     rounder.i.payload.index[0].eq(side.index),
                     rounder.i.payload.sample.eq(batch), rounder.i.payload.extra.eq(side.extra)]

        # The rounded step leaves into the ParamRam, except while the update reads it.
        out = rounder.o.payload
        reading = self.upd.read
        m.d.comb += [
            rounder.o.ready.eq(~reading),
            self.upd.write.eq(rounder.o.valid & ~reading),
            self.upd.addr.eq(Mux(reading, g, out.extra.addr)),
            self.upd.lane.eq(out.extra.lane),
            self.upd.value.eq(saturate(out.extra.w - out.value[0], numerics.WORD_BITS)),
            self.done.eq(self.upd.write & out.extra.last),
        ]
        return m
