"""Resource cost model shared by the mapping's estimates and hw/'s checks.

Memories
--------
Every RAM is described by the width of one access (bits) and its depth (words of
that width). Block RAM on every supported family is built from 18 Kb blocks
(ECP5 DP16KD, Xilinx RAMB18) with the same six aspect ratios; a memory wider
than one block uses several side by side and a deeper one several stacked, so
:func:`bram_blocks` tries every aspect ratio and keeps the cheapest.

Memories no deeper than :data:`LUTRAM_MAX_DEPTH` words go to distributed RAM
(LUTs) instead, as Yosys' memory mapping does for shallow memories: a Xilinx
LUT6 is a 64 x 1 RAM, an ECP5 TRELLIS_DPR16X4 a 16 x 4 RAM built from two LUT4s.
Such a memory costs no block RAM but :func:`lutram_luts` LUTs.

UltraRAM (288 Kb, UltraScale+) is counted as 16 block-RAM equivalents: the
mapping treats a device's on-chip RAM as one pool of 18 Kb units.

Multipliers
-----------
One hard multiplier (DSP48E1/E2 slice, ECP5 MULT18X18D) per 16 x 16 product:
a K x K tile costs K*K of them (:func:`tile_multipliers`).

Logic
-----
LUT and FF figures are a linear model, documented at the constants: per layer
slice (its line buffers, gradient buffers' adders and update path, stochastic
rounders, gates and stream plumbing), per multiplier (operand registers, the
K*K adder tree where the family's DSP cannot cascade it), per distributed-RAM
bit, and a per-node base. On ECP5 LUTs count LUT4 sites: a carry cell or a
16 x 4 distributed RAM fills two (as ``hw.synth.SynthResult.lut`` counts them).
``python -m hw.build`` compares them with Yosys.
"""

from dataclasses import dataclass
import math

from . import link_model
from .devices import BRAM_BLOCK_BITS, URAM_BLOCK_BITS, FAMILIES
from .numerics import WORD_BITS

# (depth, width) shapes of one 18 Kb block; the same on ECP5 DP16KD and Xilinx RAMB18.
BLOCK_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))

# Memories this shallow or shallower are distributed RAM: a LUT6 RAM is 64 deep on
# Xilinx; on ECP5 the distributed RAM primitive is 16 deep, and deeper memories
# would chain so many of them that Yosys maps them to DP16KD.
LUTRAM_MAX_DEPTH = {"ecp5": 16, "xc7": 64, "zynqmp": 64, "virtexuplus": 64}

URAM_IN_BLOCKS = URAM_BLOCK_BITS // BRAM_BLOCK_BITS

# Logic model (see module docstring). The ECP5 figures are a relative least-squares fit
# (non-negative) to Yosys synth_ecp5 of thirteen generated nodes, synthesized module by
# module as hw.build does (LUT4 sites, carry cells and distributed RAM counted), at 1f48c7d:
# the default chain's four (tiny on ecp5-85:2+ecp5-45:2), tiny on ecp5-85:3 with 40
# multipliers (three nodes), on ecp5-45:4 (nodes 0 and 3), on ecp5-85:2 and ecp5-85:1 (node
# 0), lenet-digits' node 0 on ecp5-85:4 and node 1 on ecp5-85:3: one to three slices, 9 to
# 135 multipliers, the update lanes and distributed RAM taken as given. Each is within 12%
# in LUTs and 20% in FFs (the default chain's within 8% and 12%). Two nodes are outside it:
# lenet-digits' last node (conv2, fc1, fc2) on ecp5-85:3 and ecp5-85:4, 24-28% more LUTs and
# 33-38% more FFs than the model, whose terms do not grow with a slice's channels (its fully
# connected stores do). Per multiplier: the engines' adder trees (MULT18X18D has no
# accumulator), the gradient terms' saturating adds, the line buffers' windows; per slice
# its update path, rounders, gates and SFU; an EB engine adds its error line buffer and
# rounder. The Xilinx figures are not fitted to synthesis (docs/design.md has what Yosys's
# synth_xilinx gives for a paper-scale node).
LUT_PER_MULTIPLIER = {"ecp5": 130, "xc7": 6, "zynqmp": 6, "virtexuplus": 6}
FF_PER_MULTIPLIER = {"ecp5": 150, "xc7": 40, "zynqmp": 40, "virtexuplus": 40}
LUT_PER_SLICE = {"ecp5": 7600, "xc7": 0, "zynqmp": 0, "virtexuplus": 0}
FF_PER_SLICE = {"ecp5": 4900, "xc7": 0, "zynqmp": 0, "virtexuplus": 0}
LUT_PER_EB_SLICE = {"ecp5": 3200, "xc7": 0, "zynqmp": 0, "virtexuplus": 0}
FF_PER_EB_SLICE = {"ecp5": 2400, "xc7": 0, "zynqmp": 0, "virtexuplus": 0}
NODE_BASE_LUT = {"ecp5": 0, "xc7": 8000, "zynqmp": 8000, "virtexuplus": 8000}
NODE_BASE_FF = {"ecp5": 0, "xc7": 12000, "zynqmp": 12000, "virtexuplus": 12000}

# Hard multiplier operand widths (signed) per family: DSP48E1 25x18, DSP48E2 27x18,
# MULT18X18D 18x18.
MULTIPLIER_WIDTHS = {"ecp5": (18, 18), "xc7": (25, 18), "zynqmp": (27, 18), "virtexuplus": (27, 18)}


def _family(family):
    if family not in FAMILIES:
        raise ValueError(f"resources: unknown device family '{family}' (known: {', '.join(FAMILIES)})")
    return family


# A memory one word deep is a register (Yosys ram_style "logic"): as distributed RAM each
# 4 bits of it took a DPR16X4 (two LUT4s and a write port's slice) to hold one word, and a
# first layer's weight memories are one word deep (node 0 of the default mapping: 640 DPR16X4,
# 3,200 LUT4 for 2,560 FFs).
def is_register(depth):
    return depth == 1


def is_lutram(depth, family):
    return 1 < depth <= LUTRAM_MAX_DEPTH[_family(family)]


def ram_style(depth, family):
    """Yosys ``ram_style`` of a memory ``depth`` deep: the one rule the hardware applies to
    every memory it builds (so block RAM estimates and synthesis agree) and this module
    prices with."""
    if depth > LUTRAM_MAX_DEPTH[_family(family)]:
        return "block"
    return "logic" if is_register(depth) else "distributed"


# Both ports of a block read at full width only up to 18 bits (ECP5 DP16KD and Xilinx
# RAMB18 in true dual-port mode); the 36-bit shape is simple dual port (one read port).
DUAL_READ_MAX_WIDTH = 18


def bram_blocks(width_bits, depth, family, dual_read=False):
    """18 Kb blocks for a ``width_bits`` x ``depth`` RAM (0 if it goes to distributed RAM).

    ``dual_read``: two readers each read a whole word per cycle (true dual port)."""
    if width_bits <= 0 or depth <= 0 or ram_style(depth, family) != "block":
        return 0
    return min(math.ceil(width_bits / w) * math.ceil(depth / d) for d, w in BLOCK_SHAPES
               if not dual_read or w <= DUAL_READ_MAX_WIDTH)


def lutram_luts(width_bits, depth, family):
    """LUTs of a distributed RAM (0 if the memory goes to block RAM)."""
    if width_bits <= 0 or depth <= 0 or not is_lutram(depth, family):
        return 0
    if family == "ecp5":  # TRELLIS_DPR16X4: 16 x 4 bits in two LUT4s
        return 2 * math.ceil(width_bits / 4) * math.ceil(depth / 16)
    return width_bits * math.ceil(depth / 64)  # one LUT6 per 64 x 1 bits


def register_bits(width_bits, depth):
    """Flip-flops of a memory built as registers (0 if it goes to RAM)."""
    return width_bits * depth if width_bits > 0 and is_register(depth) else 0


@dataclass(frozen=True)
class MemoryCost:
    bram_blocks: int = 0
    lut: int = 0
    bits: int = 0  # payload bits (width x depth)
    ff: int = 0    # bits of the memories built as registers

    def __add__(self, other):
        return MemoryCost(self.bram_blocks + other.bram_blocks, self.lut + other.lut,
                          self.bits + other.bits, self.ff + other.ff)


def memory_cost(width_bits, depth, family, count=1, dual_read=False):
    """Cost of ``count`` identical ``width_bits`` x ``depth`` memories."""
    if width_bits <= 0 or depth <= 0 or count <= 0:
        return MemoryCost()
    return MemoryCost(count * bram_blocks(width_bits, depth, family, dual_read),
                      count * lutram_luts(width_bits, depth, family),
                      count * width_bits * depth, count * register_bits(width_bits, depth))


# hw/memory/grad_buffer.py forms gsum * lr with three multipliers (the 48-bit sum split 17 + 17 +
# 14 bits), once per gradient buffer: the LGB, and the bias LGB of a slice owning biases.
UPDATE_MULTIPLIERS = 3


def update_multipliers(owns_biases, lanes=1):
    """Multipliers of a slice's weight update over ``lanes`` words a cycle and, with biases,
    of its bias update (one lane)."""
    return UPDATE_MULTIPLIERS * (lanes + (1 if owns_biases else 0))


# Logic of each weight-update lane past the first (its three multipliers are not counted
# in LUT_PER_MULTIPLIER / FF_PER_MULTIPLIER for it): the rounder lane (noise mixing, 17 +
# shift bits delayed through it), the sum and weight selects, the subtract and saturate.
# Measured with Yosys on a GradientBuffer of 2 banks x 9 words at 1, 4 and 9 lanes: 726-739
# LUT and 796-804 FF per lane on ECP5, 490-513 LUT and 830 FF on xc7; then 64 FF more per
# lane for the registers of each lane's selected sum and old weight in front of its
# multipliers (measured on ECP5, shift 8: 690 -> 754 FF per lane from 1 to 9 lanes), less
# an earlier per-multiplier share. Fitted freely with the nodes above, the lane comes out at
# 589 LUT and 354 FF on ECP5.
UPDATE_LANE_LUT = {"ecp5": 540, "xc7": 480, "zynqmp": 480, "virtexuplus": 480}
UPDATE_LANE_FF = {"ecp5": 560, "xc7": 774, "zynqmp": 774, "virtexuplus": 774}


def update_lane_logic(lanes, family):
    """(LUT, FF, multipliers) that ``lanes`` weight-update lanes past the first add."""
    family = _family(family)
    return UPDATE_LANE_LUT[family] * lanes, UPDATE_LANE_FF[family] * lanes, UPDATE_MULTIPLIERS * lanes


# What a link core adds at one end of a link (hw/link: a link layer and its lane), measured
# with Yosys: on ECP5 2,785-4,247 LUT4 (micro's 3 channels to tiny's 5, synth_ecp5), on xc7
# 1,900 LUT for the GTH endpoint (sim/test_link_synth.py); its block RAM is
# :func:`link_core_blocks`. A node has one per neighbour, on the same chip or not; the node
# estimates (hw.build's node, without its links) leave them out.
LINK_CORE_LUT = {"ecp5": 4300, "xc7": 2000, "zynqmp": 2000, "virtexuplus": 2000}


def link_core_blocks(received, channels, family, lane_width=link_model.LANE_WIDTH,
                     phy_latency=link_model.PHY_LATENCY, burst_words=link_model.BURST_WORDS):
    """18 Kb blocks of one link endpoint in a node, on a link whose channels are ``channels``
    bits wide (both directions) sized as ``hw.link.protocol.sized_config`` sizes them: the receive
    buffer of each of the ``received`` channels (a SyncFIFOBuffered of the receive depth: that
    less one word in RAM, the other in its output register) and the replay ring of flits. The
    buffers of the channels the endpoint sends are never written, so synthesis removes them; the
    ring of frame starts and the receiver's ring are read asynchronously (distributed RAM)."""
    depth, frames = link_model.sized_buffers(channels, lane_width, phy_latency, burst_words)
    flits = [link_model.payload_flits(w, lane_width) for w in channels]
    ring = link_model.replay_flits(frames, min(flits), burst_words, max(flits))
    return (sum(bram_blocks(width, depth - 1, family) for width in received)
            + bram_blocks(lane_width, ring, family))


def link_cores(index, nodes):
    """Link cores of node ``index`` of a chain of ``nodes``: one per neighbour."""
    return (index > 0) + (index < nodes - 1)


def link_core_luts(index, nodes, family):
    """LUTs of node ``index``'s link cores."""
    return link_cores(index, nodes) * LINK_CORE_LUT[_family(family)]


def onchip_blocks(device):
    """The device's on-chip RAM in 18 Kb units (UltraRAM counted as 16 each)."""
    return device.bram_blocks + device.uram_blocks * URAM_IN_BLOCKS


def tile_multipliers(kernel, family):
    """Hard multipliers of one K x K tile of 16 x 16 products."""
    return kernel * kernel * dsp_per_product(WORD_BITS, WORD_BITS, family)


def dsp_per_product(a_bits, b_bits, family):
    """Hard multipliers for one signed a x b product, splitting the wider operand."""
    wa, wb = MULTIPLIER_WIDTHS[_family(family)]
    return min(math.ceil((a_bits - 1) / (wa - 1)) * math.ceil((b_bits - 1) / (wb - 1)),
               math.ceil((a_bits - 1) / (wb - 1)) * math.ceil((b_bits - 1) / (wa - 1)))


def skid_ff(in_channels, eb_join):
    """Flip-flops of a slice's skid buffers (hw/node/slice_unit.py; two beats each): between its
    Act-RAM and its PG line buffer (pixels of its ``in_channels`` words, the channels of the map
    a fully connected layer flattens) and, ``eb_join`` (an ICP
    slice with EB, not its layer's last), between its rounded EB errors (as many words) and
    their join with the next node's. Grows with the channels, unlike the per-slice constants
    (an fc slice's 32 channels: 1,024 each)."""
    return 2 * in_channels * WORD_BITS * (2 if eb_join else 1)


def logic_estimate(slices, eb_slices, multipliers, lutram_lut, family):
    """(LUT, FF) of a node with ``slices`` layer slices (``eb_slices`` of them with an EB
    engine), ``multipliers`` multipliers and ``lutram_lut`` LUTs of RAM."""
    family = _family(family)
    lut = (NODE_BASE_LUT[family] + LUT_PER_SLICE[family] * slices + LUT_PER_EB_SLICE[family] * eb_slices
           + LUT_PER_MULTIPLIER[family] * multipliers + lutram_lut)
    ff = (NODE_BASE_FF[family] + FF_PER_SLICE[family] * slices + FF_PER_EB_SLICE[family] * eb_slices
          + FF_PER_MULTIPLIER[family] * multipliers)
    return lut, ff
