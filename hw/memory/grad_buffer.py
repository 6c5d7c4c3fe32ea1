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
sums are exact: the mapping guarantees they fit 48 bits (ACC_BITS). With ``sum_bits``
below that (``Formats.grad_bits``) the beats arrive already rounded to the narrow sums'
grid (hw.memory.grad_rounding.GradientRounder, in front of the buffer) and every add
saturates to ``sum_bits``, as ``numerics.accumulate`` defines. Padded words -
rows past ``out_channels`` in the last group, input channels past S in the last pass
(zeros from the PG engine) - are summed like the others but never read by the
update, and cleared with their address, so whatever they carry changes nothing.

Memory: (P*words*``sum_bits`` bits, G*v), one read port (the write enables of all lanes are
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
in_offset + s) * K*K + ky*K + kx``. The walk (below) steps the index with adders: per
chunk of words, per chunk of banks (+in_total*K*K per bank), and per address from a
pass base that steps +b*K*K per pass and (P*in_total - (v-1)*b)*K*K from a group's
last pass to the next group.
Padded words are not updated: banks past ``out_channels`` in the last group and channels
past S in the last pass. Biases are the same with IC = K = 1 (index = global output
channel): a second GradientBuffer with ``bias=True, in_channels=1, kernel=1,
in_total=1`` and the bias shift / constant / tensor id (``from_slice(..., bias=True)``)
takes the PG engine's ``bias_grads`` beats (the P errors of a group, one word per row;
``row`` = g, zero errors on passes i > 0) and writes a one-word-per-row ParamRam.

Lanes
-----
``lanes`` (the slice's ``update_lanes``, chosen by the mapper from the multipliers the
engines leave) words are updated per cycle, a chunk at a time
(``mapping.nodeconfig.update_chunk``): ``lanes`` consecutive words of one bank's row
when below ``words``, else whole rows of ``lanes / words`` banks. The walk goes address
by address, chunk by chunk (banks outer, words inner); chunks holding only padding are
skipped, padded words of a chunk masked. The index of lane (a, c) is the chunk's index
+ a*in_total*K*K + c. Each lane registers its selected sum and forms ``gsum * lr`` from
that register with three 18x17 multipliers
(hw.arith.mult, 48-bit gsum split 17 + 17 + 14 bits; 3 MULT18X18D on ECP5, 3 DSP48E1 on
xc7) whose partial products are added as they enter the StochasticRounder (``lanes``
lanes, 64-bit accumulators); the rounded steps are subtracted and saturated on the way
into the ParamRam, one masked write of the chunk's words. An accumulator address is
cleared in its first chunk's cycle.

Both memories' rows of an address are read once and held while its chunks are taken.
The LPRAM is read through its FP port (port A), idle while the update gate holds FP, so
the next address is read in the current one's last chunk cycle while the results are
written through port B: from the strobe to ``done`` (which pulses once, with the last
word written) the update takes ``chunks + 5 + rounder latency`` cycles
(``LayerSlice.update_cycles``; latency 10 for shift > 0). A bias RAM's port A belongs
to the SFU, still busy with the last sample when the update starts, so the bias update
(``shared``, one lane) reads through port B in a cycle of its own per address, when no
result is written: ``O + G + 5 + rounder latency`` cycles. Meanwhile ``busy`` is high.

``i`` is always ready: no beat may arrive from the strobe to ``done``, and the ParamRam's
``upd`` port belongs to the update while ``busy``: PG must have delivered the mini-batch's
last beat and FP (and EB, when ``shared``) must be idle, as hw.memory.update_gate arranges
(asserted here and inside ParamRam).

Two sums
--------
An ``OverlappedGradientBuffer`` (the update that does not stop the engines,
docs/weight_versions.md; ``from_slice`` picks it for such a slice) keeps two sums memories:
PG's beats go into one, switching after each mini-batch's last beat (``overlapped_batch``
samples of ``sample_beats`` beats, counted here), while the walk reads and clears the other; so beats keep arriving during the walk, only never into the sums
it walks (asserted; hw.memory.update_gate.OverlappedGate arranges it). The walk reads the
weights from a VersionedParamRam's copy of its own, so a bias buffer is not ``shared`` then.
"""

import math
from types import SimpleNamespace

from amaranth.hdl import Array, Assert, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping import numerics
from mapping.memories import bias_steps
from mapping.nodeconfig import update_chunk

from ..arith.mult import Multiplier
from ..arith.rounding import (INDEX_BITS, SAMPLE_BITS, StochasticRounder,
                              saturate, saturating_add)
from ..base.checks import positive, refuse
from ..base.counter import ModuloCounter, next_value
from ..base.layouts import bias_grads_layout, flat_elements, grads_layout, named
from ..base.ram import NO_RW_CHECK, ram_attrs, read_register
from ..base.signatures import UpdatePortSignature
from .param_ram import WeightLayout, WeightWalk

STEP_BITS = 64  # lr * gsum: |gsum| < 2**47 and lr < 2**16: the product fits a signed 64-bit value
LR_BITS = numerics.WORD_BITS + 1  # the unsigned 16-bit constant as a signed operand
CHUNK_BITS = 17  # gsum is split so every multiplier operand fits 18 signed bits
OPERAND_STAGES = 1  # each lane's selected sum is registered before its multipliers


def lr_product(m, name, gsum, lr, family, enable):
    """``gsum * lr`` (a signed ACC_BITS sum, the unsigned update constant) from three 18x17
    multipliers (``name``_0 .. _2, hw.arith.mult: 48-bit gsum split 17 + 17 + 14 bits), their
    partial products added as they leave; ``Multiplier.latency`` cycles of ``enable``."""
    parts = [gsum[0:CHUNK_BITS], gsum[CHUNK_BITS:2 * CHUNK_BITS], gsum[2 * CHUNK_BITS:].as_signed()]
    product = 0
    for n, part in enumerate(parts):
        mult = m.submodules[f"{name}_{n}"] = Multiplier(CHUNK_BITS + 1, LR_BITS, family=family)
        m.d.comb += [mult.a.eq(part), mult.b.eq(Const(lr, signed(LR_BITS))), mult.en.eq(enable)]
        product = product + mult.p.shift_left(n * CHUNK_BITS)
    return product


def _chunks_below(limit, size):
    """The chunk counts n with n * size < ``limit``: those below ceil(limit / size), at least 0."""
    return max(0, -(-limit // size))


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
    ``lanes``: words updated per cycle (module docstring, "Lanes"); 1 for biases.
    ``family``: passed to hw.arith.mult (ECP5 instantiates MULT18X18D) and choosing the sums'
    ``ram_style`` (``mapping.resources.ram_style``); None simulates. ``sum_bits``: the sums'
    width (one of ``numerics.GRAD_BITS``; below ACC_BITS every add saturates).
    """

    def __init__(self, *, out_channels, in_channels, kernel, banks, shift, lr, seed, tensor, tiles=None,
                 out_offset=0, in_offset=0, in_total=None, bias=False, lanes=1, family=None,
                 sum_bits=numerics.ACC_BITS):
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
        try:
            self.chunk_banks, self.chunk_words = update_chunk(lanes, banks, self.words)
        except ValueError as error:
            refuse(self, f"gradient buffer: {error}")
        if sum_bits not in numerics.GRAD_BITS:
            refuse(self, f"gradient buffer: sum_bits = {sum_bits!r} is not one of "
                         f"{', '.join(map(str, numerics.GRAD_BITS))}")
        self.sum_bits = sum_bits
        if bias and lanes != 1:
            refuse(self, f"gradient buffer: a bias buffer updates one word per cycle, not {lanes}")
        self.out_channels, self.banks, self.bias, self.family = out_channels, banks, bias, family
        self.lanes = lanes
        # Chunks per address: of banks (pn counts them) and of each bank's words (jn).
        self.bank_chunks, self.word_chunks = -(-banks // self.chunk_banks), -(-self.words // self.chunk_words)
        # A bias RAM's FP-side port belongs to the SFU, busy with the last sample's outputs
        # when the update starts: the bias update reads and writes through port B alone,
        # unless the walk reads a copy of its own (``walk_has_own_copy``).
        self.shared = bias and not self.walk_has_own_copy
        kk = kernel * kernel
        self.index_base = (out_offset * in_total + in_offset) * kk
        self.index_stride = in_total * kk  # from one output channel to the next
        # From a group's last pass base to the next group's first (one pass steps b*K*K).
        self.group_step = (banks * in_total - (self.passes - 1) * self.tiles) * kk
        # The last pass's real words and the last group's real banks: the update skips the rest.
        self.last_words = (in_channels - (self.passes - 1) * self.tiles) * kk
        self.last_banks = out_channels - (self.groups - 1) * banks
        self.rounder = StochasticRounder(lanes=lanes, shift=shift, seed=seed, tensor=tensor,
                                         acc_width=STEP_BITS, extra=self._extra_layout())
        self.lr = lr
        beat = bias_grads_layout(self.rows, banks) if bias else grads_layout(self.rows, banks, self.words)
        super().__init__({
            "i": In(stream.Signature(beat)),
            "update": In(1),
            "batch": In(SAMPLE_BITS),
            "busy": Out(1),
            "done": Out(1),
            "upd": Out(UpdatePortSignature(self.rows, banks, self.words, shared=self.shared)),
        })

    def _extra_layout(self):
        """What travels with a chunk through the rounder: its words' old values, its place in
        the walk (``at``: which of its words are real follows from it) and its destination."""
        bank_chunks, word_chunks = self.bank_chunks, self.word_chunks
        at = data.StructLayout({"pn": range(bank_chunks), "jn": range(word_chunks), "last_group": 1,
                                "last_pass": 1})
        return data.StructLayout({"w": data.ArrayLayout(signed(numerics.WORD_BITS), self.lanes),
                                  "at": at, "addr": range(self.rows), "chunk": range(bank_chunks * word_chunks),
                                  "last": 1})

    walk_has_own_copy = False  # the weights the walk reads are the engines' (ParamRam)

    @classmethod
    def from_slice(cls, layer_slice, formats, training, *, bias=False, family=None):
        """The LGB of a slice's weights (P and b of its FP engine), or (``bias=True``) of its biases:
        an OverlappedGradientBuffer where the slice's update does not stop its engines."""
        s = layer_slice
        if bias and not s.owns_biases:
            raise ValueError(f"gradient buffer: the {s.mode} slice of layer '{s.layer}' on channels "
                             f"{s.in_range}->{s.out_range} owns no biases")
        (out_lo, out_hi), pixels = s.sfu_range if bias else s.out_range, s.out_shape[1] * s.out_shape[2]
        common = dict(out_channels=out_hi - out_lo, banks=s.bias_banks if bias else s.fp.ces, seed=formats.seed,
                      out_offset=out_lo, family=family, sum_bits=formats.grad_bits)
        if s.overlapped_update:  # PG's beats: one per address (the slice's, for biases) and output pixel
            cls = OverlappedGradientBuffer
            common.update(overlapped_batch=training.batch,
                          sample_beats=pixels * (math.prod(bias_steps(s)) if bias else WeightLayout.from_slice(s).rows))
        if not bias:
            return cls(in_channels=s.in_channels, kernel=s.kernel, tiles=s.fp.tiles, in_offset=s.group_in_range[0],
                       in_total=s.in_shape[0] // s.groups, shift=formats.weight_update_shift,
                       lr=training.lr_constant, lanes=s.update_lanes,
                       tensor=numerics.tensor_id(s.position, numerics.WEIGHT_UPDATE), **common)
        return cls(in_channels=1, kernel=1, in_total=1, shift=formats.bias_update_shift,
                   lr=training.bias_lr_constant, bias=True,
                   tensor=numerics.tensor_id(s.position, numerics.BIAS_UPDATE), **common)

    def _memory(self, m, name, layout):
        mem = m.submodules[name] = memory.Memory(shape=layout, depth=self.rows, init=[],
                                                 attrs=NO_RW_CHECK | ram_attrs(self.rows, self.family))
        # One enable per lane, all driven together: in RTLIL (where enables are per bit)
        # the same as one enable, but Amaranth's simulator expands a single enable into one
        # Python expression per data bit, which Python cannot compile beyond ~2500 bits.
        return mem, mem.write_port(granularity=1)

    def _sums(self, m, layout, accept, reading, read_addr):
        """The sums' memory, the part the variants of the buffer differ in. Returns ``walked``
        (the walk's read), ``added`` (the read stage 1 adds to), ``same`` (the beat entering
        adds into the sums stage 1 adds into), ``into_walked`` (PG's beat adds into the sums
        the walk reads) and ``writes(s1_valid, clearing)``: each memory's write port with when
        it takes stage 1's sum and when the walk clears it. One memory here: PG and the walk
        take turns."""
        mem, write = self._memory(m, "mem", layout)
        read = read_register(m, mem, Mux(self.busy, read_addr, self.i.payload.row), accept | reading)
        return SimpleNamespace(walked=read, added=read, same=Const(1), into_walked=Const(1),
                               writes=lambda s1_valid, clearing: [(write, s1_valid, clearing)])

    def elaborate(self, platform):
        m = Module()
        m.submodules.rounder = rounder = self.rounder
        words, lanes = self.words, self.banks * self.words
        sum_layout = data.ArrayLayout(signed(self.sum_bits), lanes)

        # Update state: address a = g*v + i (``g`` holds a), pass i, and the chunk at the
        # address: bank chunk pn (banks pn*cb ..) and word chunk jn (words jn*cw ..), flat
        # number ``chunk`` (= pn * word_chunks + jn, kept in a register of its own: it selects
        # every lane's operands for the update multipliers). ``index`` is the noise index of the
        # chunk's first word, ``bank_base`` of word 0 of its first bank, ``pass_base`` of word 0
        # of bank 0 at the address.
        cb, cw = self.chunk_banks, self.chunk_words
        bank_chunks, word_chunks = self.bank_chunks, self.word_chunks
        g, i = Signal(range(self.rows), name="g"), Signal(range(self.passes), name="i")
        pn, jn = Signal(range(bank_chunks), name="pn"), Signal(range(word_chunks), name="jn")
        # Assigned through their next values: the walk's flags below are registers of them.
        g_next, i_next, pn_next, jn_next = (next_value(m, r) for r in (g, i, pn, jn))
        chunk = Signal(range(bank_chunks * word_chunks))
        # chunk == 0, kept as a register: it clears an address's sums, so it drives the write
        # address and enable of every accumulator RAM cell (the CI bitstream's worst path ran
        # from ``chunk`` through the comparison into that fanout).
        first_chunk = Signal(init=1)
        index, bank_base, pass_base = Signal(INDEX_BITS), Signal(INDEX_BITS), Signal(INDEX_BITS)
        batch = Signal(SAMPLE_BITS)
        loading, feeding, clearing, reading = Signal(), Signal(), Signal(), Signal()
        advance = rounder.i.ready  # the whole update pipeline moves together

        # The walk's position: chunks of padding only (past S in the last pass, past O in the
        # last group) are skipped, padded words within a chunk masked. Its flags are registers,
        # loaded from the position's next value, and so is the next address: compared in front
        # of the read of the next address, ``jn`` ran into every LPRAM port-A cell's address
        # and into the FP engine's weight register (node 1's worst path at 100 MHz, 1.3 ns
        # logic, 7.6 ns routing).
        def flags(g, i, pn, jn):
            last_pass, last_group = i == self.passes - 1, g >= self.rows - self.passes
            row_end = jn == Mux(last_pass, -(-self.last_words // cw), word_chunks) - 1
            address_end = row_end & (pn == Mux(last_group, -(-self.last_banks // cb), bank_chunks) - 1)
            return Cat(last_pass, last_group, row_end, address_end, address_end & (g == self.rows - 1))

        walk_flags = Signal(5)
        last_pass, last_group, row_end, address_end, last_word = walk_flags
        following = Signal(range(self.rows + 1))  # g + 1
        m.d.sync += [walk_flags.eq(flags(g_next, i_next, pn_next, jn_next)), following.eq(g_next + 1)]
        with m.If(self.busy):
            m.d.sync += Assert((walk_flags == flags(g, i, pn, jn)) & (following == g + 1),
                               "gradient buffer: the walk's flags disagree with its position")
        # Both memories' reads of an address are held while its chunks are taken. The next
        # address is read in the last chunk's cycle (through the ParamRam's idle FP port), or,
        # ``shared``, in a LOAD cycle of its own.
        read_addr = Mux(loading, g, following)
        m.d.comb += reading.eq(loading if self.shared else
                               loading | (feeding & advance & address_end & ~last_word))

        # Accumulation, stage 0: accept a beat and read its address. The buffer never refuses
        # a beat: it adds one per cycle, and the update gate lets none arrive from the strobe
        # to ``done`` (asserted below). A ready from the update's state ran through the PG
        # engine's handshakes into its window and error FIFOs (node 0's worst path at 125 MHz).
        accept = self.i.valid
        m.d.comb += self.i.ready.eq(1)
        store = self._sums(m, sum_layout, accept, reading, read_addr)
        sums = store.walked
        # Stage 1: add and write back, forwarding the previous cycle's write.
        values_shape = self.i.payload.shape()["values"].shape
        s1_valid, s1_row = Signal(), Signal(range(self.rows))
        s1_values = Signal(values_shape, reset_less=True)
        # ``forward``: stage 1 holds the row the previous cycle wrote, whose read is stale. Compared
        # a cycle ahead (the beat entering against the one leaving), as a register: the compare
        # in front of the select of every sum bit, on into the adders and the RAM's write data,
        # was the CI bitstream's worst path (8 ns of routing).
        forward = Signal()
        prev_sum, new_sum = Signal(sum_layout, reset_less=True), Signal(sum_layout)
        same_row = (self.i.payload.row == s1_row) & store.same
        m.d.sync += [s1_valid.eq(accept), forward.eq(accept & s1_valid & same_row), prev_sum.eq(new_sum)]
        with m.If(accept):
            m.d.sync += [s1_row.eq(self.i.payload.row), s1_values.eq(self.i.payload.values)]
        old = flat_elements(named(m, Mux(forward, prev_sum, store.added), sum_layout, "old_sums").as_value(), sum_layout)
        terms = flat_elements(s1_values.as_value(), values_shape)
        if self.sum_bits == numerics.ACC_BITS:
            sums_added = [old_sum + term for old_sum, term in zip(old, terms)]
        else:
            sums_added = [saturating_add(old_sum, term, self.sum_bits) for old_sum, term in zip(old, terms)]
        m.d.comb += new_sum.as_value().eq(Cat(*(value[:self.sum_bits] for value in sums_added)))
        # An address's sums are cleared in its first chunk's cycle (their read is held).
        for write, written, clears in store.writes(s1_valid, clearing):
            m.d.comb += [
                write.en.eq((written | clears).replicate(lanes)),
                write.addr.eq(Mux(clears, g, s1_row)),
                write.data.eq(Mux(clears, 0, new_sum)),
            ]
        during = (self.busy | self.update) & store.into_walked
        m.d.sync += [  # checked at clock edges
            Assert(~(self.i.valid & during), "gradient buffer: a beat during the update"),
            Assert(~(accept & (self.i.payload.row > self.rows - 1)),
                   "gradient buffer: gradient row beyond the slice's addresses"),
        ]

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.update):
                    m.d.comb += [g_next.eq(0), i_next.eq(0), pn_next.eq(0), jn_next.eq(0)]
                    m.d.sync += [batch.eq(self.batch), chunk.eq(0), first_chunk.eq(1), index.eq(self.index_base),
                                 bank_base.eq(self.index_base), pass_base.eq(self.index_base)]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += loading.eq(1)
                m.next = "WORDS"
            with m.State("WORDS"):
                m.d.comb += [feeding.eq(1), clearing.eq(first_chunk)]
                with m.If(advance):
                    with m.If(last_word):
                        m.next = "FLUSH"
                    with m.Elif(address_end):
                        next_base = pass_base + Mux(last_pass, self.group_step, words)
                        m.d.comb += [g_next.eq(following), i_next.eq(Mux(last_pass, 0, i + 1)), pn_next.eq(0),
                                     jn_next.eq(0)]
                        m.d.sync += [chunk.eq(0), first_chunk.eq(1), index.eq(next_base), bank_base.eq(next_base),
                                     pass_base.eq(next_base)]
                        if self.shared:
                            m.next = "LOAD"
                    with m.Elif(row_end):
                        next_bank = bank_base + cb * self.index_stride
                        m.d.comb += [pn_next.eq(pn + 1), jn_next.eq(0)]
                        m.d.sync += [chunk.eq(chunk - jn + word_chunks),
                                     first_chunk.eq(0), index.eq(next_bank), bank_base.eq(next_bank)]
                    with m.Else():
                        m.d.comb += jn_next.eq(jn + 1)
                        m.d.sync += [chunk.eq(chunk + 1), first_chunk.eq(0), index.eq(index + cw)]
            with m.State("FLUSH"):
                with m.If(self.done):
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        m.d.sync += [Assert(~(self.update & self.busy), "gradient buffer: update strobe while updating"),
                     Assert(first_chunk == (chunk == 0), "gradient buffer: first_chunk out of step with chunk")]

        # Lane (a, c) of a chunk takes word jn*cw + c of bank pn*cb + a: its sum and old
        # weight are selected by the chunk number into registers (OPERAND_STAGES), and
        # gsum * lr formed by three multipliers (their LATENCY enabled cycles). Without those
        # registers ``chunk``'s select ran on into the multipliers' input registers, spread
        # over the device's multiplier sites (0.9 ns of logic, 8.8 ns of routing: node 0 of
        # the default chain at 125 MHz, 153 of its 156 multipliers in use).
        def select(a, c, term, width):
            candidates = [term(p * cb + a, j * cw + c) if p * cb + a < self.banks and j * cw + c < words
                          else Const(0, width) for p in range(bank_chunks) for j in range(word_chunks)]
            if len(candidates) == 1:
                return candidates[0]
            # A mux on the chunk number: word_select would scale it by a width of 48 bits, a
            # multiply Yosys gave one of the ECP5's multipliers on node 0 of the default chain.
            return Array(candidates)[chunk].as_signed()

        # The walk's position travels with the chunk, and each lane's mask is formed from it on
        # the way into the ParamRam: formed from ``pn`` and ``jn`` themselves, the masks of every
        # lane pulled those registers apart, and conv1's ``jn`` into the enable of its ``pn`` was
        # node 0's worst path at 125 MHz (1.0 ns logic, 8.4 ns routing).
        side_layout = data.StructLayout({"valid": 1, "index": INDEX_BITS, "extra": self._extra_layout()})
        side = Signal(side_layout)
        at = side.extra.at
        m.d.comb += [side.valid.eq(feeding), side.index.eq(index), side.extra.addr.eq(g),
                     side.extra.chunk.eq(chunk), side.extra.last.eq(last_word), at.pn.eq(pn), at.jn.eq(jn),
                     at.last_group.eq(last_group), at.last_pass.eq(last_pass)]
        upd_words = flat_elements(self.upd.data.as_value(), self.upd.data.shape())
        products, offsets = [], []
        for a in range(cb):
            for c in range(cw):
                lane = a * cw + c
                gsum = Signal(signed(numerics.ACC_BITS), name=f"gsum{lane}")
                with m.If(advance):
                    m.d.sync += gsum.eq(select(a, c, lambda p, j: sums[p * words + j], self.sum_bits))
                m.d.comb += side.extra.w[lane].eq(select(a, c, lambda p, j: upd_words[p * words + j],
                                                         numerics.WORD_BITS))
                products.append(lr_product(m, f"mult{lane}", gsum, self.lr, self.family, advance))
                offsets.append(a * self.index_stride + c)
        for _ in range(OPERAND_STAGES + Multiplier.latency):
            delayed = Signal(side_layout)
            with m.If(advance):
                m.d.sync += delayed.eq(side)
            side = delayed
        m.d.comb += [rounder.i.valid.eq(side.valid), rounder.i.payload.sample.eq(batch),
                     rounder.i.payload.extra.eq(side.extra)]
        for lane, (product, offset) in enumerate(zip(products, offsets)):
            m.d.comb += [rounder.i.payload.acc[lane].eq(product),
                         rounder.i.payload.index[lane].eq(side.index + offset)]

        # The rounded steps leave into the ParamRam, each lane into its word of the chunk
        # (``shared``: not in a cycle the update reads).
        out = rounder.o.payload
        blocked = reading if self.shared else Const(0)
        new_words = [named(m, saturate(out.extra.w[lane] - out.value[lane], numerics.WORD_BITS)[:numerics.WORD_BITS],
                           numerics.WORD_BITS, f"new_word{lane}") for lane in range(self.lanes)]
        # Lane (a, c) holds a real word when pn*cb + a < real_banks and jn*cw + c < real_words,
        # as bounds on the chunk counts: no multiply.
        at = out.extra.at
        real = [named(m, (at.pn < Mux(at.last_group, _chunks_below(self.last_banks - a, cb),
                                      _chunks_below(self.banks - a, cb)))
                      & (at.jn < Mux(at.last_pass, _chunks_below(self.last_words - c, cw), _chunks_below(words - c, cw))),
                      1, f"real{a}_{c}")
                for a in range(cb) for c in range(cw)]
        value, mask = [], []
        for p in range(self.banks):
            for j in range(words):
                lane = (p % cb) * cw + j % cw
                value.append(new_words[lane])
                mask.append(real[lane] & (out.extra.chunk == (p // cb) * word_chunks + j // cw))
        m.d.comb += [
            rounder.o.ready.eq(~blocked),
            self.upd.read.eq(reading),
            self.upd.read_addr.eq(read_addr),
            self.upd.write.eq(rounder.o.valid & ~blocked),
            self.upd.write_addr.eq(out.extra.addr),
            self.upd.mask.eq(Cat(*mask)),
            self.upd.value.eq(Cat(*value)),
            self.done.eq(self.upd.write & out.extra.last),
        ]
        return m


class OverlappedGradientBuffer(GradientBuffer):
    """A GradientBuffer with two sums (module docstring, "Two sums"): PG adds the mini-batches
    of ``overlapped_batch`` samples of ``sample_beats`` beats into one sums memory while the
    walk reads and clears the other."""

    walk_has_own_copy = True  # VersionedParamRam

    def __init__(self, *, overlapped_batch, sample_beats, **options):
        if not (overlapped_batch >= 1 and sample_beats >= 1):
            refuse(self, f"gradient buffer: overlapped_batch = {overlapped_batch} samples of sample_beats = "
                         f"{sample_beats} beats are not a mini-batch")
        self.overlapped_batch, self.sample_beats = overlapped_batch, sample_beats
        super().__init__(**options)

    def _sums(self, m, layout, accept, reading, read_addr):
        """PG adds into ``adding`` (the next after each mini-batch's last beat, counted) while the
        walk reads and clears ``walked`` (the next after each update)."""
        mems, writes = zip(*(self._memory(m, f"sums{n}", layout) for n in (0, 1)))
        adding, s1_adding, walked = Signal(), Signal(), Signal()
        last_beat = ModuloCounter(m, self.overlapped_batch * self.sample_beats, accept).last
        with m.If(accept & last_beat):
            m.d.sync += adding.eq(~adding)
        with m.If(self.done):
            m.d.sync += walked.eq(~walked)
        with m.If(accept):
            m.d.sync += s1_adding.eq(adding)
        data = []
        for n, mem in enumerate(mems):
            walking = self.busy & (walked == n)
            data.append(read_register(m, mem, Mux(walking, read_addr, self.i.payload.row),
                                      Mux(walking, reading, accept & (adding == n))))
        return SimpleNamespace(
            walked=named(m, Mux(walked, data[1], data[0]), layout, "walked_sums"),
            added=named(m, Mux(s1_adding, data[1], data[0]), layout, "added_sums"),
            # a mini-batch's last beat and the next one's first add into different sums
            same=adding == s1_adding, into_walked=adding == walked,
            writes=lambda s1_valid, clearing: [(write, s1_valid & (s1_adding == n), clearing & (walked == n))
                                               for n, write in enumerate(writes)])
