"""Valid/ready handshakes shared by blocks that drive several streams from one beat."""

from amaranth.hdl import Cat, Mux, Signal


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
