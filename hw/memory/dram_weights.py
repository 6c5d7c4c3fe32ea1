"""Fully connected weights kept in the node's DRAM (paper 6.3.1; mapping/perf.py, "FC dataflow").

A slice whose ``weights_offchip`` is set holds none of its weights on chip. Its R = G*v
LPRAM rows (``hw.memory.param_ram.WeightLayout``: address g*v + i, P banks of b*K*K words)
circulate through a :class:`~hw.memory.dram_fifo.DramFifo` of exactly R beats, preloaded with
the initial weights (the DRAM's words 0 .. R-1 hold rows 0 .. R-1): every *pass* pops the R
rows in address order and pushes each one back, updated or not, so row r is always at DRAM
word r and the queue never holds more than R.

Pass t (t = 0, 1, ...; k the slice's ``fp_stale``, mini-batch B = 1) feeds each row, as it
is popped, to

- the FP engine for sample t (when there is one: ``total_samples`` is 0, unbounded, or
  t < ``total_samples``),
- the EB engine for sample t - k and the :class:`RowUpdater` with PG's gradient of sample
  t - k (when 0 <= t - k < ``total_samples``, or unbounded): the row goes back to DRAM
  as ``w - requantize(gsum * lr)``, exactly the update of mini-batch t - k that
  ``hw.memory.grad_buffer.GradientBuffer`` applies to an LPRAM, and otherwise unchanged.

So FP of sample s reads version s - k and EB of sample s version s, as
docs/weight_versions.md fixes for every slice: one DRAM read of each weight feeds both
engines and the update, and one write returns it (2 + 2 bytes per weight per sample). A pass
starts while it has work; the engines take a row only with their own sample's window, so a
pass waits for whichever of the samples t and t - k arrives last. The engines read rows in
address order: FP and PG always do (g-major), EB in its ``group_major`` walk.

``stored`` pulses when the last row of a pass that applied an update is in DRAM: the
slice counts an update as done only then (``updates``), so a testbench that waits for the
updates finds the trained weights in DRAM.
"""

from amaranth.hdl import Assert, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping import numerics

from ..arith.mult import Multiplier
from ..arith.rounding import INDEX_BITS, SAMPLE_BITS, StochasticRounder, saturate
from ..base.checks import refuse
from ..base.counter import ModuloCounter
from ..base.handshake import fork
from ..base.layouts import bank_layout, flat_elements, grads_layout, named, packed_words
from ..base.signatures import DramQueueSignature
from .dram_fifo import DramFifo
from .grad_buffer import OPERAND_STAGES, STEP_BITS, lr_product
from .param_ram import WeightLayout
from .update_gate import COUNT_BITS


def update_layout(banks, words):
    """A row on its way to the updater: the P rows of an address and whether the pass updates it."""
    return data.StructLayout({"rows": bank_layout(banks, words), "update": 1})


class RowUpdater(wiring.Component):
    """The SGD update of rows streaming past, one address (P*b*K*K words) per cycle.

    ``rows``: every row of a pass in address order, flagged ``update`` where the pass applies a
    gradient; ``grads``: PG's beats of that sample, one per flagged row, in the same order
    (values rounded to the sums' grid where ``sum_bits`` is narrow, as GradientRounder does);
    ``o``: the rows to write back. A flagged row's word (o, s, ky, kx) becomes
    ``saturate(w - requantize(gsum * lr, shift, seed, tensor, batch, index))`` with gsum its
    product (saturated to ``sum_bits``), ``batch`` the number of flagged passes before this one
    and ``index`` the word's place in the layer's (OC, IC, K, K) tensor, exactly as
    GradientBuffer updates an LPRAM; an unflagged row takes gsum = 0, which rounds to 0, so it
    leaves unchanged. Padded words (past O, past S) have zero products and stay as they are.
    """

    def __init__(self, layout, *, shift, lr, seed, tensor, out_offset, in_offset, in_total,
                 sum_bits=numerics.ACC_BITS, family=None):
        self.layout, self.lr, self.family, self.sum_bits = layout, lr, family, sum_bits
        kk = layout.kernel * layout.kernel
        self.words = layout.tiles * kk
        self.index_base = (out_offset * in_total + in_offset) * kk
        self.index_stride = in_total * kk
        self.group_step = (layout.banks * in_total - (layout.passes - 1) * layout.tiles) * kk
        last_index = (out_offset + layout.out_channels) * in_total * kk - 1
        if last_index >= 1 << INDEX_BITS:
            refuse(self, f"row updater: weight index {last_index} exceeds {INDEX_BITS} bits")
        self.lanes = layout.banks * self.words
        self.side = data.StructLayout({"w": data.ArrayLayout(signed(numerics.WORD_BITS), self.lanes)})
        self.rounder = StochasticRounder(lanes=self.lanes, shift=shift, seed=seed, tensor=tensor,
                                         acc_width=STEP_BITS, extra=self.side)
        super().__init__({
            "rows": In(stream.Signature(update_layout(layout.banks, self.words))),
            "grads": In(stream.Signature(grads_layout(layout.rows, layout.banks, self.words))),
            "o": Out(stream.Signature(bank_layout(layout.banks, self.words))),
        })

    def elaborate(self, platform):
        m = Module()
        layout, lanes = self.layout, self.lanes
        rounder = m.submodules.rounder = self.rounder
        advance = rounder.i.ready
        beat, update = self.rows.payload, self.rows.payload.update
        accept = self.rows.valid & (~update | self.grads.valid) & advance
        m.d.comb += [self.rows.ready.eq(accept), self.grads.ready.eq(accept & update)]

        # The walk: address g*v + i of the row taken, its noise index, the update's number.
        address = ModuloCounter(m, layout.rows, accept)
        m.d.sync += Assert(~(accept & update) | (self.grads.payload.row == address.value),
                           "row updater: a gradient beat for another row")
        in_pass = ModuloCounter(m, layout.passes, accept)
        base, batch = Signal(INDEX_BITS, init=self.index_base), Signal(SAMPLE_BITS)
        with m.If(accept):
            m.d.sync += base.eq(Mux(address.last, self.index_base,
                                    base + Mux(in_pass.last, self.group_step, self.words)))
            with m.If(address.last & update):
                m.d.sync += batch.eq(batch + 1)

        side_layout = data.StructLayout({"valid": 1, "index": INDEX_BITS, "sample": SAMPLE_BITS,
                                         "extra": self.side})
        side = Signal(side_layout)
        m.d.comb += [side.valid.eq(accept), side.index.eq(base), side.sample.eq(batch),
                     side.extra.w.eq(beat.rows.as_value())]
        terms = flat_elements(self.grads.payload.values.as_value(), self.grads.payload.shape()["values"].shape)
        products = []
        for lane, term in enumerate(terms):
            gsum = Signal(signed(numerics.ACC_BITS), name=f"gsum{lane}")
            kept = term if self.sum_bits == numerics.ACC_BITS else saturate(term, self.sum_bits)
            with m.If(advance):
                m.d.sync += gsum.eq(Mux(update, kept, 0))
            products.append(lr_product(m, f"mult{lane}", gsum, self.lr, self.family, advance))
        for _ in range(OPERAND_STAGES + Multiplier.latency):
            delayed = Signal(side_layout)
            with m.If(advance):
                m.d.sync += delayed.eq(side)
            side = delayed
        m.d.comb += [rounder.i.valid.eq(side.valid), rounder.i.payload.sample.eq(side.sample),
                     rounder.i.payload.extra.eq(side.extra)]
        for lane, product in enumerate(products):
            bank, word = divmod(lane, self.words)
            m.d.comb += [rounder.i.payload.acc[lane].eq(product),
                         rounder.i.payload.index[lane].eq(side.index + bank * self.index_stride + word)]

        out = rounder.o.payload
        new_words = [saturate(out.extra.w[lane] - out.value[lane], numerics.WORD_BITS)[:numerics.WORD_BITS]
                     for lane in range(lanes)]
        m.d.comb += [self.o.payload.eq(named(m, Cat(*new_words), self.o.payload.shape(), "new_rows")),
                     self.o.valid.eq(rounder.o.valid), rounder.o.ready.eq(self.o.ready)]
        return m


class DramWeights(wiring.Component):
    """The rows of a slice of ``layout`` in DRAM and their passes (module docstring).

    Ports: ``fp`` and ``eb`` (``needs_eb``) the rows for the engines' weight sources (as a host's
    row streams, hw/balance/weight_stream.WeightSource), ``grads`` PG's beats, ``total_samples``,
    ``stored`` (a pulse per update in DRAM), ``dram`` the queue's DRAM port.
    ``fp_stale``: k. ``updater``: the RowUpdater's options.
    """

    def __init__(self, layout, *, fp_stale, needs_eb=True, family=None, **updater):
        if fp_stale < 0:
            refuse(self, f"FC weights in DRAM: fp_stale = {fp_stale} must be at least 0")
        self.layout, self.fp_stale, self.needs_eb = layout, fp_stale, needs_eb
        self.updater = RowUpdater(layout, family=family, **updater)
        words = self.updater.words
        self.queue = DramFifo(bank_layout(layout.banks, words), layout.rows, preloaded=layout.rows, family=family)
        rows = stream.Signature(bank_layout(layout.banks, words))
        members = {"fp": Out(rows), "grads": In(stream.Signature(grads_layout(layout.rows, layout.banks, words))),
                   "total_samples": In(COUNT_BITS), "stored": Out(1),
                   "dram": Out(DramQueueSignature(self.queue.width, layout.rows))}
        if needs_eb:
            members["eb"] = Out(rows)
        super().__init__(members)

    @classmethod
    def from_slice(cls, layer_slice, formats, training, *, family=None):
        """The rows of a ``mapping.nodeconfig.LayerSlice`` whose ``weights_offchip`` is set (its
        LPRAM layout, its LGB's update)."""
        s = layer_slice
        return cls(WeightLayout.from_slice(s), fp_stale=s.fp_stale, needs_eb=s.needs_eb, family=family,
                   shift=formats.weight_update_shift, lr=training.lr_constant, seed=formats.seed,
                   tensor=numerics.tensor_id(s.position, numerics.WEIGHT_UPDATE), out_offset=s.out_range[0],
                   in_offset=s.in_range[0], in_total=s.in_shape[0], sum_bits=formats.grad_bits)

    def initial_words(self, weights):
        """The DRAM's first R words for the slice's ``weights`` (O, S, K, K) or (O, S*K*K): row r
        at word r, packed as the rows stream (``bank_layout``)."""
        return packed_words(self.layout.fold(weights))

    def _has_work(self, t):
        """(FP of sample t, EB and update of sample t - k) for pass ``t``."""
        total, k = self.total_samples, self.fp_stale
        unbounded = total == 0
        return unbounded | (t < total), (t >= k) & (unbounded | (t - k < total))

    def elaborate(self, platform):
        m = Module()
        queue = m.submodules.queue = self.queue
        updater = m.submodules.updater = self.updater
        rows = self.layout.rows

        # Passes: each pops the R rows in order once it has work.
        t, running = Signal(COUNT_BITS), Signal()
        with_fp, with_update = Signal(), Signal()
        has_fp, has_update = self._has_work(t)
        popped = queue.o.valid & queue.o.ready
        row = ModuloCounter(m, rows, popped)
        with m.If(~running & (has_fp | has_update)):
            m.d.sync += [running.eq(1), with_fp.eq(has_fp), with_update.eq(has_update)]
        with m.If(popped & row.last):
            m.d.sync += [running.eq(0), t.eq(t + 1)]

        # Each row to the engines of the pass and to the updater, taken by all before the next.
        outputs = [self.fp] + ([self.eb] if self.needs_eb else []) + [updater.rows]
        wanted = [with_fp] + ([with_update] if self.needs_eb else []) + [1]
        offers = [stream.Signature(1).create(path=(f"offer{n}",)) for n in range(len(outputs))]
        for offer, out, want in zip(offers, outputs, wanted):
            m.d.comb += [out.valid.eq(offer.valid & want), offer.ready.eq(out.ready | ~want)]
        for out in outputs[:-1]:
            m.d.comb += out.payload.eq(queue.o.payload)
        m.d.comb += [updater.rows.payload.rows.eq(queue.o.payload), updater.rows.payload.update.eq(with_update),
                     queue.o.ready.eq(fork(m, queue.o.valid & running, offers) & running)]
        connect(m, flipped(self.grads), updater.grads)
        connect(m, updater.o, queue.i)

        # The DRAM port, watched: pass p's rows are stored once R more words are written.
        connect(m, queue.dram, flipped(self.dram))
        write = self.dram.write.data
        stored_row = ModuloCounter(m, rows, write.valid & write.ready)
        stored_pass = Signal(COUNT_BITS)
        with m.If(write.valid & write.ready & stored_row.last):
            m.d.sync += stored_pass.eq(stored_pass + 1)
        m.d.comb += self.stored.eq(write.valid & write.ready & stored_row.last & self._has_work(stored_pass)[1])
        return m
