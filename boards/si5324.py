"""The VC709's SI5324 set up for the SFP+ cages' 156.25 MHz reference, over I2C at power-up.

The SI5324 jitter attenuator feeds MGTREFCLK0 of GTH quad 113, the SFP+ cages' reference
(boards/vc709.py), and gives nothing until it is programmed. It sits behind the board's PCA9548
I2C switch (address 0x74, channel 4); :class:`SI5324Setup` writes the switch's channel and then
the SI5324's registers (address 0x68) once after reset: free run from its 114.285 MHz crystal
(CKIN2 path), output CKOUT1 only, and the dividers

    f_out = 114.285 MHz * N2_HS * N2_LS / (N32 * N1_HS * NC1_LS)
          = 114.285 MHz * 10 * 150000 / (30476 * 9 * 4) = 156.248 MHz

(11 ppm under 156.25: each board's links run on its own reference, and the receiver's clock
recovery and elastic buffer take far more), then an internal calibration (ICAL). The dividers
are encoded as the part takes them (N1_HS and N2_HS less 4, the long dividers less 1;
sim/test_si5324.py decodes them back); the values are those of designs that run the VC709's
SFP+ at 156.25 MHz, and no board here has checked them.

The I2C waveform is fixed, so it is a table of SCL/SDA levels, four per bit, stepped through at
four times the bit rate; the lines are open drain (a level of 1 releases the line to the board's
pull-up). The writes do not check the devices' acknowledgements: a device that does not answer
leaves the reference off and the links untrained (LED 0 dark). No I2C core among the project's
libraries runs a fixed sequence without a CPU (LiteX's is a CPU-driven bit-bang register).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

I2C_SWITCH, I2C_SWITCH_SI5324 = 0x74, 1 << 4   # PCA9548 and the control byte of its channel 4
SI5324 = 0x68

# (first register, bytes written from it on), the register address auto-incrementing.
SI5324_WRITES = (
    (0, (0x54,    # free run (the crystal on the CKIN2 path), CKOUT always on, no bypass
         0xE4,    # clock priorities: CKIN1 first, CKIN2 second
         0x12,    # BWSEL 1
         0x15,    # CKIN1 selected, no digital hold, outputs off during ICAL
         0x92)),  # automatic revertive selection
    (10, (0x08,   # CKOUT2 disabled, CKOUT1 enabled
          0x40)),  # both clock inputs enabled
    (25, (0xA0,)),  # N1_HS = 9 (register: N1_HS - 4 in bits 7:5)
    (31, (0x00, 0x00, 0x03)),  # NC1_LS = 4 (register: NC1_LS - 1)
    (40, (0xC2, 0x49, 0xEF,   # N2_HS = 10 (bits 7:5: N2_HS - 4), N2_LS = 150000 (register: N2_LS - 1)
          0x00, 0x77, 0x0B,   # N31 = 30476 (register: N31 - 1)
          0x00, 0x77, 0x0B)),  # N32 = 30476
    (136, (0x40,)),  # ICAL: calibrate on the settings above
)


def transactions():
    """The I2C writes of the set-up in order: (7-bit address, bytes)."""
    return [(I2C_SWITCH, (I2C_SWITCH_SI5324,))] + [(SI5324, (register, *data)) for register, data in SI5324_WRITES]


def waveform(writes):
    """The (SCL, SDA) levels of the I2C ``writes`` ((address, bytes) each: START, the address
    byte with the write bit, the bytes, each followed by a released SDA for the device's
    acknowledgement, STOP), four per bit; both lines released before and after."""
    levels = [(1, 1)] * 4
    for address, data in writes:
        levels += [(1, 1), (1, 0), (0, 0), (0, 0)]  # START: SDA falls while SCL is high
        for byte in (address << 1, *data):
            for bit in [(byte >> (7 - i)) & 1 for i in range(8)] + [1]:  # 1: SDA free for the ACK
                levels += [(0, bit), (1, bit), (1, bit), (0, bit)]
        levels += [(0, 0), (1, 0), (1, 1), (1, 1)]  # STOP: SDA rises while SCL is high
    return levels


class SI5324Setup(wiring.Component):
    """Programs the SI5324 once after reset, ``start_delay`` cycles after it (the SI5324 is ready
    for I2C some milliseconds after power-up), at ``quarter_period`` cycles per quarter of an
    I2C bit; ``done`` rises ``settle`` cycles after the last write (the SI5324's calibration and
    lock). ``scl``/``sda``: the open-drain levels (1: release the line)."""

    def __init__(self, *, quarter_period, start_delay, settle):
        for name, value in (("quarter_period", quarter_period), ("start_delay", start_delay),
                            ("settle", settle)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.quarter_period, self.start_delay, self.settle = quarter_period, start_delay, settle
        self.levels = waveform(transactions())
        super().__init__({"scl": Out(1, init=1), "sda": Out(1, init=1), "done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.table = table = Memory(shape=2, depth=len(self.levels),
                                            init=[scl << 1 | sda for scl, sda in self.levels])
        read = table.read_port(domain="comb")
        wait = Signal(range(max(self.start_delay, self.quarter_period, self.settle) + 1), init=self.start_delay)
        step = Signal(range(len(self.levels) + 1))
        m.d.comb += read.addr.eq(step)
        with m.FSM():
            with m.State("Delay"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += wait.eq(self.quarter_period - 1)
                    m.next = "Write"
            with m.State("Write"):
                m.d.sync += [self.scl.eq(read.data[1]), self.sda.eq(read.data[0]), wait.eq(wait - 1)]
                with m.If(wait == 0):
                    m.d.sync += [wait.eq(self.quarter_period - 1), step.eq(step + 1)]
                    with m.If(step == len(self.levels) - 1):
                        m.d.sync += wait.eq(self.settle)
                        m.next = "Settle"
            with m.State("Settle"):
                m.d.sync += [self.scl.eq(1), self.sda.eq(1), wait.eq(wait - 1)]
                with m.If(wait == 0):
                    m.next = "Done"
            with m.State("Done"):
                m.d.comb += self.done.eq(1)
        return m
