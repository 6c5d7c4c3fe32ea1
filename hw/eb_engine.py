"""Error engine (EB): S CEs of P tiles, the errors of the slice's input channels (paper 5.4).

EB is the transposed convolution of the layer: the error of input pixel (i, y, x) is
``sum over o, ky, kx of E[o][ky][kx] * W[o][i][K-1-ky][K-1-kx]`` where E is the K x K
window at (y, x) of the zero-dilated, padded error map of the O output channels
(``tensor_ops.dilate_pad_errors``; :meth:`hw.line_buffer.LineBuffer.for_errors` emits
these windows, one per input pixel, in raster order). It reads the *same* LPRAM rows as
the FP engine (docs/node_dataflow.md): in cycle g, row g holds output channels
``gP .. gP+P-1`` for the slice's S input channels, and CE i multiplies the P channels'
K x K error taps with the word ``(i, K-1-ky, K-1-kx)`` of bank p, so the transposition
and the kernel flip are wiring. Each CE adds its P*K*K products in an adder tree and
accumulates the G groups; after the last group the engine emits the S sums (exact, not
rounded: ICP slices round them in the node, OCP slices send them on as partial sums).

Channels past O in the last group read as zero errors (``hw.engine_common.group_words``),
so the garbage in the weight rows' lanes past O never contributes.

Pipeline, from the cycle a group is issued (weight read enabled):

====================  ===============================================================
issue                 ``weight_en``, ``weight_addr = g``; group g's P*K*K error taps
                      are selected from the held window and registered
+1                    weight row and error taps presented to the multipliers
+1 + LATENCY          products (``hw.mult.Multiplier``, registered in and out)
+1 + LATENCY + L      adder tree per CE, ``L = ceil(log2(P*K*K))`` levels (at least one)
+2 + LATENCY + L      accumulator (ACC_BITS): group 0 loads, later groups add; it is
                      also the output register, valid after the last group
====================  ===============================================================

One window is accepted per G cycles and, with continuous input and a ready output,
every multiplier is busy every cycle. Flow control as in hw.conv_engine: one enable,
``advance = ~errors.valid | errors.ready``, holds every register (the accumulators
included) and the weight memory holds its output while ``weight_en`` is low.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.conv_engine import psum_layout, window_layout
from hw.engine_common import GroupIssue, Pipeline, group_words, multiply, tree_levels
from hw.mult import LATENCY
from hw.rounding import refuse
from mapping.numerics import ACC_BITS, WORD_BITS


class ErrorEngine(wiring.Component):
    """``ces`` (P) tiles per CE, one CE per input channel (``in_channels`` = S).

    Ports: ``windows`` (error windows of the ``out_channels`` = O output channels, one per
    input pixel), ``weight_addr``/``weight_en``/``weight_data`` (the LPRAM read port, engine
    side, as ConvEngine's), ``errors`` (``psum_layout(S)``, one beat per window).
    ``latency``: cycles from issuing a window's last group to its errors, with no stall.
    """

    def __init__(self, *, in_channels, out_channels, kernel, ces, family=None):
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                            ("kernel", kernel), ("ces", ces)):
            if value < 1:
                refuse(self, f"error engine: {name} = {value} must be at least 1")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel, self.ces, self.family = kernel, ces, family
        self.groups = -(-out_channels // ces)
        self.taps = ces * kernel * kernel  # products per CE and group
        self.levels = tree_levels(self.taps)
        self.latency = 2 + LATENCY + self.levels
        super().__init__({
            "windows": In(stream.Signature(window_layout(out_channels, kernel))),
            "weight_addr": Out(range(self.groups)),
            "weight_en": Out(1),
            "weight_data": In(data.ArrayLayout(window_layout(in_channels, kernel), ces)),
            "errors": Out(stream.Signature(psum_layout(in_channels))),
        })

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The EB engine of a ``mapping.nodeconfig.LayerSlice``: S CEs of P tiles, P = the LPRAM's banks."""
        s = layer_slice
        if not s.needs_eb:
            raise ValueError(f"error engine: layer {s.layer} is the network's first weighted layer "
                             f"and has no EB")
        e, k = s.eb, s.kernel
        if (e.ces, e.tiles, e.kernel) != (s.in_channels, s.fp.ces, k):
            raise ValueError(
                f"error engine: layer {s.layer} has an EB engine of {e.ces} CEs of {e.tiles} tiles of "
                f"{e.kernel}x{e.kernel}, but its slice needs {s.in_channels} CEs (one per input "
                f"channel) of {s.fp.ces} tiles (one per LPRAM bank) of {k}x{k}")
        return cls(in_channels=s.in_channels, out_channels=s.out_channels, kernel=k, ces=e.tiles,
                   family=family)

    @property
    def multipliers(self):
        return self.in_channels * self.taps

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()
        k, kk = self.kernel, self.kernel * self.kernel

        advance = Signal()
        m.d.comb += advance.eq(~self.errors.valid | self.errors.ready)

        issue = GroupIssue(m, self.groups, self.windows.valid, advance)
        m.d.comb += [self.weight_en.eq(issue.issue), self.weight_addr.eq(issue.group),
                     self.windows.ready.eq(issue.accept)]

        # Group g's error taps, (p, ky, kx) row-major, zero for channels past O.
        taps = data.ArrayLayout(signed(WORD_BITS), self.taps)(
            pipe.stage(group_words(self.windows.payload, issue.group, self.groups, self.taps)))
        valid, first, last = (pipe.stage(flag) for flag in (self.windows.valid, issue.first, issue.last))

        # CE i: tap (p, ky, kx) meets word (i, K-1-ky, K-1-kx) of bank p (transposed, flipped).
        sums = []
        for i in range(self.in_channels):
            products = []
            for p in range(self.ces):
                for ky in range(k):
                    for kx in range(k):
                        weight = self.weight_data[p][i * kk + (k - 1 - ky) * k + (k - 1 - kx)]
                        products.append(multiply(m, f"mult_{i}_{p}_{ky}_{kx}", taps[(p * k + ky) * k + kx],
                                                 weight, advance, self.family))
            sums.append(products)
        sums = [pipe.adder_tree(products) for products in sums]
        valid, first, last = (pipe.delay(flag, LATENCY + self.levels) for flag in (valid, first, last))

        # Accumulate over the groups; the accumulators are the output register.
        accs = [Signal(signed(ACC_BITS), name=f"acc_{i}") for i in range(self.in_channels)]
        with pipe.module.If(valid):
            pipe.module.d.sync += [acc.eq(Mux(first, 0, acc) + total) for acc, total in zip(accs, sums)]
        m.d.comb += [self.errors.valid.eq(pipe.stage(valid & last)),
                     self.errors.payload.values.eq(Cat(*accs))]
        pipe.attach(m, advance)
        return m
