"""Stream testbench routines shared by every cycle-level test.

All of them are Amaranth 0.5 async testbenches. Random stalls come from a
``numpy.random.Generator`` so a failing seed reproduces exactly; ``stall`` is
the probability that a producer holds valid low (or a consumer holds ready
low) on a given cycle.
"""

import sys

import numpy as np
from amaranth.hdl import ClockDomain, Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator


async def put(ctx, stream, payloads, rng=None, stall=0.0):
    """Drive ``payloads`` into a valid/ready stream, one per accepted cycle."""
    for payload in payloads:
        while rng is not None and stall and rng.random() < stall:
            ctx.set(stream.valid, 0)
            await ctx.tick()
        ctx.set(stream.payload, payload)
        ctx.set(stream.valid, 1)
        await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def get(ctx, stream, count, rng=None, stall=0.0, decode=None):
    """Collect ``count`` payloads from a stream; ``decode`` converts each sampled payload."""
    items = []
    while len(items) < count:
        ready = not (rng is not None and stall and rng.random() < stall)
        ctx.set(stream.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
        if ready and valid:
            items.append(decode(payload) if decode else payload)
    ctx.set(stream.ready, 0)
    return items


async def take(ctx, stream, count):
    """Take ``count`` beats with ready held high; returns the cycles that took (rate tests)."""
    ctx.set(stream.ready, 1)
    cycles = 0
    for _ in range(count):
        while not ctx.get(stream.valid):
            await ctx.tick()
            cycles += 1
        await ctx.tick()
        cycles += 1
    return cycles


def as_ints(payload):
    """A sampled array payload as a list of Python ints (signedness from the layout)."""
    return [int(element) for element in payload]


def simulate(dut, *testbenches, processes=(), vcd=None, deadline=None, clocks=None):
    """Run ``testbenches`` (async functions of ctx) on ``dut`` clocked at 100 MHz.

    ``deadline``: a cycle budget (of ``sync``) after which the run fails instead of hanging.
    ``clocks``: {domain: period in seconds} of further clock domains.
    """
    # Amaranth's simulator compiles the design to Python source with every mask as a decimal
    # literal; a memory row of a wide unfolded fc slice (15,552 bits for 486 inputs x 2 banks)
    # is past Python's default 4,300-digit limit on int-to-string conversion.
    sys.set_int_max_str_digits(0)
    # The same wide rows make expressions nested deeper than the compiler's default limit
    # (Python 3.11 derives it from the recursion limit): found by the random-network test.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    top = Module()  # defines `sync` so purely combinational blocks can be clocked too
    top.domains.sync = ClockDomain()
    for domain in clocks or {}:
        top.domains += ClockDomain(domain)
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-8)
    for domain, period in (clocks or {}).items():
        sim.add_clock(period, domain=domain)
    for bench in testbenches:
        sim.add_testbench(bench)
    for process in processes:
        sim.add_process(process)
    if vcd:
        with sim.write_vcd(vcd):
            _run(sim, deadline)
    else:
        _run(sim, deadline)


_CHUNK = 1000  # cycles run between checks whether the testbenches have returned


def _run(sim, deadline):
    if deadline is None:
        sim.run()
        return
    cycles = 0
    while cycles < deadline:
        cycles = min(cycles + _CHUNK, deadline)
        sim.run_until(cycles * 1e-8)
        if not sim.advance():  # False once every testbench has returned
            return
    raise AssertionError(f"simulation still running after {deadline} cycles")


class EngineWithWeights(wiring.Component):
    """An engine (FP or EB) reading its weight rows from a ROM laid out as LPRAM rows.

    ``ports``: the names of the engine's input and output streams, forwarded as they are.
    """

    def __init__(self, engine, rows, ports=("windows", "psums")):
        self.engine, self.rows, self.ports = engine, rows, ports
        inp, out = ports
        super().__init__({inp: In(getattr(engine, inp).signature.flip()),
                          out: Out(getattr(engine, out).signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        m.submodules.rom = rom = Memory(shape=engine.weights.data.shape(), depth=len(self.rows),
                                        init=self.rows)
        port = rom.read_port()
        m.d.comb += [port.addr.eq(engine.weights.addr), port.en.eq(engine.weights.en),
                     engine.weights.data.eq(port.data)]
        inp, out = self.ports
        wiring.connect(m, wiring.flipped(getattr(self, inp)), getattr(engine, inp))
        wiring.connect(m, getattr(engine, out), wiring.flipped(getattr(self, out)))
        return m


async def read_param_rows(ctx, ram):
    """Every address of a ParamRam read through its port A, as an array (rows, banks, words)."""
    rows = []
    for addr in range(ram.rows):
        ctx.set(ram.a.addr, addr)
        ctx.set(ram.a.en, 1)
        await ctx.tick()
        rows.append([as_ints(row) for row in ctx.get(ram.a.data)])
    ctx.set(ram.a.en, 0)
    return np.array(rows)
