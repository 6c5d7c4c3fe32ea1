"""Payload layouts of the streams and memory rows every block agrees on.

Words are 16-bit signed (``mapping.numerics.WORD_BITS``); partial sums are exact
``ACC_BITS``-bit words; gradient products are exact 32-bit products.
"""

from amaranth.hdl import signed
from amaranth.lib import data

from mapping.numerics import ACC_BITS, WORD_BITS

PRODUCT_BITS = 2 * WORD_BITS


def pixel_layout(channels, width=WORD_BITS):
    """One pixel: ``channels`` words."""
    return data.ArrayLayout(signed(width), channels)


def window_layout(channels, kernel):
    """One window (or one weight row): ``channels*kernel*kernel`` words, channel-major."""
    return data.ArrayLayout(signed(WORD_BITS), channels * kernel * kernel)


def psum_layout(lanes):
    """Exact partial sums, one per lane (output channel of a group, or input channel)."""
    return data.StructLayout({"values": data.ArrayLayout(signed(ACC_BITS), lanes)})


def row_layout(words):
    return data.ArrayLayout(signed(WORD_BITS), words)


def bank_layout(banks, words):
    """The P rows read at one address."""
    return data.ArrayLayout(row_layout(words), banks)


def grads_layout(rows, ces, words):
    """One ``grads`` beat: LPRAM address ``row`` and P rows of ``words`` exact products."""
    return data.StructLayout({"row": range(rows),
                              "values": data.ArrayLayout(data.ArrayLayout(signed(PRODUCT_BITS), words), ces)})


def bias_grads_layout(groups, ces):
    """One ``bias_grads`` beat: group ``row`` and the P errors of that group."""
    return data.StructLayout({"row": range(groups), "values": data.ArrayLayout(signed(WORD_BITS), ces)})
