"""Gradient engine (PG): S x P tiles of K x K multipliers, the weight-gradient terms (paper 5.5).

The weight gradient ``dW[o][i][ky][kx] = sum over output pixels of err[o] * window[i][ky][kx]``
is, per the paper, cut into K x K pieces: for each output pixel the engine multiplies
the error of P output channels with the K x K window of each of the S input channels
(the activations replayed from the Act-RAM through the FP line buffer). Group g of a
pixel covers output channels ``gP .. gP+P-1`` and is one beat of ``grads``: ``row = g``
and ``values[p][(i, ky, kx)] = err[gP+p] * window[i][ky][kx]``, laid out like LPRAM row
g (bank p, words (S, K, K) row-major), so the gradient buffer adds the beat into its
row g; the sums over pixels and samples live there (``hw.grad_buffer``). Channels past O
in the last group read as zero errors, so their products are zero.

Biases (``bias=True``): their gradient is the sum of the errors over the pixels, so a
second output ``bias_grads`` carries, in the same beat as each ``grads`` beat, ``row = g``
and ``values[p] = err[gP+p]`` (zero past O): the same beat shape as the weights' with one
word per row, for a bias gradient buffer to sum like the weights'. (Summing the pixels
of a sample here instead would need O accumulators, a read-modify-write RAM like the
gradient buffer's, for no fewer beats on fully connected layers.)

Pipeline, from the cycle a group is issued:

====================  ===============================================================
issue                 group g's P errors selected from the held error pixel; they and
                      the window go straight into the multipliers' input registers
+LATENCY              products (``hw.mult.Multiplier``), whose output registers are the
                      ``grads`` payload; the errors, delayed alike, the ``bias_grads`` payload
====================  ===============================================================

No weight read has to be waited for, so unlike the FP and EB engines there is no
operand register in front of the multipliers (it would cost S*K*K + P words of
flip-flops and only repeat the multipliers' own input registers).

Inputs: ``windows`` and ``errors`` are consumed in lockstep, one of each per output pixel,
both taken when the pixel's last group issues; one pixel per G cycles and every
multiplier busy every cycle when both inputs flow and the outputs are ready.
Flow control: one enable, ``advance``, holds every register; it rises when every output
has taken the beat on display (an output that takes it early waits, flagged as
taken, for the others), so a beat is never lost or duplicated on either output.
"""

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.conv_engine import window_layout
from hw.engine_common import GroupIssue, Pipeline, group_words, multiply
from hw.mult import LATENCY
from hw.rounding import refuse
from hw.stream_util import pixel_layout
from mapping.numerics import WORD_BITS

PRODUCT_BITS = 2 * WORD_BITS


def grads_layout(groups, ces, words):
    """One ``grads`` beat: group ``row`` and P rows of ``words`` exact products."""
    return data.StructLayout({"row": range(groups),
                              "values": data.ArrayLayout(data.ArrayLayout(signed(PRODUCT_BITS), words), ces)})


def bias_grads_layout(groups, ces):
    """One ``bias_grads`` beat: group ``row`` and the P errors of that group."""
    return data.StructLayout({"row": range(groups), "values": data.ArrayLayout(signed(WORD_BITS), ces)})


class GradientEngine(wiring.Component):
    """``ces`` (P) CEs of ``in_channels`` (S) tiles of ``kernel`` x ``kernel``, over O = ``out_channels``.

    Ports: ``windows`` (activation windows of the S input channels, one per output pixel),
    ``errors`` (the O output-channel errors of that pixel), ``grads`` and, with ``bias``,
    ``bias_grads`` (one beat per pixel and group each).
    ``latency``: cycles from issuing a group to its beat, with no stall.
    """

    def __init__(self, *, in_channels, out_channels, kernel, ces, bias=False, family=None):
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                            ("kernel", kernel), ("ces", ces)):
            if value < 1:
                refuse(self, f"gradient engine: {name} = {value} must be at least 1")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel, self.ces, self.bias, self.family = kernel, ces, bias, family
        self.groups = -(-out_channels // ces)
        self.words = in_channels * kernel * kernel
        self.latency = LATENCY
        members = {
            "windows": In(stream.Signature(window_layout(in_channels, kernel))),
            "errors": In(stream.Signature(pixel_layout(out_channels))),
            "grads": Out(stream.Signature(grads_layout(self.groups, ces, self.words))),
        }
        if bias:
            members["bias_grads"] = Out(stream.Signature(bias_grads_layout(self.groups, ces)))
        super().__init__(members)

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The PG engine of a ``mapping.nodeconfig.LayerSlice``: P CEs of S tiles.

        ``bias`` is set on the slice that owns the layer's biases (the last node of an ICP
        layer, every OCP node), as in ``hw.grad_buffer.GradientBuffer.from_slice``.
        """
        s = layer_slice
        e, k = s.pg, s.kernel
        if (e.tiles, e.kernel) != (s.in_channels, k):
            raise ValueError(
                f"gradient engine: layer {s.layer} has a PG engine of {e.ces} CEs of {e.tiles} tiles of "
                f"{e.kernel}x{e.kernel}, but its slice needs {s.in_channels} tiles (one per input "
                f"channel) of {k}x{k}")
        return cls(in_channels=s.in_channels, out_channels=s.out_channels, kernel=k, ces=e.ces,
                   bias=s.bias and (s.mode == "ocp" or s.last), family=family)

    @property
    def multipliers(self):
        return self.ces * self.words

    def outputs(self):
        return [self.grads] + ([self.bias_grads] if self.bias else [])

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()
        outs = self.outputs()

        # Fork of the output register to every output: `taken` flags the outputs that
        # took the beat on display while another stalled.
        valid, taken, advance = Signal(), Signal(len(outs)), Signal()
        done = Cat(taken[n] | out.ready for n, out in enumerate(outs))
        m.d.comb += advance.eq(~valid | done.all())
        m.d.comb += [out.valid.eq(valid & ~taken[n]) for n, out in enumerate(outs)]
        with m.If(advance):
            m.d.sync += taken.eq(0)
        with m.Else():
            m.d.sync += taken.eq(done)

        both = self.windows.valid & self.errors.valid
        issue = GroupIssue(m, self.groups, both, advance)
        m.d.comb += [self.windows.ready.eq(issue.accept & self.errors.valid),
                     self.errors.ready.eq(issue.accept & self.windows.valid)]

        window = self.windows.payload
        errors = pixel_layout(self.ces)(group_words(self.errors.payload, issue.group, self.groups, self.ces))
        for p in range(self.ces):
            for j in range(self.words):
                product = multiply(m, f"mult_{p}_{j}", errors[p], window[j], advance, self.family)
                m.d.comb += self.grads.payload.values[p][j].eq(product)
        row = pipe.delay(issue.group, LATENCY)
        m.d.comb += [valid.eq(pipe.delay(both, LATENCY)), self.grads.payload.row.eq(row)]
        if self.bias:
            m.d.comb += [self.bias_grads.payload.row.eq(row),
                         self.bias_grads.payload.values.eq(pipe.delay(errors.as_value(), LATENCY))]
        pipe.attach(m, advance)
        return m
