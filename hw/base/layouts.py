"""Payload layouts of the streams and memory rows every block agrees on.

Words are 16-bit signed (``mapping.numerics.WORD_BITS``); partial sums are exact
``ACC_BITS``-bit words (``Formats.psum_bits`` between slices); gradient products are exact 32-bit products.
"""

import numpy as np
from amaranth.hdl import Shape, Signal, signed
from amaranth.lib import data

from mapping.numerics import ACC_BITS, WORD_BITS

PRODUCT_BITS = 2 * WORD_BITS


def pixel_layout(channels, width=WORD_BITS):
    """One pixel: ``channels`` words."""
    return data.ArrayLayout(signed(width), channels)


def window_layout(channels, kernel):
    """One window (or one weight row): ``channels*kernel*kernel`` words, channel-major."""
    return data.ArrayLayout(signed(WORD_BITS), channels * kernel * kernel)


def psum_layout(lanes, bits=ACC_BITS):
    """Partial sums, one per lane (output channel of a group, or input channel): exact, or
    ``bits`` wide between slices (``Formats.psum_bits``)."""
    return data.StructLayout({"values": data.ArrayLayout(signed(bits), lanes)})


def row_layout(words):
    return data.ArrayLayout(signed(WORD_BITS), words)


def bank_layout(banks, words):
    """The P rows read at one address."""
    return data.ArrayLayout(row_layout(words), banks)


def packed_words(rows):
    """Each of ``rows`` (an integer array, the last axes a nest of ArrayLayouts of 16-bit words,
    every word in range) as the unsigned integer those layouts pack it to, word 0 lowest: what
    ``Layout.const`` gives, without the Const per word that makes a paper-scale DRAM image take
    minutes."""
    rows = np.asarray(rows)
    flat = rows.reshape(len(rows), -1).astype("<i2")
    return [int.from_bytes(row.tobytes(), "little") for row in flat]


def grads_layout(rows, ces, words):
    """One ``grads`` beat: LPRAM address ``row`` and P rows of ``words`` exact products."""
    return data.StructLayout({"row": range(rows),
                              "values": data.ArrayLayout(data.ArrayLayout(signed(PRODUCT_BITS), words), ces)})


def bias_grads_layout(groups, ces):
    """One ``bias_grads`` beat: group ``row`` and the P errors of that group."""
    return data.StructLayout({"row": range(groups), "values": data.ArrayLayout(signed(WORD_BITS), ces)})



def flat_elements(value, layout):
    """The innermost elements of ``layout`` (an ArrayLayout, of arrays or of plain shapes) in
    ``value``, in memory order (outer index major), each one slice of ``value`` itself, signed
    where the element shape is.

    Indexing a ``lib.data`` view element by element nests a slice per array level, and
    Amaranth's netlist builder emits a nested slice by first emitting the whole slice inside
    it: N elements of a wide beat then cost N times the beat's width (a PG beat of 864 lanes
    made a VGG-16 node's elaboration quadratic). These slices cost their own width."""
    shape, count = layout, 1
    while isinstance(shape, data.ArrayLayout):
        count *= shape.length
        shape = shape.elem_shape
    shape = Shape.cast(shape)
    width = shape.width
    return [value[k * width:(k + 1) * width].as_signed() if shape.signed else value[k * width:(k + 1) * width]
            for k in range(count)]


def named(m, value, shape, name):
    """``value`` as a Signal of ``shape`` (a view for a layout) driven combinationally: for a
    value many places slice or use. Amaranth's netlist builder builds an unnamed expression
    again at each use, so N lanes that each slice a wide Mux (or reuse one lane's result)
    cost N times its logic, at elaboration and in the netlist."""
    signal = Signal(shape, name=name)
    m.d.comb += signal.eq(value)
    return signal
