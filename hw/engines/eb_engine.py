"""Error engine (EB): b CEs of P tiles, the errors of the slice's input channels (paper 5.4).

EB is the transposed convolution of the layer: the error of input pixel (c, y, x) is
``sum over o, ky, kx of E[o][ky][kx] * W[o][c][K-1-ky][K-1-kx]`` where E is the K x K
window at (y, x) of the zero-dilated, padded error map of the O output channels
(``tensor_ops.dilate_pad_errors``; :meth:`hw.memory.line_buffer.LineBuffer.for_errors` emits
these windows, one per input pixel, in raster order). It reads the *same* LPRAM rows as
the FP engine (docs/node_dataflow.md): address ``g*v + i`` holds output channels
``gP .. gP+P-1`` for input channels ``i*b .. i*b+b-1`` (b tiles per FP CE, v = ceil(S/b)
passes; b = S, v = 1 unless the mapping folds), and CE c multiplies the P channels'
K x K error taps with the word ``(c, K-1-ky, K-1-kx)`` of bank p, so the transposition
and the kernel flip are wiring. Per window the engine walks the steps i-major, g-minor,
so that each CE's accumulator sums the consecutive groups of a pass: after group G-1
of pass i, CE c holds the error sum of input channel ``i*b + c``. The sums of passes
0 .. v-2 are kept in a register of (v-1)*b lanes until the last pass completes; then the
engine emits one beat of the S sums (lanes past S of the last pass dropped; exact, not
rounded: ICP slices round them in the node, OCP slices send them on as partial sums).

``group_major`` walks the steps in the FP engine's order instead (g-major, i-minor: LPRAM
address order), for a slice whose weight rows arrive once per sample as a stream read for FP
and EB together (hw/memory/dram_weights.py). The sums of all v passes then wait in a ring of
v*b lanes, each step adding into the pass it reaches (group 0 loading); after group G-1
the ring holds every pass's sums and the last step's completes the beat.

``group_windows`` takes the windows a group at a time, one beat of P*K*K error taps per step
in the walk's order (a fully connected layer's output errors of 4,096 words and more, which
no beat can hold whole, turned by ``hw.memory.fc_store.FcWindowStore`` and replayed once per
pass), so there is no group select.

``pass_errors`` emits each pass's b sums as a beat of its own, in pass order, as the pass
completes (after its last group), instead of one beat of all S: for a fully connected layer,
whose S input channels are a whole flattened map (``hw.memory.fc_store.FcErrorStore`` turns
the passes back into pixels). Nothing is held across passes then, and the output buffer is
credited as FP's (a beat per G steps, or per step in the last group when group-major).

Channels past O in the last group read as zero errors (``hw.engines.common.select_words``),
so the garbage in the weight rows' lanes past O never contributes.

Pipeline, from the cycle a step (group g, pass i) is issued (weight read enabled):

====================  ===============================================================
issue                 ``weights.en``, ``weights.addr = g*v + i``; group g's P*K*K error
                      taps are selected from the held window and registered
+1                    weight row and error taps presented to the multipliers
+1 + LATENCY          products (``hw.arith.mult.Multiplier``, registered in and out)
+1 + LATENCY + L      adder tree per CE, ``L = ceil(log2(P*K*K))`` levels (at least one)
+2 + LATENCY + L      accumulator (ACC_BITS): group 0 loads, later groups add; after the
                      last group it holds pass i's sums, copied into the held lanes
                      (i < v-1) or output (i = v-1, with the held lanes) in this cycle
====================  ===============================================================

One window is accepted per G*v cycles and, with continuous input and a ready output,
every multiplier is busy every cycle. Flow control as in hw.engines.fp_engine: the pipeline
never stalls, a window's errors wait in a buffer of ``latency + 1`` beats when the consumer
does not take them, and a window's last step is issued only while that buffer has a place
for every window in flight (``hw.arith.pipeline.CreditedOutput``). Folded (v > 1), its
result (all S channels) is too wide and too rare for a buffer (one per G*v steps; node 3's fc
EB's would be 1,536 bits wide, 2,231 LUT4): one enable then holds every register (the
accumulators and held lanes included) while the consumer does not take the errors.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.memories import eb_latency, tree_levels
from mapping.numerics import ACC_BITS, WORD_BITS

from ..arith.mult import LATENCY
from ..arith.pipeline import CreditedOutput, Pipeline
from ..base.checks import positive
from ..base.layouts import flat_elements, psum_layout, window_layout
from ..base.signatures import WeightPortSignature
from ..memory.param_ram import WeightWalk
from .common import Issue, multiply, select_words


class EBEngine(WeightWalk, wiring.Component):
    """``tiles`` (b) CEs of ``ces`` (P) tiles over ``in_channels`` (S) input channels.

    Ports: ``windows`` (error windows of the ``out_channels`` = O output channels, one per
    input pixel), ``weights`` (a ``WeightPortSignature`` (the LPRAM read port, engine
    side, as FPEngine's: ``rows`` = G*v addresses of P rows of b*K*K words), ``errors``
    (``psum_layout(S)``, one beat per window). ``tiles``: b, None for one CE per input
    channel; ``passes``: v.
    ``latency``: cycles from issuing a window's last step to its errors, with no stall.
    """

    def __init__(self, *, in_channels, out_channels, kernel, ces, tiles=None, group_major=False, pass_errors=False,
                 group_windows=False, family=None):
        positive(self, "error engine", in_channels=in_channels, out_channels=out_channels, kernel=kernel,
                 ces=ces)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel, self.ces, self.family = kernel, ces, family
        self.group_major, self.pass_errors, self.group_windows = group_major, pass_errors, group_windows
        self._walk("error engine", out_channels=out_channels, in_channels=in_channels, kernel=kernel,
                   banks=ces, tiles=tiles)
        self.taps = ces * kernel * kernel  # products per CE and step
        self.levels = tree_levels(self.taps)
        self.latency = eb_latency(self.taps)
        super().__init__({
            "windows": In(stream.Signature(window_layout(ces if group_windows else out_channels, kernel))),
            "weights": Out(WeightPortSignature(self.rows, ces, self.tiles * kernel * kernel)),
            "errors": Out(stream.Signature(psum_layout(self.tiles if pass_errors else in_channels))),
        })

    @classmethod
    def from_slice(cls, layer_slice, family=None, *, group_major=False):
        """The EB engine of a ``mapping.nodeconfig.LayerSlice``: b CEs (its FP engine's tiles) of P tiles
        (the LPRAM's banks), a beat per pass after a flatten (``LayerSlice.map_pixels``), a
        window a group where the output vector travels as a map (``LayerSlice.out_map``) or the
        windows in chunks (``LayerSlice.eb_chunks``)."""
        s = layer_slice
        if not s.needs_eb:
            raise ValueError(f"error engine: layer {s.layer} is the network's first weighted layer "
                             f"and has no EB")
        e, k = s.eb, s.kernel
        if (e.ces, e.tiles, e.kernel) != (s.fp.tiles, s.fp.ces, k):
            raise ValueError(
                f"error engine: layer {s.layer} has an EB engine of {e.ces} CEs of {e.tiles} tiles of "
                f"{e.kernel}x{e.kernel}, but its slice needs {s.fp.tiles} CEs (one per FP tile) "
                f"of {s.fp.ces} tiles (one per LPRAM bank) of {k}x{k}")
        return cls(in_channels=s.in_channels, out_channels=s.out_channels, kernel=k, ces=e.tiles, tiles=e.ces,
                   group_major=group_major, pass_errors=s.map_pixels > 1, group_windows=s.out_map is not None or s.eb_chunks is not None,
                   family=family)

    @property
    def multipliers(self):
        return self.tiles * self.taps

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()
        k, kk, b = self.kernel, self.kernel * self.kernel, self.tiles

        credit = CreditedOutput(self.latency + 1, self.family, stall=self.passes > 1 and not self.pass_errors)
        issue = Issue(m, self.groups, self.passes, self.windows.valid, credit.room, group_major=self.group_major)
        m.d.comb += [self.weights.en.eq(issue.issue), self.weights.addr.eq(issue.addr),
                     self.windows.ready.eq(credit.room if self.group_windows else issue.accept)]

        # Group g's error taps, (p, ky, kx) row-major, zero for channels past O.
        taps = data.ArrayLayout(signed(WORD_BITS), self.taps)(
            pipe.stage(self.windows.payload.as_value() if self.group_windows
                       else select_words(self.windows.payload, issue.group, self.groups, self.taps)))
        valid = pipe.stage(issue.issue, reset=True)
        first, last, pass_ = (pipe.stage(flag) for flag in (issue.first_group, issue.last_group, issue.pass_))

        # CE c: tap (p, ky, kx) meets word (c, K-1-ky, K-1-kx) of bank p (transposed, flipped).
        weights = flat_elements(self.weights.data.as_value(), self.weights.data.shape())  # bank-major
        words = self.weights.data.shape().elem_shape.length
        sums = []
        for c in range(b):
            products = []
            for p in range(self.ces):
                for ky in range(k):
                    for kx in range(k):
                        weight = weights[p * words + c * kk + (k - 1 - ky) * k + (k - 1 - kx)]
                        products.append(multiply(m, f"mult_{c}_{p}_{ky}_{kx}", taps[(p * k + ky) * k + kx],
                                                 weight, self.family, credit.enable))
            sums.append(products)
        sums = [pipe.adder_tree(products) for products in sums]
        valid = pipe.delay(valid, LATENCY + self.levels, reset=True)
        first, last, pass_ = (pipe.delay(flag, LATENCY + self.levels) for flag in (first, last, pass_))

        if self.group_major and self.passes > 1:
            held, accs, done = self._ring(pipe, sums, first, last, pass_, valid)
        else:
            held, accs, done = self._held(pipe, sums, first, last, pass_, valid)
        if self.pass_errors:
            produced, payload = issue.issue & issue.last_group, Cat(*accs)
        else:
            live = self.in_channels - (self.passes - 1) * b  # lanes of the last pass within S
            produced, payload = issue.issue & issue.last_group & issue.last_pass, Cat(*held, *accs[:live])
        credit.attach(m, produced=produced, valid=done, payload=payload, out=self.errors)
        pipe.attach(m, credit.enable)
        return m

    def _held(self, pipe, sums, first, last, pass_, valid):
        """Pass-major: each CE's accumulator sums a pass's consecutive groups; the sums of passes
        0 .. v-2 wait in held lanes. Returns (held lanes, the last pass's sums, output valid)."""
        accs = pipe.accumulate(sums, first, valid, signed(ACC_BITS))
        done = pipe.stage(valid & last, reset=True)
        if self.pass_errors:
            return [], accs, done
        done_pass = pipe.stage(pass_)
        held = []
        for i in range(self.passes - 1):
            lanes = [Signal(signed(ACC_BITS), name=f"held_{i}_{c}", reset_less=True) for c in range(self.tiles)]
            with pipe.module.If(done & (done_pass == i)):
                pipe.module.d.sync += [lane.eq(acc) for lane, acc in zip(lanes, accs)]
            held += lanes
        return held, accs, done & (done_pass == self.passes - 1)

    def _ring(self, pipe, sums, first, last, pass_, valid):
        """Group-major: the v passes' sums in a ring that turns one pass per step, each step
        adding its sums into the pass at the ring's head (group 0: into nothing). Returns
        (passes 0 .. v-2 after the last step, pass v-1's sums, output valid)."""
        b, v = self.tiles, self.passes
        ring = [[Signal(signed(ACC_BITS), name=f"ring_{i}_{c}", reset_less=True) for c in range(b)]
                for i in range(v)]
        added = [Signal(signed(ACC_BITS), name=f"ring_in_{c}") for c in range(b)]
        pipe.module.d.comb += [lane.eq(Mux(first, 0, head) + total)
                               for lane, head, total in zip(added, ring[0], sums)]
        with pipe.module.If(valid):
            for i in range(v - 1):
                pipe.module.d.sync += [lane.eq(nxt) for lane, nxt in zip(ring[i], ring[i + 1])]
            pipe.module.d.sync += [lane.eq(new) for lane, new in zip(ring[v - 1], added)]
        if self.pass_errors:  # each step of the last group completes the pass it adds into
            return [], ring[v - 1], pipe.stage(valid & last, reset=True)
        done = pipe.stage(valid & last & (pass_ == v - 1), reset=True)
        # One cycle on, the ring's last v entries are passes 0 .. v-1 in order.
        return [lane for entry in ring[:v - 1] for lane in entry], ring[v - 1], done
