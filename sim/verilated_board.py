"""Simulated boards on the Verilator backend: the same transport as
:class:`boards.simulated.SimulatedBoard` (``write``, ``read``), with the trainers compiled,
one per board of a chain, their link PHY ports joined as by a cable.

The host's bytes enter an input stream, a :class:`~boards.uart.UartTx` puts them on the
trainer's ``rx`` pin, and a :class:`~boards.uart.UartRx` on its ``tx`` pin writes what the
board sends into a ring buffer (``capture.mem``) the host reads through the VPI. Both
UARTs are the board's own, which sim/test_host_interface.py drives and decodes bit by bit
from Python on Amaranth's simulator, so the pins see what a serial line would carry. The run stops as soon as the bytes a
``read`` waits for have arrived, so the cycle count is that of Amaranth's simulation. Each
board's LEDs are logged whenever they change (``VerilatedBoards.leds``).
"""

import json

from amaranth.hdl import Cat, DomainRenamer, Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from boards.uart import UartRx, UartTx
from hw.link.onchip_phy import OnChipPhy
from sim.verilated import VerilatedModel

COUNT_BITS = 32
LED_LOG_DEPTH = 256  # LED changes logged per board


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


# Registers each way between two simulated boards' link PHY ports: the I/O registers and the
# cable of a board-to-board link (the link buffers are sized for mapping.link_model's latency).
CABLE_LATENCY = 4


class UartBench(wiring.Component):
    """The trainers (boards, in chain order), each between a host-side UART transmitter (fed by
    ``host[i]``) and receiver; neighbouring boards' link PHY ports joined by an
    :class:`~hw.link.onchip_phy.OnChipPhy` of :data:`CABLE_LATENCY` registers, every clock the
    node clock. ``led_log[i]`` holds the values of board i's LEDs (link up, training, error
    from bit 0), one row per change from the first cycle on; ``led_changes[i]`` counts them."""

    def __init__(self, trainers, ring):
        self.trainers = trainers
        self.captures = [ByteCapture(ring) for _ in trainers]
        self.led_log = [ByteCapture(LED_LOG_DEPTH) for _ in trainers]
        self.recipe = None if None in (t.recipe for t in trainers) else json.dumps(
            {"class": "UartBench", "trainers": [t.recipe for t in trainers], "ring": ring})
        super().__init__({"host": In(stream.Signature(8)).array(len(trainers)),
                          "received": Out(COUNT_BITS).array(len(trainers)),
                          "led_changes": Out(COUNT_BITS).array(len(trainers))})

    def elaborate(self, platform):
        m = Module()
        for i, (trainer, capture) in enumerate(zip(self.trainers, self.captures)):
            divisor = trainer.divisor
            m.submodules[f"trainer{i}"] = DomainRenamer({f"{side}_link_rx": "sync" for side in trainer.off_board})(
                trainer)
            tx = m.submodules[f"tx{i}"] = UartTx(divisor)
            rx = m.submodules[f"rx{i}"] = UartRx(divisor)
            m.submodules[f"capture{i}"] = capture
            wiring.connect(m, wiring.flipped(self.host[i]), tx.bytes)
            wiring.connect(m, rx.bytes, capture.bytes)
            m.d.comb += [trainer.rx.eq(tx.pin), rx.pin.eq(trainer.tx), self.received[i].eq(capture.received)]
            log = m.submodules[f"leds{i}"] = self.led_log[i]
            leds = Cat(trainer.leds.link_up, trainer.leds.training, trainer.leds.error)
            logged = Signal(len(leds) + 1, init=1 << len(leds))  # no value: the first cycle's are logged
            m.d.sync += logged.eq(leds)
            m.d.comb += [log.bytes.payload.eq(leds), log.bytes.valid.eq(logged != leds),
                         self.led_changes[i].eq(log.received)]
        for i, (upstream, downstream) in enumerate(zip(self.trainers, self.trainers[1:])):
            cable = m.submodules[f"cable{i}"] = OnChipPhy(len(upstream.down_phy.tx.data), CABLE_LATENCY)
            wiring.connect(m, upstream.down_phy, cable.a)
            wiring.connect(m, downstream.up_phy, cable.b)
        return m


class _Transport:
    """Board ``index`` of a :class:`VerilatedBoards`: ``write`` and ``read`` as a serial port."""

    def __init__(self, boards, index):
        self.boards, self.index, self.consumed = boards, index, 0

    def write(self, data):
        self.boards.model.push(f"host_{self.index}", list(data))

    def read(self, count):
        boards, received = self.boards, f"received_{self.index}"
        if count > boards.ring:
            raise ValueError(f"verilated board: {count} bytes wanted, the capture ring holds {boards.ring}")
        target = self.consumed + count
        model = boards.model
        model.stop_when({received: target})
        start = model.cycle
        while model.get(received) < target:
            if model.cycle - start >= boards.timeout:
                raise TimeoutError(f"verilated board {self.index}: no answer in {model.cycle - start} cycles")
            model.run(min(boards.chunk, boards.timeout - (model.cycle - start)))
        data = bytearray()
        for position in range(self.consumed, target):  # the ring may wrap within one read
            (byte,) = model.read_memory(f"capture{self.index}.mem", 1, 8, first=position % boards.ring)
            data.append(byte)
        self.consumed = target
        return bytes(data)


class VerilatedBoards:
    """Compiled :class:`boards.host_interface.Trainer` s, the boards of one chain (``with`` frees
    them); ``transports``: one per board, as the host tool's serial ports.

    ``ring``: bytes each capture buffer holds (a ``read`` must not wait for more); ``chunk``:
    cycles per call into the model; ``timeout``: cycles a ``read`` waits before TimeoutError.
    """

    def __init__(self, trainers, *, ring=1 << 16, chunk=200_000, timeout=20_000_000, profile="quick"):
        self.bench = UartBench(trainers, ring)
        self.ring, self.chunk, self.timeout = ring, chunk, timeout
        memories = [f"{kind}{i}.mem" for i in range(len(trainers)) for kind in ("capture", "leds")]
        self.model = VerilatedModel(self.bench, memories, profile=profile, recipe=self.bench.recipe)
        self.transports = [_Transport(self, i) for i in range(len(trainers))]

    def leds(self, index):
        """Board ``index``'s LEDs so far, (link up, training, error) at each change."""
        changes = self.model.get(f"led_changes_{index}")
        if changes > LED_LOG_DEPTH:
            raise ValueError(f"verilated board {index}: {changes} LED changes, the log holds {LED_LOG_DEPTH}")
        return [(value & 1, value >> 1 & 1, value >> 2 & 1)
                for value in self.model.read_memory(f"leds{index}.mem", changes, 8)]

    def close(self):
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def cycles(self):
        return self.model.cycle
