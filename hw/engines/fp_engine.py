"""Convolution engine: P CEs of b x K x K multipliers, one partial sum per CE per group.

Paper section 5.3: a window of ``S*K*K`` words (the slice's S input channels, K x K
taps each) is broadcast to P convolution engines (CEs); CE ``p`` holds ``b`` tiles of
``K*K`` multiply-accumulate units and produces the partial sum of one output channel
over the slice's input channels. The engine visits the output channels in groups of P
(``G = ceil(OC / P)``) and, with b < S tiles (folding), the input channels in passes of
b (``v = ceil(S / b)``; channels past S in the last pass read as zero). Per window it
walks the steps g-major, i-minor, reading LPRAM address ``g*v + i`` (bank p: output
channel ``g*P + p``, input channels ``i*b .. i*b+b-1``), so that a CE's accumulator sums
the consecutive passes of a group; it emits ``G`` partial-sum beats, lanes past OC in
the last group being zero: G*v cycles per window. The window is accepted when its
last step is issued, so with continuous input and a ready output every multiplier is
busy every cycle. With b = S (the default, ``v = 1``) there is no accumulator.

Pipeline, from the cycle a step is issued (weight read enabled):

====================  ===============================================================
issue                 ``weights.en``, ``weights.addr = g*v + i``; pass i's b*K*K words
                      are selected from the window (a v:1 mux) and registered
+1                    weight row and window words presented to the multipliers
+1 + LATENCY          products (``hw.arith.mult.Multiplier``, registered in and out)
+1 + LATENCY + L      pipelined adder tree, one register per level, ``L = ceil(log2(b*K*K))``
                      (at least one); the last level widens to ACC_BITS and zeroes the
                      lanes past OC
+2 + LATENCY + L      (v > 1 only) accumulator: pass 0 loads, later passes add; it is
                      also the output register, valid after the last pass
====================  ===============================================================

The pass select sits in front of the operand register the engine has anyway (the
window must wait a cycle for the weight read), so it costs no cycle and registers
b*K*K words instead of S*K*K.

Flow control: the pipeline never stalls (``hw.arith.pipeline.CreditedOutput``): every
register and multiplier loads every cycle, a partial sum the consumer does not take waits
in a buffer of ``latency + 1`` beats, and a group's last pass is issued only while that
buffer has a place for every partial sum in flight. With a ready consumer a beat leaves
in the cycle it is computed. Sums are exact: the adder tree grows one bit per level and
the mapping guarantees the full sum fits ACC_BITS. The pipeline, adder tree,
accumulators and step counter are ``hw.engines.common``'s, shared with the EB and PG
engines.

``pass_windows``: the windows arrive a pass at a time, one beat of b*K*K words per step in
the walk's order (a fully connected layer's input, turned by ``hw.memory.fc_store.
FcWindowStore``, which replays a sample's passes for each group), so there is no pass select:
a window of all S channels would be the whole flattened input.
"""

from amaranth.hdl import Cat, Module, Mux, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.memories import fp_latency, tree_levels
from mapping.numerics import ACC_BITS

from ..arith.mult import LATENCY
from ..arith.pipeline import CreditedOutput, Pipeline
from ..base.checks import positive
from ..base.layouts import flat_elements, psum_layout, window_layout
from ..base.signatures import WeightPortSignature
from ..memory.param_ram import WeightWalk
from .common import Issue, multiply, select_words


class FPEngine(WeightWalk, wiring.Component):
    """``ces`` CEs of ``tiles`` tiles over windows of ``channels`` x ``kernel`` x ``kernel`` words.

    Ports: ``windows`` (window stream in), ``weights`` (a ``WeightPortSignature``
    (synchronous weight read port, engine side: ``rows`` = G*v addresses of P rows of
    b*K*K words), ``psums`` (partial-sum stream out).
    ``tiles``: b, None for one per input channel; ``passes``: v.
    ``latency``: cycles from issuing a group's last pass to its partial sums, with no stall.
    ``pass_windows``: one window beat of b*K*K words per step (module docstring).
    """

    def __init__(self, *, channels, kernel, ces, out_channels, tiles=None, pass_windows=False, family=None):
        positive(self, "conv engine", channels=channels, kernel=kernel, ces=ces, out_channels=out_channels)
        self.channels, self.kernel, self.ces = channels, kernel, ces
        self.out_channels, self.family, self.pass_windows = out_channels, family, pass_windows
        self._walk("conv engine", out_channels=out_channels, in_channels=channels, kernel=kernel,
                   banks=ces, tiles=tiles)
        self.taps = self.words
        self.levels = tree_levels(self.taps)
        self.latency = fp_latency(self.taps, self.passes)
        super().__init__({
            "windows": In(stream.Signature(window_layout(self.tiles if pass_windows else channels, kernel))),
            "weights": Out(WeightPortSignature(self.rows, ces, self.tiles * kernel * kernel)),
            "psums": Out(stream.Signature(psum_layout(ces))),
        })

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The FP engine of a ``mapping.nodeconfig.LayerSlice`` (b = its tiles, at most one per input
        channel), taking a pass's window per step after a flatten (``LayerSlice.map_pixels``)."""
        engine, s = layer_slice.fp, layer_slice
        if engine.kernel != s.kernel or engine.tiles > s.in_channels:
            raise ValueError(
                f"conv engine: layer {s.layer} has an FP engine of {engine.tiles} tiles of "
                f"{engine.kernel}x{engine.kernel}, but its slice needs at most {s.in_channels} tiles "
                f"(one per input channel) of {s.kernel}x{s.kernel}")
        return cls(channels=s.in_channels, kernel=s.kernel, ces=engine.ces, out_channels=s.out_channels,
                   tiles=engine.tiles, pass_windows=s.map_pixels > 1, family=family)

    @property
    def multipliers(self):
        return self.ces * self.taps

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()
        credit = CreditedOutput(self.latency + 1, self.family)

        # Issue: one weight row (group of P output channels, pass of b input channels) per cycle.
        issue = Issue(m, self.groups, self.passes, self.windows.valid, credit.room, group_major=True)
        m.d.comb += [self.weights.en.eq(issue.issue), self.weights.addr.eq(issue.addr),
                     self.windows.ready.eq(credit.room if self.pass_windows else issue.accept)]

        words = (self.windows.payload.as_value() if self.pass_windows
                 else select_words(self.windows.payload, issue.pass_, self.passes, self.taps))
        window = window_layout(self.tiles, self.kernel)(pipe.stage(words))
        valid = pipe.stage(issue.issue, reset=True)
        first, last_pass, last_group = (pipe.stage(flag) for flag in (issue.first_pass, issue.last_pass, issue.last_group))
        weights = flat_elements(self.weights.data.as_value(), self.weights.data.shape())
        products = [[multiply(m, f"mult_{p}_{j}", window[j], weights[p * self.taps + j], self.family)
                     for j in range(self.taps)] for p in range(self.ces)]

        # Lanes past OC exist only in the last group; their weight rows are not read as zero,
        # so the tree's last level zeroes them (``last_group`` aligned with that level's input).
        live_in_last = self.out_channels - (self.groups - 1) * self.ces
        last_group = pipe.delay(last_group, LATENCY + self.levels - 1)
        sums = [pipe.adder_tree(products[p], signed(ACC_BITS),
                                (lambda total: Mux(last_group, 0, total)) if p >= live_in_last else None)
                for p in range(self.ces)]
        valid = pipe.delay(valid, LATENCY + self.levels, reset=True)
        first, last_pass = (pipe.delay(flag, LATENCY + self.levels) for flag in (first, last_pass))
        if self.passes > 1:
            sums = pipe.accumulate(sums, first, valid, signed(ACC_BITS))
            valid = pipe.stage(valid & last_pass, reset=True)

        credit.attach(m, produced=issue.issue & issue.last_pass, valid=valid, payload=Cat(*sums), out=self.psums)
        pipe.attach(m)
        return m
