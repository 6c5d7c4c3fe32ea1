"""The simulated board on the Verilator backend: the same transport as
:class:`boards.simulated.SimulatedBoard` (``write``, ``read``), with the trainer compiled.

The host's bytes enter an input stream, a :class:`~boards.uart.UartTx` puts them on the
trainer's ``rx`` pin, and a :class:`~boards.uart.UartRx` on its ``tx`` pin writes what the
board sends into a ring buffer (``capture.mem``) the host reads through the VPI. Both
UARTs are the board's own, which sim/test_host_interface.py drives and decodes bit by bit
from Python on Amaranth's simulator, so the pins see what a serial line would carry. The run stops as soon as the bytes a
``read`` waits for have arrived, so the cycle count is that of Amaranth's simulation.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from boards.uart import UartRx, UartTx
from sim.verilated import VerilatedModel

COUNT_BITS = 32


class ByteCapture(wiring.Component):
    """Writes every byte of ``bytes`` into a ring of ``depth`` bytes; ``received`` counts them."""

    def __init__(self, depth):
        self.depth = depth
        self.mem = memory.Memory(shape=8, depth=depth, init=[])
        super().__init__({"bytes": In(stream.Signature(8, always_ready=True)), "received": Out(COUNT_BITS)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = self.mem
        write = self.mem.write_port()
        m.d.comb += [write.addr.eq(self.received), write.data.eq(self.bytes.payload),
                     write.en.eq(self.bytes.valid)]
        with m.If(self.bytes.valid):
            m.d.sync += self.received.eq(self.received + 1)
        return m


class UartBench(wiring.Component):
    """The trainer between a host-side UART transmitter (fed by ``host``) and receiver."""

    host: In(stream.Signature(8))
    received: Out(COUNT_BITS)

    def __init__(self, trainer, ring):
        self.trainer = trainer
        self.capture = ByteCapture(ring)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        divisor = self.trainer.divisor
        m.submodules.trainer = self.trainer
        tx = m.submodules.tx = UartTx(divisor)
        rx = m.submodules.rx = UartRx(divisor)
        m.submodules.capture = self.capture
        wiring.connect(m, wiring.flipped(self.host), tx.bytes)
        wiring.connect(m, rx.bytes, self.capture.bytes)
        m.d.comb += [self.trainer.rx.eq(tx.pin), rx.pin.eq(self.trainer.tx),
                     self.received.eq(self.capture.received)]
        return m


class VerilatedBoard:
    """A transport to a compiled :class:`boards.host_interface.Trainer` (``with`` frees it).

    ``ring``: bytes the capture buffer holds (a ``read`` must not wait for more); ``chunk``:
    cycles per call into the model; ``timeout``: cycles a ``read`` waits before TimeoutError.
    """

    def __init__(self, trainer, *, ring=1 << 16, chunk=200_000, timeout=20_000_000, profile="quick"):
        self.bench = UartBench(trainer, ring)
        self.ring, self.chunk, self.timeout = ring, chunk, timeout
        self.model = VerilatedModel(self.bench, ["capture.mem"], profile=profile)
        self.consumed = 0

    def close(self):
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def cycles(self):
        return self.model.cycle

    def write(self, data):
        self.model.push("host", list(data))

    def read(self, count):
        if count > self.ring:
            raise ValueError(f"verilated board: {count} bytes wanted, the capture ring holds {self.ring}")
        target = self.consumed + count
        self.model.stop_when({"received": target})
        start = self.model.cycle
        while self.model.get("received") < target:
            if self.model.cycle - start >= self.timeout:
                raise TimeoutError(f"verilated board: no answer in {self.model.cycle - start} cycles")
            self.model.run(min(self.chunk, self.timeout - (self.model.cycle - start)))
        data = bytearray()
        for position in range(self.consumed, target):  # the ring may wrap within one read
            (byte,) = self.model.read_memory("capture.mem", 1, 8, first=position % self.ring)
            data.append(byte)
        self.consumed = target
        return bytes(data)
