"""A simulated board: the host tool's transport, with the bytes going through the
:class:`~boards.host_interface.Trainer`'s UART pins in Amaranth's simulator.

The UART runs at ``divisor`` clock cycles per bit, far fewer than a real board's
(100 MHz / 3 Mbaud is 33): simulated cycles are expensive, and the receiver and the
transmitter are the same at any divisor of 2 or more. The simulation advances only
while the host waits for an answer (``read``), ``chunk`` cycles at a time (a short
chunk: an answer is often a few hundred cycles away).
"""

from collections import deque

from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

_PERIOD = 1e-8


class SimulatedBoard:
    def __init__(self, trainer, *, chunk=100, timeout=2_000_000):
        self.trainer, self.chunk, self.timeout = trainer, chunk, timeout
        self.outgoing, self.incoming = deque(), bytearray()
        top = Module()
        top.domains.sync = ClockDomain()
        top.submodules.trainer = trainer
        self.sim = Simulator(top)
        self.sim.add_clock(_PERIOD)
        self.sim.add_testbench(self._drive, background=True)
        self.sim.add_testbench(self._listen, background=True)
        self.cycles = 0

    async def _drive(self, ctx):
        """Serialises the host's bytes onto the trainer's rx pin, 8N1."""
        divisor, pin = self.trainer.divisor, self.trainer.rx
        ctx.set(pin, 1)
        while True:
            if not self.outgoing:
                await ctx.tick()
                continue
            byte = self.outgoing.popleft()
            for bit in [0, *((byte >> i) & 1 for i in range(8)), 1]:
                ctx.set(pin, bit)
                await ctx.tick().repeat(divisor)

    async def _listen(self, ctx):
        """Decodes the trainer's tx pin, sampling each bit in its middle."""
        divisor, pin = self.trainer.divisor, self.trainer.tx
        while True:
            await ctx.negedge(pin)
            await ctx.tick().repeat(divisor + divisor // 2)
            byte = 0
            for i in range(8):
                byte |= ctx.get(pin) << i
                await ctx.tick().repeat(divisor)
            self.incoming.append(byte)

    def write(self, data):
        self.outgoing.extend(data)

    def read(self, count):
        waited = 0
        while len(self.incoming) < count:
            if waited >= self.timeout:
                raise TimeoutError(f"simulated board: no answer in {waited} cycles")
            self.cycles += self.chunk
            waited += self.chunk
            self.sim.run_until(self.cycles * _PERIOD)
        data = bytes(self.incoming[:count])
        del self.incoming[:count]
        return data
