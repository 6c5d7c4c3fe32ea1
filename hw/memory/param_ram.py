"""LPRAM and BPRAM: a slice's weights, wide rows read one address per cycle (paper 5.2.2).

Organisation
------------
``banks`` (P, the number of CEs) banks of ``rows`` rows; a row is ``words`` 16-bit
words, and all P banks share the address, so one read returns P rows. Physically it
is one memory of ``rows`` entries of P*words words.

An LPRAM holds a slice of O output and S input channels whose engines have b tiles
per CE (:class:`WeightLayout`): each output channel's weights are cut into v =
ceil(S / b) passes of b input channels, ``words = b*K*K``, ``rows = G*v`` with G =
ceil(O / P). Address g*v + i (group-major, pass-minor) of bank p holds output
channel o = g*P + p for input channels i*b .. i*b+b-1, flattened (b, K, K)
row-major; zero where o >= O or the channel >= S. Unfolded (b = S, v = 1) a row is
one output channel's whole (S, K, K) weights and address g is group g.

Ports
-----
- ``a``: the FP conv engine's weight read port (or, in a bias RAM, the SFU's).
- ``b``: the EB conv engine's weight read port. EB runs concurrently with FP on
  another sample, so it has its own port: ``a`` and ``b`` are the two ports of a
  true dual-port block RAM.
- ``upd``: the weight update (:class:`hw.memory.grad_buffer.GradientBuffer`) reads rows
  through port A (the FP port, idle during the update) and writes the words of a chunk
  (a mask of the row's words) through port B, both in one cycle; a bias RAM
  (``shared_update``, its port A being the SFU's) reads and writes through port B.
  Word-granular writes let the update write a chunk's new words as they leave the
  rounder, with no row-sized staging register; the price is that every word takes a
  full 18-bit column of the block RAM (its two 9-bit byte enables), i.e.
  ``P*words*ceil(rows/1024)`` DP16KD on ECP5 instead of
  ``ceil(P*words*16/18)*ceil(rows/1024)`` for whole-row writes. On ECP5 both read
  registers, their hold and the word writes are the DP16KD's own (no fabric logic but
  the address muxes); on xc7 a port has a single enable for reading and writing, so
  Yosys emulates port B's hold through the update's writes with a flip-flop and a LUT
  per row bit.

The read ports follow the engine-side convention: synchronous read, data valid the
cycle after ``weight_en``, held while ``weight_en`` is low.

Memory: (P*words*18 bits, ``rows``), read by two ports (A and B): each 16-bit word
takes an 18-bit column because of the word writes. LPRAM: P*b*K*K*18 x G*v; bias
RAM: P*18 x G; BPRAM: as the owner's LPRAM, P*b*K*K*18 x G_r*v for its G_r
hosted groups.
``family``: the device family (``ram_style`` by ``mapping.resources.ram_style``); None
simulates.

Port A serves FP or the update's reads, port B EB or the update's writes (``shared``:
and reads), never both in one cycle: the update runs at a mini-batch boundary while FP
and EB are idle (hw.memory.update_gate guarantees it), and it relies on the row it read
being held, which an FP read would replace. A read on port A of the row being written in
that cycle is a block-RAM collision with undefined data. These misuses are Amaranth
``Assert``s, so they fail any simulation.

Host access
-----------
``host`` (:class:`~hw.base.signatures.HostPortSignature`) loads initial weights and reads
trained ones back while the node is idle (boards/: the host interface): a read borrows
port A's address and enable, the word is selected from port A's read register; a write
is one word through port B's word writes. No extra block-RAM port and no extra read
register, only two address muxes and a lane mux. Using it while an engine or the update
uses that port is an ``Assert``.

Versions
--------
:class:`VersionedParamRam` has the same ports over three ParamRams, for the update that
does not stop the engines: the engines read one copy while the update walks the next version
into the other (docs/weight_versions.md).

BPRAM
-----
A BPRAM (weights hosted for another node, paper Fig. 6) is an ordinary ParamRam laid
out like the owner's LPRAM past its local rows. Its ports A and B are driven by
``hw.balance.weight_stream.RowStreamer`` s, which stream its rows to the owner's FP and EB
engines (see hw/balance/hosted_rows.py).
"""

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Assert, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In

from mapping.numerics import WORD_BITS, WORD_MAX, WORD_MIN

from ..base.checks import positive, refuse
from ..base.ram import NO_RW_CHECK, ram_attrs, read_register
from ..base.signatures import HostPortSignature, UpdatePortSignature, WeightPortSignature


def weight_block(weights, s):
    """A layer's weight words viewed as (OC, IC / G, K, K) and the index of slice ``s``'s block
    in that view (its output channels, its input channels counted from its group's first)."""
    shaped = np.asarray(weights).reshape(weights.shape[0], s.in_shape[0] // s.groups, s.kernel, s.kernel)
    (olo, ohi), (ilo, ihi) = s.out_range, s.group_in_range
    return shaped, (slice(olo, ohi), slice(ilo, ihi))


def slice_weights(s, params):
    """The slice's initial (W, b) words from whole-layer parameters, or zeros: the weights of its
    rows, the biases of the channels its SFU finishes (``LayerSlice.sfu_range``; none if it
    runs no SFU)."""
    kk = s.kernel * s.kernel
    (olo, ohi), (blo, bhi) = s.out_range, s.sfu_range
    if params is None or s.layer not in params:
        return np.zeros((ohi - olo, s.in_channels * kk), np.int64), np.zeros(bhi - blo, np.int64)
    weights, bias = params[s.layer]
    shaped, index = weight_block(weights, s)
    block = shaped[index].reshape(ohi - olo, -1)
    bias = np.zeros(weights.shape[0], np.int64) if bias is None else np.asarray(bias)
    return block, bias[blo:bhi]


def memory_contents(params, s, ram, *, bias=False):
    """The rows of ``ram`` (a ParamRam, or anything with its ``layout``, ``banks``, ``rows`` and
    ``words``) for the parameter words ``params`` (golden layout): the weights of slice ``s``'s
    rows, or with ``bias`` the biases its SFU finishes; ``rows`` lists of ``banks * words`` words."""
    weights, biases = slice_weights(s, params)
    if bias:
        return bank_rows(biases.reshape(-1, 1), ram.banks, ram.rows, 1)
    return ram.layout.fold(weights).reshape(ram.rows, -1).tolist()


def store_contents(params, s, ram, contents, *, bias=False):
    """The inverse of :func:`memory_contents`: ``ram``'s words ``contents`` (any shape,
    address-major) into ``params`` (golden layout, changed in place)."""
    if bias:
        lo, hi = s.sfu_range
        params[s.layer][1][lo:hi] = np.asarray(contents).reshape(-1)[:hi - lo]
        return
    shaped, block = weight_block(params[s.layer][0], s)
    shaped[block] = ram.layout.unfold(np.asarray(contents))


def checked_words(weights):
    """``weights`` as an int64 array, refused if a word is outside the 16-bit range."""
    w = np.asarray(weights, dtype=np.int64)
    if w.size and (w.min() < WORD_MIN or w.max() > WORD_MAX):
        raise ValueError(f"param ram: initial weight {w.min() if w.min() < WORD_MIN else w.max()} "
                         f"is outside the {WORD_BITS}-bit word range")
    return w


def bank_rows(weights, banks, rows, words):
    """Memory contents from a slice's weight words, (out_channels, S, K, K) or (out_channels, words).

    Returns ``rows`` lists of ``banks * words`` ints; channels past the slice's are zero.
    """
    w = checked_words(weights)
    if w.ndim < 2 or not 0 < w.shape[0] <= banks * rows or w[0].size != words:
        raise ValueError(f"param ram: initial weights of shape {w.shape} do not fit {rows} rows x "
                         f"{banks} banks of {words} words")
    padded = np.zeros((rows * banks, words), dtype=np.int64)
    padded[:w.shape[0]] = w.reshape(w.shape[0], words)
    return padded.reshape(rows, banks * words).tolist()


@dataclass(frozen=True)
class WeightLayout:
    """Where a slice's weights (O, S, K, K) lie in an LPRAM, or their sums in an LGB (module docstring).

    ``tiles``: b, the input channels of one pass (the engines' tiles per CE); None is S.
    Refused (ValueError, for the owner to prefix with its name) outside 1..S.
    """

    out_channels: int
    in_channels: int
    kernel: int
    banks: int
    tiles: int | None = None

    def __post_init__(self):
        if self.tiles is None:
            object.__setattr__(self, "tiles", self.in_channels)
        if not 1 <= self.tiles <= self.in_channels:
            raise ValueError(f"tiles = {self.tiles} is not between 1 and the slice's "
                             f"{self.in_channels} input channels")

    @classmethod
    def from_slice(cls, layer_slice):
        """The LPRAM layout of a ``mapping.nodeconfig.LayerSlice``: P and b of its FP engine."""
        return cls(layer_slice.out_channels, layer_slice.in_channels, layer_slice.kernel,
                   layer_slice.fp.ces, layer_slice.fp.tiles)

    @property
    def passes(self):
        """v: addresses per output-channel group."""
        return -(-self.in_channels // self.tiles)

    @property
    def groups(self):
        return -(-self.out_channels // self.banks)

    @property
    def rows(self):
        return self.groups * self.passes

    @property
    def words(self):
        return self.tiles * self.kernel ** 2

    def _padded_shape(self):
        """(G, P, v, b*K*K): the weights padded to whole groups and passes, output-channel-major."""
        return self.groups, self.banks, self.passes, self.words

    def fold(self, weights):
        """The memory rows (rows, banks, words) holding ``weights``, (O, S, K, K) or (O, S*K*K)."""
        w = checked_words(weights)
        o, s, kk = self.out_channels, self.in_channels, self.kernel ** 2
        if w.ndim < 2 or w.shape[0] != o or w[0].size != s * kk:
            raise ValueError(f"param ram: initial weights of shape {w.shape} are not {o} output x "
                             f"{s} input channels of {self.kernel}x{self.kernel}")
        padded = np.zeros((self.groups * self.banks, self.passes * self.tiles, kk), dtype=np.int64)
        padded[:o, :s] = w.reshape(o, s, kk)
        return padded.reshape(self._padded_shape()).transpose(0, 2, 1, 3).reshape(
            self.rows, self.banks, self.words)

    def unfold(self, rows):
        """The weights (O, S, K, K) in memory contents ``rows`` (any shape of rows*banks*words
        words, address-major then bank-major), padding dropped."""
        g, p, v, words = self._padded_shape()
        k = self.kernel
        w = np.asarray(rows).reshape(g, v, p, words).transpose(0, 2, 1, 3)
        return w.reshape(g * p, v * self.tiles, k, k)[:self.out_channels, :self.in_channels]


class WeightWalk:
    """Mixin of the components that walk a :class:`WeightLayout` (the engines, the gradient
    buffer): ``self.layout`` and its tiles b per CE, passes v, output-channel groups G, G*v
    addresses and words per row."""

    def _walk(self, block, *, out_channels, in_channels, kernel, banks, tiles):
        """Set ``self.layout``, or refuse in one line naming ``block``."""
        try:
            self.layout = WeightLayout(out_channels, in_channels, kernel, banks, tiles)
        except ValueError as error:
            refuse(self, f"{block}: {error}")

    @property
    def tiles(self):
        return self.layout.tiles

    @property
    def passes(self):
        return self.layout.passes

    @property
    def groups(self):
        return self.layout.groups

    @property
    def rows(self):
        return self.layout.rows

    @property
    def words(self):
        return self.layout.words


def _from_slice(cls, layer_slice, init, family):
    """The LPRAM (a ``cls``) of a ``mapping.nodeconfig.LayerSlice`` (:meth:`WeightLayout.from_slice`).

    ``init``: the slice's weights, (O, S, K, K) or (O, S*K*K); they are folded.
    """
    try:
        layout = WeightLayout.from_slice(layer_slice)
    except ValueError as error:
        raise ValueError(f"param ram: {error}") from None
    ram = cls(banks=layout.banks, rows=layout.rows, words=layout.words, family=family,
              init=None if init is None else layout.fold(init).reshape(-1, layout.words))
    ram.layout = layout
    return ram


class ParamRam(wiring.Component):
    """Weight memory of ``banks`` x ``rows`` rows of ``words`` words (see the module docstring).

    ``init``: the slice's initial weight words, (out_channels, S, K, K) or
    (out_channels, words), out_channels <= banks * rows; default all zero.
    ``shared_update``: the update reads through port B too (a bias RAM; module docstring).

    Attribute ``layout``: the slice's :class:`WeightLayout` when built by ``from_slice``
    (testbenches read the weights back through ``layout.unfold``), else None.
    """

    def __init__(self, *, banks, rows, words, init=None, family=None, shared_update=False):
        positive(self, "param ram", banks=banks, rows=rows, words=words)
        self.banks, self.rows, self.words = banks, rows, words
        self.family = family
        self.layout = None
        try:
            self.init = bank_rows(init, banks, rows, words) if init is not None else []
        except ValueError as error:
            refuse(self, str(error))
        super().__init__({
            "a": In(WeightPortSignature(rows, banks, words)),
            "b": In(WeightPortSignature(rows, banks, words)),
            "upd": In(UpdatePortSignature(rows, banks, words, shared=shared_update)),
            "host": In(HostPortSignature(rows, banks, words)),
        })

    @classmethod
    def from_slice(cls, layer_slice, init=None, family=None):
        return _from_slice(cls, layer_slice, init, family)

    # ``memory_paths``: the memories below this component a simulator loads; the first holds
    # the trained weights (as ``mem``).
    memory_paths = ("mem",)

    def elaborate(self, platform):
        m = Module()
        lanes = self.banks * self.words
        # Kept as ``self.mem`` (the latest elaboration's) so a testbench can read the
        # weights back with ``ctx.get(ram.mem.data[row])``.
        m.submodules.mem = mem = self.mem = memory.Memory(
            shape=data.ArrayLayout(signed(WORD_BITS), lanes), depth=self.rows, init=self.init,
            attrs=NO_RW_CHECK | ram_attrs(self.rows, self.family))
        upd, host = self.upd, self.host
        shared = self.upd.signature.shared

        # Port B: EB reads, the update writes (and, ``shared``, reads), or the host writes a word.
        b_update = (upd.read | upd.write) if shared else upd.write
        addr_b = Signal(range(self.rows))
        m.d.comb += addr_b.eq(Mux(upd.write, upd.write_addr,
                                  Mux(b_update, upd.read_addr, Mux(host.write, host.addr, self.b.addr))))
        data_b = read_register(m, mem, addr_b, self.b.en | (upd.read if shared else 0))
        write = mem.write_port(granularity=1)
        m.d.comb += [
            write.addr.eq(addr_b),
            write.en.eq(Mux(upd.write, upd.mask, Mux(host.write, Const(1, lanes) << host.lane, 0))),
            write.data.eq(Mux(upd.write, upd.value, host.value.replicate(lanes))),
            self.b.data.eq(data_b),
        ]
        # Checked at clock edges (sync), where a misuse takes effect.
        m.d.sync += [
            Assert(~(self.b.en & b_update), "param ram: EB read and weight update on port B "
                                            "in the same cycle"),
            Assert(~(upd.read & upd.write) | ~shared, "param ram: update reads and writes in the same cycle"),
        ]

        # Port A: the FP engine (or a BPRAM's FP row streamer), the host's reads and, unless
        # ``shared``, the update's.
        a_update = 0 if shared else upd.read
        addr_a, en_a = Signal(range(self.rows)), Signal()
        m.d.comb += [addr_a.eq(Mux(host.read, host.addr, Mux(a_update, upd.read_addr, self.a.addr))),
                     en_a.eq(self.a.en | host.read | a_update)]
        data_a = read_register(m, mem, addr_a, en_a)
        host_lane = Signal.like(host.lane)
        with m.If(host.read):
            m.d.sync += host_lane.eq(host.lane)
        m.d.comb += [self.a.data.eq(data_a), upd.data.eq(data_b if shared else data_a),
                     host.data.eq(data_a.as_value().word_select(host_lane, WORD_BITS))]
        m.d.sync += [
            Assert(~(host.read & (self.a.en | a_update)), "param ram: host read while port A is in use"),
            Assert(~(self.a.en & a_update), "param ram: FP read and weight update on port A in the same cycle"),
            Assert(~(host.write & (b_update | self.b.en)), "param ram: host write while port B is in use"),
        ]
        m.d.sync += Assert(~(en_a & upd.write & (addr_a == upd.write_addr)),
                           "param ram: port A reads the row the update writes in the same cycle")
        return m


class VersionedParamRam(wiring.Component):
    """A ParamRam for the update that does not stop the engines (docs/weight_versions.md, "An
    update that does not stop the engines"): the same ports, three ParamRams behind them.

    The engines (ports ``a`` and ``b``) read copy ``current`` (0 or 1) while the update walk
    writes the next version into the other copy and, word for word, into ``walk``, the copy
    it reads the present version from (port ``upd``). Neither engine port is shared with the
    walk, so FP and EB run while it does; ``swap`` (a one-cycle pulse, given once the walk
    is done and the engines are between the samples of two versions, hw.memory.update_gate.
    OverlappedGate) makes the copy just written the engines'. Three copies, not two:
    the walk needs the present version's words, and both ports of the engines' copy are
    theirs (the fully connected slice of the default chain reads every address on both
    every sample).

    The host writes a word into all three copies and reads ``walk``, which holds the latest
    version. ``mem``: the walk copy's memory (testbenches read the trained weights from it);
    ``memory_paths``: every copy's memory below this component, for a simulator to load (the
    walk copy's first).
    """

    COPIES = ("copy0", "copy1", "walk")

    def __init__(self, *, banks, rows, words, init=None, family=None):
        self.copies = [ParamRam(banks=banks, rows=rows, words=words, init=init, family=family)
                       for _ in self.COPIES]
        self.banks, self.rows, self.words, self.family = banks, rows, words, family
        self.layout = None
        super().__init__({
            "a": In(WeightPortSignature(rows, banks, words)),
            "b": In(WeightPortSignature(rows, banks, words)),
            "upd": In(UpdatePortSignature(rows, banks, words)),
            "host": In(HostPortSignature(rows, banks, words)),
            "swap": In(1),
        })

    @classmethod
    def from_slice(cls, layer_slice, init=None, family=None):
        return _from_slice(cls, layer_slice, init, family)

    @property
    def mem(self):
        return self.copies[-1].mem

    @property
    def memory_paths(self):
        return (f"{self.COPIES[-1]}.mem",) + tuple(f"{name}.mem" for name in self.COPIES[:-1])

    def elaborate(self, platform):
        m = Module()
        engines, walk = self.copies[:2], self.copies[2]
        for name, copy in zip(self.COPIES, self.copies):
            m.submodules[name] = copy
        current = Signal()  # the engines' copy
        with m.If(self.swap):
            m.d.sync += current.eq(~current)
        a, b, upd, host = self.a, self.b, self.upd, self.host
        for n, copy in enumerate(engines):
            theirs = current == n
            m.d.comb += [copy.a.addr.eq(a.addr), copy.a.en.eq(a.en & theirs),
                         copy.b.addr.eq(b.addr), copy.b.en.eq(b.en & theirs),
                         copy.upd.write.eq(upd.write & ~theirs)]
        # Read data follow the copy read: ``current`` changes only between samples, when
        # neither engine holds a read (the gate's swap waits for both to finish).
        m.d.comb += [a.data.eq(Mux(current, engines[1].a.data, engines[0].a.data)),
                     b.data.eq(Mux(current, engines[1].b.data, engines[0].b.data))]
        wiring.connect(m, wiring.flipped(upd), walk.upd)
        for copy in engines:
            m.d.comb += [copy.upd.write_addr.eq(upd.write_addr), copy.upd.mask.eq(upd.mask),
                         copy.upd.value.eq(upd.value)]
        for copy in self.copies:
            m.d.comb += [copy.host.addr.eq(host.addr), copy.host.lane.eq(host.lane),
                         copy.host.write.eq(host.write), copy.host.value.eq(host.value)]
        m.d.comb += [walk.host.read.eq(host.read), host.data.eq(walk.host.data)]
        m.d.sync += Assert(~(self.swap & (a.en | b.en)), "param ram: copies swapped while an engine reads")
        return m
