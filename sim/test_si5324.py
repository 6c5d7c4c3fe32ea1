"""The VC709's SI5324 set-up (boards/si5324.py) on Amaranth's simulator: the I2C bus it drives,
decoded as a device on the bus would see it."""

import pytest
from amaranth.sim import Simulator

from boards.si5324 import SI5324Setup, transactions


def decode_i2c(samples):
    """The write transactions on a bus sampled as (scl, sda) once a cycle: [(address, bytes)],
    with whether every byte was followed by a released SDA (the device's ACK slot) and whether
    SDA ever moved while SCL was high other than at a START or STOP."""
    writes, bits, current, stray = [], [], None, False
    for (scl0, sda0), (scl1, sda1) in zip(samples, samples[1:]):
        if scl0 and scl1 and sda0 != sda1:
            if sda0 and not sda1:      # START
                current, bits = [], []
            elif current is not None:  # STOP
                writes.append(current)
                current = None
            else:
                stray = True
        elif current is not None and not scl0 and scl1:  # a bit, read on SCL's rising edge
            bits.append(sda1)
            if len(bits) == 9:
                current.append((int("".join(map(str, bits[:8])), 2), bits[8]))
                bits = []
    return writes, stray


def test_the_si5324_is_set_up_through_the_i2c_switch_in_one_pass():
    dut = SI5324Setup(quarter_period=3, start_delay=10, settle=20)
    samples, done_at = [], []

    async def bench(ctx):
        for cycle in range(4 * 3 * len(dut.levels) + 60):
            samples.append((ctx.get(dut.scl), ctx.get(dut.sda)))
            if ctx.get(dut.done) and not done_at:
                done_at.append(cycle)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    writes, stray = decode_i2c(samples)
    assert not stray
    assert all(ack == 1 for write in writes for _, ack in write)  # SDA released for every ACK
    decoded = [(write[0][0] >> 1, tuple(byte for byte, _ in write[1:])) for write in writes]
    assert all(write[0][0] & 1 == 0 for write in writes)  # every address byte a write
    assert decoded == transactions()
    assert decoded[:2] == [(0x74, (0x10,)), (0x68, (0, 0x54, 0xE4, 0x12, 0x15, 0x92))]
    assert decoded[-1] == (0x68, (136, 0x40))
    # done after the last write's STOP and the settling time, and stays
    last_edge = max(i for i, (a, b) in enumerate(zip(samples, samples[1:])) if a != b)
    assert last_edge + 20 <= done_at[0] <= last_edge + 20 + 4 * 3
    assert samples[-1] == (1, 1)


@pytest.mark.parametrize("name, value", [("quarter_period", 0), ("start_delay", 1.5), ("settle", -1)])
@pytest.mark.usefixtures("unelaborated")
def test_si5324_setup_refuses_timings_that_are_not_positive_integers(name, value):
    timings = {"quarter_period": 1, "start_delay": 1, "settle": 1, name: value}
    with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, not {value!r}$"):
        SI5324Setup(**timings)


def test_the_si5324_registers_make_156_25_mhz_from_its_crystal():
    """The dividers the writes set (encoded as the part takes them: N1_HS and N2_HS less 4 in
    bits 7:5, the long dividers less 1), from the 114.285 MHz crystal, in free run: 156.25 MHz
    within 20 ppm (the receivers' clock recovery takes hundreds)."""
    registers = {}
    for address, data in transactions():
        if address == 0x68:
            registers.update({data[0] + k: byte for k, byte in enumerate(data[1:])})

    def long(first, bits=20):
        return ((registers[first] << 16 | registers[first + 1] << 8 | registers[first + 2]) & ((1 << bits) - 1)) + 1

    assert registers[0] & 0x40  # free run: the crystal on the CKIN2 path
    n1_hs, nc1_ls = (registers[25] >> 5) + 4, long(31)
    n2_hs, n2_ls, n32 = (registers[40] >> 5) + 4, long(40), long(46, 19)
    assert (n1_hs, nc1_ls, n2_hs, n2_ls, n32) == (9, 4, 10, 150000, 30476)
    assert 114.285e6 * n2_hs * n2_ls / (n32 * n1_hs * nc1_ls) == pytest.approx(156.25e6, rel=20e-6)
