"""AccPar's cost model (AccPar, HPCA 2020, section 4): tensor sizes, Tables 4, 5 and 6.

A weighted layer l (convolution or fully connected) is described by the
dimensions AccPar partitions: batch ``B``, input channels ``D_i``, output
channels ``D_o``, plus the "meta" dimensions it carries along (section 4.3):
the input and output feature-map areas and the kernel area. Sizes are in
elements; the caller converts to bytes and seconds.

Partition types (section 3.2): Type-I splits B, Type-II splits D_i (forward
partial sums reduced), Type-III splits D_o (backward partial sums reduced).
Between layers a tensor is held in one of three layouts: split along the
batch ("B"), split along channels ("C") or replicated ("R"). A layer of each
type needs its input and leaves its output as::

    type   input  output
    I      B      B
    II     C      R      (the reduced forward partial sum is read by both sides)
    III    R      C

and Table 5's nine inter-layer costs are the conversions between the producer's
output layout and the consumer's input layout; the same rule prices the joins
of multi-path blocks (section 5.2), which keep one layout in and out.
"""

from dataclasses import dataclass, replace

TYPES = ("I", "II", "III")
IN_LAYOUT = {"I": "B", "II": "C", "III": "R"}
OUT_LAYOUT = {"I": "B", "II": "R", "III": "C"}
LAYOUTS = ("B", "C", "R")


@dataclass(frozen=True)
class LayerDims:
    """One weighted layer's partitionable dimensions (floats: hierarchy levels split them)."""

    name: str
    kind: str          # "conv" or "fc"
    batch: float       # B
    d_in: float        # D_i,l
    d_out: float       # D_o,l
    in_area: int       # input feature map H*W (1 for fc)
    out_area: int      # output feature map H*W (1 for fc)
    kernel_area: int   # kernel K*K (1 for fc)
    macs_per_output: float  # products summed per forward output element (D_i*K*K/groups)
    needs_eb: bool = True   # the first layer's input error is never used

    @property
    def weights(self):
        """A(W_l): every input channel to every output channel, over the kernel window."""
        return self.macs_per_output * self.d_out

    @property
    def out_features(self):
        """A(F_l+1), the output feature map over the batch."""
        return self.batch * self.d_out * self.out_area

    @property
    def in_errors(self):
        """A(E_l), the error this layer sends back (the size of its input F_l)."""
        return self.batch * self.d_in * self.in_area if self.needs_eb else 0.0

    @property
    def in_features(self):
        return self.batch * self.d_in * self.in_area

    @property
    def macs(self):
        """Products of one phase (FP, EB and PG each perform the same products)."""
        return self.out_features * self.macs_per_output

    def split(self, partition_type, share):
        """The part of this layer one side keeps under ``partition_type`` with ``share`` of it."""
        if partition_type == "I":
            return replace(self, batch=self.batch * share)
        if partition_type == "II":
            return replace(self, d_in=self.d_in * share, macs_per_output=self.macs_per_output * share)
        return replace(self, d_out=self.d_out * share)


def flop(dims):
    """Table 6 (with section 4.3's convolution rule): FP, EB and PG floating-point operations.

    Each output element costs its products plus one fewer additions: FP
    A(F_l+1)(2 D_i K^2 - 1), EB A(E_l)(2 D_o K^2 - 1) (for a stride-1
    convolution; with stride s the input pixel sees K^2/s^2 taps, so we count the
    products actually made), PG A(W_l)(2 B H_out W_out - 1)."""
    fp = dims.out_features * (2 * dims.macs_per_output - 1)
    eb = (2 * dims.macs - dims.in_errors) if dims.needs_eb else 0.0
    pg = dims.weights * (2 * dims.batch * dims.out_area - 1)
    return fp, eb, pg


def total_flop(dims):
    return sum(flop(dims))


def intra_elements(dims, partition_type):
    """Table 4: the partial-sum tensor one side reads from the other (independent of the ratio)."""
    if partition_type == "I":
        return dims.weights
    if partition_type == "II":
        return dims.out_features
    return dims.in_errors


def conversion_factor(source, target, own, other):
    """Table 5 as layouts: the share of the boundary tensor F (forward) and E (backward)
    one side with ratio ``own`` reads from the side with ratio ``other``.

    Returns (factor on A(F), factor on A(E))."""
    if source == target:
        return 0.0, 0.0
    if {source, target} == {"B", "C"}:          # I->II, III->I: a block of the other's rows
        return own * other, own * other
    if target == "R":                           # I->III, III->III: gather the other's part of F
        return other, 0.0
    return 0.0, other                           # II->I, II->II: gather the other's part of E


def conversion_elements(source, target, boundary_elements, own, other):
    f, e = conversion_factor(source, target, own, other)
    return (f + e) * boundary_elements


def dims_of(info, batch, first):
    """LayerDims of a weighted LayerInfo (conv2d or linear) at mini-batch ``batch``."""
    c_in, h_in, w_in = info.in_shape
    c_out, h_out, w_out = info.out_shape
    kind = "conv" if info.type == "conv2d" else "fc"
    kernel_area = info.kernel ** 2 if kind == "conv" else 1
    return LayerDims(info.name, kind, float(batch), float(c_in), float(c_out), h_in * w_in,
                     h_out * w_out, kernel_area, info.weights / c_out, needs_eb=not first)
