"""Link training: the handshake that brings a link up (TS1 until the partner is heard, TS2
until the partner has heard this end too) and the conditions that take it down again."""

from amaranth.hdl import Module, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from ..base.counter import saturating_increment
from .protocol import ControlCode, LinkConfig
from .signatures import flit_stream


class TrainState(enum.Enum, shape=2):
    TRAIN = 0    # sending TS1 until the partner's training is heard
    CONFIRM = 1  # sending TS2 until the partner has heard us too
    UP = 2


class LinkTraining(wiring.Component):
    """The training state of one endpoint, from the flits received (``rx``), the receiver's
    ``locked`` and the TS2 flits the sender put on the line (``ts2_sent``, a pulse per flit).

    ``state`` says what the sender sends between frames (TS1 in TRAIN, TS2 in CONFIRM) and
    whether it may start frames (UP); ``entering_up`` pulses in the cycle the link comes up,
    ``retrain`` in the cycle it leaves UP.
    """

    def __init__(self, config: LinkConfig):
        self.config = config
        super().__init__({
            "rx": In(flit_stream(config.lane_width)),
            "locked": In(1),
            "ts2_sent": In(1),
            "state": Out(TrainState),
            "entering_up": Out(1),
            "retrain": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()
        state, rx_valid, locked = self.state, self.rx.valid, self.locked
        rx_ctrl = rx_valid & self.rx.payload.ctrl
        rx_ts1 = rx_ctrl & (self.rx.payload.data == ControlCode.TS1)
        rx_ts2 = rx_ctrl & (self.rx.payload.data == ControlCode.TS2)
        heard = Signal(range(cfg.train_count + 1))  # consecutive training flits received
        said = Signal(range(cfg.train_count + 1))   # TS2 flits sent in CONFIRM
        train_timer = Signal(range(cfg.train_timeout + 1))

        with m.Switch(state):
            with m.Case(TrainState.TRAIN):
                with m.If(rx_ts1 | rx_ts2):
                    saturating_increment(m, heard, cfg.train_count)
                with m.Elif(rx_valid):
                    m.d.sync += heard.eq(0)
                with m.If(locked & (heard == cfg.train_count)):
                    m.d.sync += [state.eq(TrainState.CONFIRM), heard.eq(0), said.eq(0),
                                 train_timer.eq(0)]
            with m.Case(TrainState.CONFIRM):
                with m.If(rx_ts2):
                    saturating_increment(m, heard, cfg.train_count)
                with m.Elif(rx_valid & ~rx_ts1):
                    m.d.sync += heard.eq(0)
                with m.If(self.ts2_sent):
                    saturating_increment(m, said, cfg.train_count)
                saturating_increment(m, train_timer, cfg.train_timeout)
                with m.If(~locked | (train_timer == cfg.train_timeout)):
                    m.d.sync += [state.eq(TrainState.TRAIN), heard.eq(0)]
                with m.Elif((heard == cfg.train_count) & (said == cfg.train_count)):
                    m.d.sync += [state.eq(TrainState.UP), heard.eq(0)]
                    m.d.comb += self.entering_up.eq(1)
            with m.Case(TrainState.UP):
                # Two TS1 in a row: one bit turns an IDLE (K28.5, 0xBC) into a TS1 (K28.1, 0x3C)
                # on a line without 8b/10b (the header-pin PHY), while a partner that retrains
                # sends TS1 back to back until it hears this end's.
                with m.If(rx_ts1):
                    saturating_increment(m, heard, cfg.train_count)
                with m.Elif(rx_valid):
                    m.d.sync += heard.eq(0)
                with m.If(~locked | rx_ts1 & (heard != 0)):
                    m.d.sync += [state.eq(TrainState.TRAIN), heard.eq(0)]
                    m.d.comb += self.retrain.eq(1)
        return m
