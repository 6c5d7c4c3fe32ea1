"""Port signatures shared between blocks: weight read ports, the update port, DRAM queue ports."""

from amaranth.hdl import signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mapping.numerics import WORD_BITS

from .layouts import bank_layout


class _Sized(wiring.Signature):
    """A signature determined by its class and ``(rows, banks, words)``."""

    def __init__(self, rows, banks, words, members):
        self.rows, self.banks, self.words = rows, banks, words
        super().__init__(members)

    def __eq__(self, other):
        other = other.flip() if isinstance(other, wiring.FlippedSignature) else other
        return type(self) is type(other) and (self.rows, self.banks, self.words) == (
            other.rows, other.banks, other.words)

    def __hash__(self):
        return hash((type(self), self.rows, self.banks, self.words))

    def __repr__(self):
        return f"{type(self).__name__}(rows={self.rows}, banks={self.banks}, words={self.words})"


class WeightPortSignature(_Sized):
    """The engine side of a weight read port (flip it for the RAM side): ``addr`` is read
    in a cycle with ``en`` high; ``data``, the P rows of ``words`` words at that address, is
    valid the next cycle and held while ``en`` is low."""

    def __init__(self, rows, banks, words):
        super().__init__(rows, banks, words, {
            "addr": Out(range(rows)),
            "en": Out(1),
            "data": In(bank_layout(banks, words)),
        })


class UpdatePortSignature(_Sized):
    """The update side of the read-modify-write port: read an address, write words of it.

    ``data`` is the row read (the P rows at ``read_addr`` one cycle after ``read``), held
    like a weight port's; ``write`` stores ``value``'s words whose ``mask`` bit is set
    (bank-major, as ``data``) at ``write_addr``. ``shared``: reads and writes share one
    memory port (a bias RAM's port B), so they never come in the same cycle; otherwise the
    update reads through the FP port (port A), idle while the update gate holds FP, and
    writes through port B, both in one cycle.
    """

    def __init__(self, rows, banks, words, shared=False):
        self.shared = shared
        super().__init__(rows, banks, words, {
            "read": Out(1),
            "read_addr": Out(range(rows)),
            "write": Out(1),
            "write_addr": Out(range(rows)),
            "mask": Out(banks * words),
            "value": Out(bank_layout(banks, words)),
            "data": In(bank_layout(banks, words)),
        })

    def __eq__(self, other):
        other = other.flip() if isinstance(other, wiring.FlippedSignature) else other
        return super().__eq__(other) and self.shared == other.shared

    def __hash__(self):
        return hash((super().__hash__(), self.shared))

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, shared={self.shared})"


class HostPortSignature(_Sized):
    """The host's side of a memory's access port (boards/: load and read back weights while
    training is idle). ``read``: the word at (``addr``, ``lane``) is on ``data`` the next
    cycle, held until the next read; ``write``: ``value`` is written there. ``lane`` counts
    words bank-major, as a row's ``data`` holds them."""

    def __init__(self, rows, banks, words):
        super().__init__(rows, banks, words, {
            "addr": Out(range(rows)),
            "lane": Out(range(banks * words)),
            "read": Out(1),
            "write": Out(1),
            "value": Out(signed(WORD_BITS)),
            "data": In(signed(WORD_BITS)),
        })


class DramQueueSignature(wiring.Signature):
    """A queue's two ports into the node's DRAM (the queue's side; flip it for the DRAM's), one
    for writes and one for reads, as a LiteDRAM crossbar gives them (its native ports of mode
    "write" and "read"; the crossbar converts ``width`` to the controller's). Addresses count
    words of ``width`` bits from 0 to ``depth`` - 1 (the board places the queue in its DRAM).

    ``write.cmd`` names the address of the next word written; the words follow on
    ``write.data`` in the same order, and a word is in the DRAM once ``write.data`` takes it.
    ``read.cmd`` names an address; its word comes back on ``read.data``, in the order of the
    commands, and must be taken the cycle it is valid (the queue reserves room for it)."""

    def __init__(self, width, depth):
        self.width, self.depth = width, depth
        super().__init__({
            "write": Out(wiring.Signature({
                "cmd": Out(stream.Signature(range(depth))),
                "data": Out(stream.Signature(width)),
            })),
            "read": Out(wiring.Signature({
                "cmd": Out(stream.Signature(range(depth))),
                "data": In(stream.Signature(width)),
            })),
        })

    def __eq__(self, other):
        other = other.flip() if isinstance(other, wiring.FlippedSignature) else other
        return type(self) is type(other) and (self.width, self.depth) == (other.width, other.depth)

    def __hash__(self):
        return hash((type(self), self.width, self.depth))

    def __repr__(self):
        return f"DramQueueSignature(width={self.width}, depth={self.depth})"
