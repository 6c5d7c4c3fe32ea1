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
    """The update side of the read-modify-write port: read an address, write single words.

    ``lane`` is the word's position in the address's P*words words (bank-major);
    ``data`` is the row read, held like a weight port's.
    """

    def __init__(self, rows, banks, words):
        super().__init__(rows, banks, words, {
            "addr": Out(range(rows)),
            "read": Out(1),
            "write": Out(1),
            "lane": Out(range(banks * words)),
            "value": Out(signed(WORD_BITS)),
            "data": In(bank_layout(banks, words)),
        })


class HostPortSignature(_Sized):
    """The host's side of a memory's access port (boards/: load and read back weights while
    training is idle). ``read``: the word at (``addr``, ``lane``) is on ``data`` the next
    cycle, held until the next read; ``write``: ``value`` is written there. ``lane`` counts
    words bank-major, as :class:`UpdatePortSignature`'s does."""

    def __init__(self, rows, banks, words):
        super().__init__(rows, banks, words, {
            "addr": Out(range(rows)),
            "lane": Out(range(banks * words)),
            "read": Out(1),
            "write": Out(1),
            "value": Out(signed(WORD_BITS)),
            "data": In(signed(WORD_BITS)),
        })
