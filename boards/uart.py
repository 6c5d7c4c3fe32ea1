"""An 8N1 UART: ``divisor`` clock cycles per bit (clock / baud rate).

The receiver has no back-pressure (a UART has none): a byte arrives as a one-cycle
``valid`` whatever ``ready`` says, and the host interface takes every one.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


class UartRx(wiring.Component):
    def __init__(self, divisor):
        if divisor < 2:
            raise ValueError(f"uart: {divisor} cycles per bit, at least 2 needed")
        self.divisor = divisor
        super().__init__({"pin": In(1, init=1), "bytes": Out(stream.Signature(8, always_ready=True))})

    def elaborate(self, platform):
        m = Module()
        # Two flip-flops against metastability: the pin is asynchronous to the clock.
        sync = Signal(2, init=0b11)
        m.d.sync += sync.eq(Cat(self.pin, sync[0]))
        line = sync[1]
        timer = Signal(range(self.divisor))
        bits = Signal(8)
        count = Signal(range(9))
        m.d.sync += self.bytes.valid.eq(0)
        with m.FSM():
            with m.State("idle"):
                with m.If(~line):  # start bit: sample the bits in their middle
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "start"
            with m.State("start"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(line):  # a glitch, not a start bit
                    m.next = "idle"
                with m.Else():
                    m.d.sync += [timer.eq(self.divisor - 1), count.eq(0)]
                    m.next = "data"
            with m.State("data"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [timer.eq(self.divisor - 1), bits.eq(Cat(bits[1:], line)),
                                 count.eq(count + 1)]
                    with m.If(count == 7):
                        m.next = "stop"
            with m.State("stop"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    # A missing stop bit is a framing error: the byte is dropped, and the
                    # frame's CRC check reports it.
                    m.d.sync += [self.bytes.payload.eq(bits), self.bytes.valid.eq(line)]
                    m.next = "idle"
        return m


class UartTx(wiring.Component):
    def __init__(self, divisor):
        if divisor < 2:
            raise ValueError(f"uart: {divisor} cycles per bit, at least 2 needed")
        self.divisor = divisor
        super().__init__({"bytes": In(stream.Signature(8)), "pin": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        shift = Signal(10, init=0x3FF)  # stop bit, 8 data bits LSB first, start bit
        remaining = Signal(range(11))
        timer = Signal(range(self.divisor))
        m.d.comb += [self.pin.eq(shift[0]), self.bytes.ready.eq(remaining == 0)]
        with m.If(self.bytes.valid & self.bytes.ready):
            m.d.sync += [shift.eq(Cat(0, self.bytes.payload, 1)), remaining.eq(10),
                         timer.eq(self.divisor - 1)]
        with m.Elif(remaining != 0):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Else():
                m.d.sync += [shift.eq(Cat(shift[1:], 1)), remaining.eq(remaining - 1),
                             timer.eq(self.divisor - 1)]
        return m
