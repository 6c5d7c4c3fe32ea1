"""Convolution engine: P CEs of S x K x K multipliers, one partial sum per CE per cycle.

Paper section 5.3: a window of ``S*K*K`` words (the slice's S input channels, K x K
taps each) is broadcast to P convolution engines (CEs); CE ``p`` holds ``S`` tiles of
``K*K`` multiply-accumulate units and produces, per cycle, the partial sum of one
output channel over the slice's input channels. The engine visits the output
channels in groups of P: for each window it reads weight rows ``g = 0 .. G-1``
(``G = ceil(OC / P)``; row ``g`` of bank ``p`` is output channel ``g*P + p``) and
emits ``G`` partial-sum beats, lanes past OC in the last group being zero. The
window is accepted when its last group is issued, so with continuous input and a
ready output every multiplier is busy every cycle.

Pipeline, from the cycle a group is issued (weight read enabled):

====================  ===============================================================
issue                 ``weight_en``, ``weight_addr = g``; the window is registered
+1                    weight row and window presented to the multipliers
+1 + LATENCY          products (``hw.mult.Multiplier``, registered in and out)
+1 + LATENCY + L      pipelined adder tree, one register per level, ``L = ceil(log2(S*K*K))``
                      (at least one); the last level widens to ACC_BITS and zeroes the
                      lanes past OC
====================  ===============================================================

Flow control: every register of the pipeline (multipliers included) advances on one
enable, ``advance = ~psums.valid | psums.ready``; a stall holds the whole pipeline,
and the weight memory holds its output while ``weight_en`` is low, so nothing is lost
or duplicated and no skid buffer is needed. Sums are exact: the adder tree grows one
bit per level and the mapping guarantees the full sum fits ACC_BITS. The pipeline,
adder tree and group counter are ``hw.engine_common``'s, shared with the EB and PG engines.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.engine_common import GroupIssue, Pipeline, multiply, tree_levels
from hw.mult import LATENCY
from hw.rounding import refuse
from mapping.numerics import ACC_BITS, WORD_BITS


def window_layout(channels, kernel):
    """One window (or one weight row): ``channels*kernel*kernel`` words, channel-major."""
    return data.ArrayLayout(signed(WORD_BITS), channels * kernel * kernel)


def psum_layout(lanes):
    return data.StructLayout({"values": data.ArrayLayout(signed(ACC_BITS), lanes)})


class ConvEngine(wiring.Component):
    """``ces`` CEs over windows of ``channels`` x ``kernel`` x ``kernel`` words.

    Ports: ``windows`` (window stream in), ``weight_addr``/``weight_en``/``weight_data``
    (synchronous weight read port, engine side), ``psums`` (partial-sum stream out).
    ``latency``: cycles from issuing a group to its partial sums, with no stall.
    """

    def __init__(self, *, channels, kernel, ces, out_channels, family=None):
        for name, value in (("channels", channels), ("kernel", kernel), ("ces", ces),
                            ("out_channels", out_channels)):
            if value < 1:
                refuse(self, f"conv engine: {name} = {value} must be at least 1")
        self.channels, self.kernel, self.ces = channels, kernel, ces
        self.out_channels, self.family = out_channels, family
        self.taps = channels * kernel * kernel
        self.groups = -(-out_channels // ces)
        self.levels = tree_levels(self.taps)
        self.latency = 1 + LATENCY + self.levels
        window = window_layout(channels, kernel)
        super().__init__({
            "windows": In(stream.Signature(window)),
            "weight_addr": Out(range(self.groups)),
            "weight_en": Out(1),
            "weight_data": In(data.ArrayLayout(window, ces)),
            "psums": Out(stream.Signature(psum_layout(ces))),
        })

    @classmethod
    def from_slice(cls, layer_slice, family=None):
        """The FP engine of a ``mapping.nodeconfig.LayerSlice`` (one tile per input channel)."""
        engine = layer_slice.fp
        if engine.tiles != layer_slice.in_channels or engine.kernel != layer_slice.kernel:
            raise ValueError(
                f"conv engine: layer {layer_slice.layer} has an FP engine of {engine.tiles} tiles of "
                f"{engine.kernel}x{engine.kernel}, but its slice needs {layer_slice.in_channels} tiles "
                f"of {layer_slice.kernel}x{layer_slice.kernel} (one per input channel)")
        return cls(channels=layer_slice.in_channels, kernel=layer_slice.kernel, ces=engine.ces,
                   out_channels=layer_slice.out_channels, family=family)

    @property
    def multipliers(self):
        return self.ces * self.taps

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline()
        advance = Signal()
        m.d.comb += advance.eq(~self.psums.valid | self.psums.ready)

        # Issue: one weight row (group of P output channels) per cycle for the current window.
        issue = GroupIssue(m, self.groups, self.windows.valid, advance)
        m.d.comb += [self.weight_en.eq(issue.issue), self.weight_addr.eq(issue.group),
                     self.windows.ready.eq(issue.accept)]

        window = window_layout(self.channels, self.kernel)(pipe.stage(self.windows.payload.as_value()))
        valid, last = pipe.stage(self.windows.valid), pipe.stage(issue.last)
        products = [[multiply(m, f"mult_{p}_{j}", window[j], self.weight_data[p][j], advance, self.family)
                     for j in range(self.taps)] for p in range(self.ces)]

        # Lanes past OC exist only in the last group; their weight rows are not read as zero,
        # so the tree's last level zeroes them (``last`` aligned with that level's input).
        live_in_last = self.out_channels - (self.groups - 1) * self.ces
        last = pipe.delay(last, LATENCY + self.levels - 1)
        sums = [pipe.adder_tree(products[p], signed(ACC_BITS),
                                (lambda total: Mux(last, 0, total)) if p >= live_in_last else None)
                for p in range(self.ces)]
        valid = pipe.delay(valid, LATENCY + self.levels)

        m.d.comb += [self.psums.valid.eq(valid), self.psums.payload.values.eq(Cat(*sums))]
        pipe.attach(m, advance)
        return m
