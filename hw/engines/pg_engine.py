"""Gradient engine (PG): P CEs of b tiles of K x K multipliers, the weight-gradient terms (paper 5.5).

The weight gradient ``dW[o][c][ky][kx] = sum over output pixels of err[o] * window[c][ky][kx]``
is, per the paper, cut into K x K pieces: for each output pixel the engine multiplies
the error of P output channels with the K x K windows of b input channels (the
activations replayed from the Act-RAM through the FP line buffer). Per pixel it walks
the steps (group g, pass i) g-major, i-minor like the FP engine (G = ceil(O / P) groups,
v = ceil(S / b) passes; b = S, v = 1 unless the mapping folds); step (g, i) is one beat
of ``grads``: ``row = g*v + i`` and
``values[p][(c, ky, kx)] = err[gP+p] * window[i*b+c][ky][kx]``, laid out like LPRAM
address ``g*v + i`` (bank p, words (b, K, K) row-major), so the gradient buffer adds the
beat into its row g*v + i; the sums over pixels and samples live there
(``hw.memory.grad_buffer``). Channels past O in the last group read as zero errors and
channels past S in the last pass as zero activations, so their products are zero.

Biases (``bias=True``): their gradient is the sum of the errors over the pixels, so a
second output ``bias_grads`` carries, in the same beat as each ``grads`` beat, ``row = g``
and ``values[p] = err[gP+p]`` (zero past O) on the beat of pass 0 and zeros on the
beats of later passes, so a bias buffer of G rows sums each error once: the same beat
shape as the weights' with one word per row. (Summing the pixels of a sample here
instead would need O accumulators, a read-modify-write RAM like the gradient buffer's,
for no fewer beats on fully connected layers.)

The last slice of a grouped ICP layer owns the biases of every output channel (its SFU
finishes them all) but its engine's rows are one group's: there :class:`BiasTerms` makes
the bias beats from the conv-output errors of all channels instead, and the engine makes
none. Its beats are P x G channels wide (``LayerSlice.bias_banks``: the bias RAM's and
LGB's banks), so a pixel's take OC / (P x G) cycles, as many as the engine's walk of one
group takes without folding (``mapping.memories.bias_steps``).

Pipeline, from the cycle a step is issued:

====================  ===============================================================
issue                 group g's P errors and pass i's b*K*K activations selected from
                      the held error pixel and window (a G:1 and a v:1 mux); they go
                      straight into the multipliers' input registers
+LATENCY              products (``hw.arith.mult.Multiplier``), whose output registers are the
                      ``grads`` payload; the errors, delayed alike, the ``bias_grads`` payload
====================  ===============================================================

No weight read has to be waited for, so unlike the FP and EB engines there is no
operand register in front of the multipliers (it would cost b*K*K + P words of
flip-flops and only repeat the multipliers' own input registers); the two selects
are the only logic in front of those registers.

Inputs: ``windows`` and ``errors`` are consumed in lockstep, one of each per output pixel,
both taken when the pixel's last step issues; one pixel per G*v cycles and every
multiplier busy every cycle when both inputs flow and the outputs are ready.
``pass_windows``: the windows arrive a pass at a time, one beat of b*K*K words per step
(hw.engines.fp_engine's option of the same name, from the same kind of store); the errors
are still taken once per pixel, with the pixel's last step. ``group_errors``: the errors
arrive a group at a time, one beat of P words taken with the group's last step (a fully
connected layer's output errors of 4,096 words and more, turned by the same kind of store).
Flow control: one enable, ``advance``, holds every register; it rises when every output
has taken the beat on display (an output that takes it early waits, flagged as
taken, for the others), so a beat is never lost or duplicated on either output.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.mult import LATENCY
from ..arith.pipeline import Pipeline
from ..base.checks import positive
from ..base.counter import ModuloCounter
from ..base.handshake import fork
from ..base.layouts import (bias_grads_layout, flat_elements, grads_layout, pixel_layout,
                            window_layout)
from ..memory.param_ram import WeightWalk
from .common import Issue, multiply, select_words


class PGEngine(WeightWalk, wiring.Component):
    """``ces`` (P) CEs of ``tiles`` (b) tiles of ``kernel`` x ``kernel``, over S = ``in_channels`` and
    O = ``out_channels``.

    Ports: ``windows`` (activation windows of the S input channels, one per output pixel),
    ``errors`` (the O output-channel errors of that pixel), ``grads`` and, with ``bias``,
    ``bias_grads`` (one beat per pixel and step each: ``rows`` = G*v per pixel).
    ``tiles``: b, None for one per input channel; ``passes``: v.
    ``latency``: cycles from issuing a step to its beat, with no stall.
    """

    def __init__(self, *, in_channels, out_channels, kernel, ces, tiles=None, bias=False, pass_windows=False,
                 group_errors=False, family=None):
        positive(self, "gradient engine", in_channels=in_channels, out_channels=out_channels, kernel=kernel,
                 ces=ces)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel, self.ces, self.bias, self.family = kernel, ces, bias, family
        self.pass_windows, self.group_errors = pass_windows, group_errors
        self._walk("gradient engine", out_channels=out_channels, in_channels=in_channels, kernel=kernel,
                   banks=ces, tiles=tiles)
        self.latency = LATENCY
        members = {
            "windows": In(stream.Signature(window_layout(self.tiles if pass_windows else in_channels, kernel))),
            "errors": In(stream.Signature(pixel_layout(ces if group_errors else out_channels))),
            "grads": Out(stream.Signature(grads_layout(self.rows, ces, self.words))),
        }
        if bias:
            members["bias_grads"] = Out(stream.Signature(bias_grads_layout(self.groups, ces)))
        super().__init__(members)

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The PG engine of a ``mapping.nodeconfig.LayerSlice``: P CEs of b tiles, b = its FP engine's
        (the gradient rows are laid out like the LPRAM's).

        ``bias`` is set on the slice that owns the layer's biases (the last node of an ICP
        layer, every OCP node), as in ``hw.memory.grad_buffer.GradientBuffer.from_slice``.
        """
        s = layer_slice
        e, k = s.pg, s.kernel
        if (e.tiles, e.kernel) != (s.fp.tiles, k):
            raise ValueError(
                f"gradient engine: layer {s.layer} has a PG engine of {e.ces} CEs of {e.tiles} tiles of "
                f"{e.kernel}x{e.kernel}, but its slice needs {s.fp.tiles} tiles (as its FP engine, whose "
                f"LPRAM rows the gradients follow) of {k}x{k}")
        return cls(in_channels=s.in_channels, out_channels=s.out_channels, kernel=k, ces=e.ces, tiles=e.tiles,
                   bias=s.owns_biases and not s.biases_beyond_rows, pass_windows=s.map_pixels > 1,
                   group_errors=s.out_map is not None, family=family)

    @property
    def multipliers(self):
        return self.ces * self.words

    def outputs(self):
        return [self.grads] + ([self.bias_grads] if self.bias else [])

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()
        outs = self.outputs()

        # The output register forks to every output; the pipeline advances once all took it.
        valid, advance = Signal(), Signal()
        m.d.comb += advance.eq(~valid | fork(m, valid, outs))

        both = self.windows.valid & self.errors.valid
        issue = Issue(m, self.groups, self.passes, both, advance, group_major=True)
        m.d.comb += [self.windows.ready.eq((advance if self.pass_windows else issue.accept) & self.errors.valid),
                     self.errors.ready.eq((advance & issue.last_pass if self.group_errors else issue.accept)
                                          & self.windows.valid)]

        # The two selects named once: every multiplier slices them, and a slice of an unnamed
        # expression builds the expression again (a VGG-16 PG engine's 864 multipliers each
        # built the whole window select).
        window, errors = Signal(window_layout(self.tiles, self.kernel)), Signal(pixel_layout(self.ces))
        selected = (self.windows.payload.as_value() if self.pass_windows
                    else select_words(self.windows.payload, issue.pass_, self.passes, self.words))
        m.d.comb += [window.eq(selected),
                     errors.eq(self.errors.payload if self.group_errors
                               else select_words(self.errors.payload, issue.group, self.groups, self.ces))]
        words = flat_elements(window.as_value(), window.shape())
        products = [multiply(m, f"mult_{p}_{j}", errors[p], words[j], self.family, advance)
                    for p in range(self.ces) for j in range(self.words)]
        m.d.comb += self.grads.payload.values.as_value().eq(Cat(*products))
        m.d.comb += [valid.eq(pipe.delay(both, LATENCY, reset=True)),
                     self.grads.payload.row.eq(pipe.delay(issue.addr, LATENCY))]
        if self.bias:
            # Each error once per pixel: on pass 0's beat, zeros on the later passes'.
            once = Mux(issue.first_pass, errors.as_value(), 0)
            m.d.comb += [self.bias_grads.payload.row.eq(pipe.delay(issue.group, LATENCY)),
                         self.bias_grads.payload.values.eq(pipe.delay(once, LATENCY))]
        pipe.attach(m, advance)
        return m


class BiasTerms(wiring.Component):
    """The bias-gradient beats of ``channels`` conv-output errors per pixel, ``lanes`` a beat:
    ``row = g`` and ``values[p]`` the error of channel g*lanes + p (module docstring)."""

    def __init__(self, *, channels, lanes):
        positive(self, "bias terms", channels=channels, lanes=lanes)
        self.groups = -(-channels // lanes)
        super().__init__({"errors": In(stream.Signature(pixel_layout(channels))),
                          "bias_grads": Out(stream.Signature(bias_grads_layout(self.groups, lanes)))})

    def elaborate(self, platform):
        m = Module()
        lanes = len(self.bias_grads.payload.values)
        group = ModuloCounter(m, self.groups, self.bias_grads.valid & self.bias_grads.ready)
        m.d.comb += [self.bias_grads.valid.eq(self.errors.valid),
                     self.bias_grads.payload.row.eq(group.value),
                     self.bias_grads.payload.values.eq(select_words(self.errors.payload, group.value,
                                                                    self.groups, lanes)),
                     self.errors.ready.eq(self.bias_grads.ready & group.last)]
        return m
