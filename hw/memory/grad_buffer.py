"""LGB and BGB: weight gradients summed over a mini-batch, then the SGD update (paper 5.2.2).

Accumulation
------------
``i`` takes the PG engine's beats as they are (``hw.base.layouts.grads_layout``): ``row``
is an LPRAM address a = g*v + i (``hw.memory.param_ram.WeightLayout``: output-channel group g,
pass i of v = ceil(S / b) over b input channels) and ``values`` the P rows of ``words =
b*K*K`` exact products of output channels gP .. gP+P-1 and input channels ib .. ib+b-1,
each flattened (b, K, K) like a ParamRam row. The sums live in a block RAM banked like
the ParamRam: G*v addresses (G = ceil(out_channels / P)) of P*words 48-bit
accumulators (bank-major), and a beat is added into its address, one beat per cycle:

- cycle 0: the beat is accepted and its address is read;
- cycle 1: old sums + the products (sign-extended to 48 bits) are written back.

A beat for the address written in the very cycle its read happens would read stale
sums (and in the block RAM a collision), so the sums just written are kept in a
register and forwarded instead; back-to-back beats of one address (one address per
pixel when O <= P and v = 1) therefore run at full rate. As in the golden model the
sums are exact: the mapping guarantees they fit 48 bits (ACC_BITS). Padded words -
rows past ``out_channels`` in the last group, input channels past S in the last pass
(zeros from the PG engine) - are summed like the others but never read by the
update, and cleared with their address, so whatever they carry changes nothing.

Memory: (P*words*48 bits, G*v), one read port (the write enables of all lanes are
driven together, so the 48-bit accumulators pack without byte columns); words =
b*K*K, or 1 for biases.

Update
------
A one-cycle ``update`` strobe at the mini-batch boundary (``batch`` = the mini-batch
number, the noise's sample number) starts the SGD update of every weight word:

    w_new = saturate(w - requantize(gsum * lr, shift, seed, tensor, batch, index))

with ``index`` the word's row-major position in the whole layer tensor (OC, IC, K, K)
in global channel numbers: word (c, ky, kx) of bank p at address g*v + i is weight
(o, s) = (g*P + p, i*b + c) of the slice, index ``((out_offset + o) * in_total +
in_offset + s) * K*K + ky*K + kx``. The walk goes address by address, bank by bank,
word by word, so the index is stepped with adders: +1 per word, +in_total*K*K per
bank (less the words visited), and per address from a pass base that steps +b*K*K
per pass and (P*in_total - (v-1)*b)*K*K from a group's last pass to the next group.
Padded words are skipped: banks past ``out_channels`` in the last group and channels
past S in the last pass. Biases are the same with IC = K = 1 (index = global output
channel): a second GradientBuffer with ``bias=True, in_channels=1, kernel=1,
in_total=1`` and the bias shift / constant / tensor id (``from_slice(..., bias=True)``)
takes the PG engine's ``bias_grads`` beats (the P errors of a group, one word per row;
``row`` = g, zero errors on passes i > 0) and writes a one-word-per-row ParamRam.

One word per cycle goes through a single lane: the word is selected from the held
accumulator address and ParamRam address, ``gsum * lr`` is formed by three 18x17
multipliers (hw.arith.mult, 48-bit gsum split 17 + 17 + 14 bits; 3 MULT18X18D on ECP5,
3 DSP48E1 on xc7) whose partial products are added as they enter the
StochasticRounder (lanes=1, 64-bit accumulator), and the rounded step is subtracted
and saturated on the way into the ParamRam's word write. An accumulator address is
cleared once read. From the strobe to ``done`` (which pulses once, with the last word
written) the update takes ``O*S*K*K + G*v + 3 + rounder latency`` cycles (latency 11
+ the rounder's 10 for shift > 0): one cycle per real weight, one per address (both memories are
read in it). Meanwhile ``i`` is not ready and ``busy`` is high.

Port B of the ParamRam (``upd``) belongs to the update while ``busy``: EB must be idle,
as hw.memory.update_gate arranges (asserted inside ParamRam).
"""

from amaranth.hdl import Assert, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping import numerics

from ..arith.mult import Multiplier
from ..arith.rounding import (INDEX_BITS, SAMPLE_BITS, StochasticRounder,
                              saturate)
from ..base.checks import positive, refuse
from ..base.layouts import bias_grads_layout, grads_layout
from ..base.ram import NO_RW_CHECK, ram_attrs, read_register
from ..base.signatures import UpdatePortSignature
from .param_ram import WeightWalk

STEP_BITS = 64  # lr * gsum: |gsum| < 2**47 and lr < 2**16: the product fits a signed 64-bit value
LR_BITS = numerics.WORD_BITS + 1  # the unsigned 16-bit constant as a signed operand
CHUNK_BITS = 17  # gsum is split so every multiplier operand fits 18 signed bits


class GradientBuffer(WeightWalk, wiring.Component):
    """Gradient sums of ``out_channels`` x ``in_channels`` x ``kernel**2`` weights, and their update.

    ``banks``, ``tiles``: the PG engine's CEs P and tiles per CE b (None: b =
    ``in_channels``, unfolded), laid out in both memories by ``hw.memory.param_ram.WeightLayout``
    (``layout``; ``rows`` = G*v addresses of ``words`` = b*K*K words per bank, ``passes`` = v).
    ``bias``: ``i`` takes ``bias_grads`` beats (one error per row; ``in_channels`` and
    ``kernel`` must be 1) instead of ``grads`` beats.
    ``out_offset``, ``in_offset``, ``in_total``: the slice's first global output and input
    channel and the layer's input channel count (for the noise index).
    ``shift``, ``lr``, ``seed``, ``tensor``: the update's rounding, as in ``numerics.requantize``.
    ``family``: passed to hw.arith.mult (ECP5 instantiates MULT18X18D) and choosing the sums'
    ``ram_style`` (``mapping.resources.ram_style``); None simulates.
    """

    def __init__(self, *, out_channels, in_channels, kernel, banks, shift, lr, seed, tensor, tiles=None,
                 out_offset=0, in_offset=0, in_total=None, bias=False, family=None):
        in_total = in_offset + in_channels if in_total is None else in_total
        positive(self, "gradient buffer", out_channels=out_channels, in_channels=in_channels, kernel=kernel,
                 banks=banks)
        self._walk("gradient buffer", out_channels=out_channels, in_channels=in_channels, kernel=kernel,
                   banks=banks, tiles=tiles)
        if bias and (in_channels, kernel) != (1, 1):
            refuse(self, f"gradient buffer: a bias buffer has one word per row, not in_channels = "
                         f"{in_channels} x kernel = {kernel}x{kernel}")
        if out_offset < 0 or in_offset < 0 or in_offset + in_channels > in_total:
            refuse(self, f"gradient buffer: input channels {in_offset}..{in_offset + in_channels - 1} "
                         f"are not inside the layer's {in_total}")
        if not 0 < lr < 1 << numerics.WORD_BITS:
            refuse(self, f"gradient buffer: lr constant {lr} is not an unsigned "
                         f"{numerics.WORD_BITS}-bit value above 0")
        last_index = ((out_offset + out_channels) * in_total) * kernel * kernel - 1
        if last_index >= 1 << INDEX_BITS:
            refuse(self, f"gradient buffer: weight index {last_index} exceeds {INDEX_BITS} bits")
        self.out_channels, self.banks, self.bias, self.family = out_channels, banks, bias, family
        kk = kernel * kernel
        self.index_base = (out_offset * in_total + in_offset) * kk
        self.index_stride = in_total * kk  # from one output channel to the next
        # From a group's last pass base to the next group's first (one pass steps b*K*K).
        self.group_step = (banks * in_total - (self.passes - 1) * self.tiles) * kk
        # The last pass's real words and the last group's real banks: the update skips the rest.
        self.last_words = (in_channels - (self.passes - 1) * self.tiles) * kk
        self.last_banks = out_channels - (self.groups - 1) * banks
        self.rounder = StochasticRounder(lanes=1, shift=shift, seed=seed, tensor=tensor,
                                         acc_width=STEP_BITS, extra=self._extra_layout())
        self.lr = lr
        beat = bias_grads_layout(self.rows, banks) if bias else grads_layout(self.rows, banks, self.words)
        super().__init__({
            "i": In(stream.Signature(beat)),
            "update": In(1),
            "batch": In(SAMPLE_BITS),
            "busy": Out(1),
            "done": Out(1),
            "upd": Out(UpdatePortSignature(self.rows, banks, self.words)),
        })

    def _extra_layout(self):
        """What travels with a word through the rounder: its old value and destination."""
        return data.StructLayout({"w": signed(numerics.WORD_BITS), "addr": range(self.rows),
                                  "lane": range(self.banks * self.words), "last": 1})

    def _terms(self, values):
        """A beat's P*words terms, bank-major like an address of either memory."""
        if self.bias:
            return [values[p] for p in range(self.banks)]
        return [values[p][j] for p in range(self.banks) for j in range(self.words)]

    @classmethod
    def from_slice(cls, layer_slice, formats, training, *, bias=False, family=None):
        """The LGB of a slice's weights (P and b of its FP engine), or (``bias=True``) of its biases."""
        s = layer_slice
        common = dict(out_channels=s.out_channels, banks=s.fp.ces, seed=formats.seed,
                      out_offset=s.out_range[0], family=family)
        if not bias:
            return cls(in_channels=s.in_channels, kernel=s.kernel, tiles=s.fp.tiles, in_offset=s.in_range[0],
                       in_total=s.in_shape[0], shift=formats.weight_update_shift,
                       lr=training.lr_constant,
                       tensor=numerics.tensor_id(s.position, numerics.WEIGHT_UPDATE), **common)
        if not (s.bias and (s.mode == "ocp" or s.last)):
            raise ValueError(f"gradient buffer: the {s.mode} slice of layer '{s.layer}' on channels "
                             f"{s.in_range}->{s.out_range} owns no biases")
        return cls(in_channels=1, kernel=1, in_total=1, shift=formats.bias_update_shift,
                   lr=training.bias_lr_constant, bias=True,
                   tensor=numerics.tensor_id(s.position, numerics.BIAS_UPDATE), **common)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rounder = rounder = self.rounder
        words, lanes = self.words, self.banks * self.words
        sum_layout = data.ArrayLayout(signed(numerics.ACC_BITS), lanes)
        m.submodules.mem = mem = memory.Memory(shape=sum_layout, depth=self.rows, init=[],
                                               attrs=NO_RW_CHECK | ram_attrs(self.rows, self.family))
        # One enable per lane, all driven together: in RTLIL (where enables are per bit)
        # the same as one enable, but Amaranth's simulator expands a single enable into one
        # Python expression per data bit, which Python cannot compile beyond ~2500 bits.
        write = mem.write_port(granularity=1)

        # Update state: address a = g*v + i (``g`` holds a), pass i, bank p, word j, lane =
        # p*words + j; ``pass_base`` is the index of word 0 of bank 0 at the address.
        g, i = Signal(range(self.rows)), Signal(range(self.passes))
        p, j = Signal(range(self.banks)), Signal(range(words))
        lane, index, pass_base = Signal(range(lanes)), Signal(INDEX_BITS), Signal(INDEX_BITS)
        batch = Signal(SAMPLE_BITS)
        loading, feeding, clearing = Signal(), Signal(), Signal()
        advance = rounder.i.ready  # the whole update pipeline moves together

        # Accumulation, stage 0: accept a beat and read its address.
        accept = self.i.valid & self.i.ready
        m.d.comb += self.i.ready.eq(~self.busy & ~self.update)
        sums = read_register(m, mem, Mux(self.busy, g, self.i.payload.row), accept | loading)
        # Stage 1: add and write back, forwarding the previous cycle's write.
        values_shape = self.i.payload.shape()["values"].shape
        s1_valid, s1_row = Signal(), Signal(range(self.rows))
        s1_values = Signal(values_shape, reset_less=True)
        prev_valid, prev_row = Signal(), Signal(range(self.rows))
        prev_sum, new_sum = Signal(sum_layout, reset_less=True), Signal(sum_layout)
        m.d.sync += [s1_valid.eq(accept), prev_valid.eq(s1_valid), prev_row.eq(s1_row),
                     prev_sum.eq(new_sum)]
        with m.If(accept):
            m.d.sync += [s1_row.eq(self.i.payload.row), s1_values.eq(self.i.payload.values)]
        old = sum_layout(Mux(prev_valid & (prev_row == s1_row), prev_sum, sums))
        m.d.comb += [new_sum[k].eq(old[k] + term) for k, term in enumerate(self._terms(s1_values))]
        m.d.comb += [
            write.en.eq((s1_valid | clearing).replicate(lanes)),
            write.addr.eq(Mux(clearing, g, s1_row)),
            write.data.eq(Mux(clearing, 0, new_sum)),
        ]
        m.d.sync += [  # checked at clock edges
            Assert(~(s1_valid & clearing), "gradient buffer: accumulation during the update"),
            Assert(~(accept & (self.i.payload.row > self.rows - 1)),
                   "gradient buffer: gradient row beyond the slice's addresses"),
        ]

        # Update sequencer: one real word per advancing cycle, addresses in order. Each
        # address is read once in both memories (LOAD) and its words are taken from the
        # held reads; padded words (past S in the last pass, past O in the last group)
        # are skipped.
        last_pass = i == self.passes - 1
        row_end = j == Mux(last_pass, self.last_words, words) - 1
        address_end = row_end & (p == Mux(g >= self.rows - self.passes, self.last_banks, self.banks) - 1)
        last_word = address_end & (g == self.rows - 1)
        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.update):
                    m.d.sync += [batch.eq(self.batch), g.eq(0), i.eq(0), p.eq(0), j.eq(0),
                                 lane.eq(0), index.eq(self.index_base), pass_base.eq(self.index_base)]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += [loading.eq(1), self.upd.read.eq(1)]
                m.next = "WORDS"
            with m.State("WORDS"):
                m.d.comb += [feeding.eq(1), clearing.eq(lane == 0)]
                with m.If(advance):
                    m.d.sync += [j.eq(j + 1), lane.eq(lane + 1), index.eq(index + 1)]
                    with m.If(last_word):
                        m.next = "FLUSH"
                    with m.Elif(address_end):
                        next_base = pass_base + Mux(last_pass, self.group_step, words)
                        m.d.sync += [g.eq(g + 1), i.eq(Mux(last_pass, 0, i + 1)), p.eq(0), j.eq(0),
                                     lane.eq(0), index.eq(next_base), pass_base.eq(next_base)]
                        m.next = "LOAD"
                    with m.Elif(row_end):
                        m.d.sync += [
                            p.eq(p + 1), j.eq(0),
                            lane.eq(lane + Mux(last_pass, words - self.last_words + 1, 1)),
                            index.eq(index + Mux(last_pass, self.index_stride - self.last_words + 1,
                                                 self.index_stride - words + 1)),
                        ]
            with m.State("FLUSH"):
                with m.If(self.done):
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        m.d.sync += Assert(~(self.update & self.busy), "gradient buffer: update strobe while updating")

        # Word select, then gsum * lr (three multipliers, LATENCY enabled cycles).
        gsum = sums[lane]
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
                     side.extra.last.eq(last_word)]
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
