"""Port signatures shared between blocks: weight read ports and the update port."""

from amaranth.hdl import signed
from amaranth.lib import wiring
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
