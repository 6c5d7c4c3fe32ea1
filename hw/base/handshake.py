"""Valid/ready handshakes: a fork for blocks that drive several streams from one beat, a
lockstep pair of consumers, and a skid buffer that cuts a stream's ready path."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


def fork(m, valid, outputs):
    """Offer one beat (``valid``) to every stream in ``outputs``; returns a signal high in the
    cycle the last of them takes it, when the source may move on.

    Every output sees every beat exactly once: an output that took the beat early is
    flagged and waits, with its valid low, until the others have taken it too.
    """
    taken = Signal(len(outputs))
    done = Cat(taken[n] | out.ready for n, out in enumerate(outputs))
    all_taken = Signal()
    m.d.comb += [all_taken.eq(done.all()), *(out.valid.eq(valid & ~taken[n]) for n, out in enumerate(outputs))]
    # The flags hold while valid is low: a source that retracts valid (a stalled link) offers
    # the same beat again, and the outputs that took it must not take it twice.
    with m.If(valid):
        m.d.sync += taken.eq(Mux(all_taken, 0, done))
    return all_taken


def lockstep(m, source, leader, follower):
    """Pass each beat of stream ``source`` to ``leader`` and ``follower`` in one cycle (payloads
    are the caller's): the beat is offered to ``leader`` while ``follower`` has room, and enters
    ``follower``, a buffer whose ready does not wait for its valid (a FIFO), in the cycle
    ``leader`` takes it. Unlike :func:`fork` the follower never takes a beat before the leader:
    a leader held by an update gate holds it too."""
    m.d.comb += [leader.valid.eq(source.valid & follower.ready),
                 follower.valid.eq(source.valid & follower.ready & leader.ready),
                 source.ready.eq(leader.ready & follower.ready)]


class SkidBuffer(wiring.Component):
    """A stream register slice whose ``i.ready`` is a register: the consumer's ready (after a
    fork's AND of several readies, an update gate's allow) stops here instead of running on
    into the producer's counters and memories. One cycle of latency, a beat per cycle, two
    registers of ``shape``: the output and the skid, which takes the beat accepted in the cycle
    the output stalled."""

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid, skid_valid = Signal.like(self.i.payload), Signal()
        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(~self.o.valid | self.o.ready):
            m.d.sync += [self.o.valid.eq(skid_valid | self.i.valid),
                         self.o.payload.eq(Mux(skid_valid, skid, self.i.payload)), skid_valid.eq(0)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
