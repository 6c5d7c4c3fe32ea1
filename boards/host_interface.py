"""The host interface of a board: the node chain behind a UART that speaks boards/protocol.py.

:class:`Trainer` holds the chain of nodes (joined by :func:`hw.node.connect_chain`,
with an optional ``link`` per stream: link cores between boards, or an on-chip PHY) and
the hardware that executes the host's frames:

- the receiver (:class:`FrameReceiver`) checks each frame's CRC (``amaranth.lib.crc``, the
  algorithm of :data:`boards.protocol.CRC`) while it stores the payload in a frame buffer
  (one block RAM of :data:`~boards.protocol.MAX_PAYLOAD` bytes), and keeps the first 8
  payload bytes (the command's arguments) in registers; only a frame whose CRC matches is
  executed, so a corrupted frame never reaches the nodes (a refused one is answered with
  NAK and its :class:`~boards.protocol.NakReason`);
- the executor reads the buffer one word per cycle or two: WRITE and READ go through
  each node's ``host`` port (hw/node/top.py) to its weight memories, LABEL and IMAGE
  become beats on node 0's ``up.label`` and ``up.act`` (back-pressure from node 0 only
  delays the answer), START sets ``total_samples``, STOP resets every node (a reset
  of the chain's logic; the weights are in block RAM and keep their values), STATUS
  and INFO answer with a snapshot of the counters;
- the sender (:class:`FrameSender`) frames the answer and appends its CRC.

Counters (per node): samples (labels that entered the node), weight updates applied,
the cycle of the latest update (counted from START), link retries (go-back-N replays) and
link CRC errors, summed over the link cores of the node's links (neighbours on one chip are
joined by link cores over an on-chip PHY, neighbours on two boards by link cores over the
board's link PHY), and the loss: the sum, over every sample the last
node scores, of sum_c (y_c - onehot_c << act_frac)^2, exact, with one multiplier that
squares one class per cycle (a sample takes ``classes`` cycles, far fewer than a node's
cycles per sample; a sample arriving sooner sets the error flag).

A board that holds part of a longer chain has a link endpoint (``hw.link.endpoint``) on each
side that leads off the board, its lane a ``{side}_phy`` port for the board's PHY: the
streams of that side (images and labels too, on a board without node 0) travel over it.
Only the board holding node 0 takes LABEL and IMAGE.
"""

import json

from amaranth.hdl import Assert, Cat, Const, Instance, Module, Mux, ResetInserter, Signal, Value, signed
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from hw.base.checks import refuse
from hw.base.handshake import SkidBuffer
from hw.link.chain import attach_endpoint, chain_link_config, link_chain
from hw.link.endpoint import LinkEndpoint
from hw.link.signatures import PhySignature
from hw.link.onchip_phy import on_chip_phy
from hw.node import Node
from hw.node.loss import LABEL_BITS
from mapping import link_model
from mapping.numerics import WORD_BITS

from . import protocol as p
from .uart import UartRx, UartTx


class FrameSender(wiring.Component):
    """Frames an answer: on ``start`` with ``command`` and ``length``, sends the sync byte,
    the header, ``length`` payload bytes taken from ``payload`` and the CRC."""

    def __init__(self):
        super().__init__({"start": In(1), "command": In(8), "length": In(16),
                          "payload": In(stream.Signature(8)), "bytes": Out(stream.Signature(8)),
                          "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = crc = p.CRC.create()
        command, length, left = Signal(8), Signal(16), Signal(16)
        out = self.bytes
        sent = out.valid & out.ready
        # The CRC takes each byte from a register, a cycle after it is sent (the byte comes
        # through the executor's answer multiplexers: into the CRC directly, the CI bitstream's
        # worst path). It has the last byte by "crc1": "payload" takes a cycle to see left == 0.
        counted, crc_byte, crc_take = Signal(), Signal(8), Signal()
        m.d.sync += [crc_byte.eq(out.payload), crc_take.eq(sent & counted)]
        m.d.comb += [crc.data.eq(crc_byte), crc.valid.eq(crc_take), self.busy.eq(1)]
        with m.FSM():
            with m.State("idle"):
                m.d.comb += [self.busy.eq(0), crc.start.eq(1)]
                with m.If(self.start):
                    m.d.sync += [command.eq(self.command), length.eq(self.length), left.eq(self.length)]
                    m.next = "sync"
            for state, byte, following in (("sync", p.SYNC, "command"), ("command", command, "length0"),
                                           ("length0", length[:8], "length1")):
                with m.State(state):
                    m.d.comb += [out.payload.eq(byte), out.valid.eq(1), counted.eq(state != "sync")]
                    with m.If(sent):
                        m.next = following
            with m.State("length1"):
                m.d.comb += [out.payload.eq(length[8:]), out.valid.eq(1), counted.eq(1)]
                with m.If(sent):
                    m.next = "payload"
            with m.State("payload"):
                with m.If(left == 0):
                    m.next = "crc1"
                with m.Else():
                    m.d.comb += [out.payload.eq(self.payload.payload), out.valid.eq(self.payload.valid),
                                 self.payload.ready.eq(out.ready), counted.eq(1)]
                    with m.If(sent):
                        m.d.sync += left.eq(left - 1)
            with m.State("crc1"):
                m.d.comb += [out.payload.eq(crc.crc[8:]), out.valid.eq(1)]
                with m.If(sent):
                    m.next = "crc0"
            with m.State("crc0"):
                m.d.comb += [out.payload.eq(crc.crc[:8]), out.valid.eq(1)]
                with m.If(sent):
                    m.next = "idle"
        return m


class FrameReceiver(wiring.Component):
    """Takes the host's frames from ``bytes``: the command, the length and the first
    ``READ_HEADER`` payload bytes (``args``, every command's arguments) into registers, the
    payload into a frame buffer (one block RAM of ``MAX_PAYLOAD`` bytes as 16-bit words, read
    through ``words``), the CRC checked on the way. After a frame's last byte, once the answer
    to the frame before has left (``answering`` low): a one-cycle ``execute``, or ``refuse``
    with its ``reason``; the next frame is taken after ``done`` (the executor has handed the
    whole answer on)."""

    def __init__(self):
        super().__init__({
            "bytes": In(stream.Signature(8, always_ready=True)),
            "answering": In(1),
            "done": In(1),
            "command": Out(8),
            "length": Out(16),
            "args": Out(8 * p.READ_HEADER),
            "execute": Out(1),
            "refuse": Out(1),
            "reason": Out(p.NakReason, init=p.NakReason.CRC_ERROR),
            "words": Out(memory.ReadPort.Signature(addr_width=(p.MAX_PAYLOAD // 2 - 1).bit_length(), shape=16)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = crc = p.CRC.create()
        m.submodules.buffer = buffer = memory.Memory(shape=16, depth=p.MAX_PAYLOAD // 2, init=[])
        store = buffer.write_port(granularity=8)
        wiring.connect(m, wiring.flipped(self.words), buffer.read_port())
        command, length, args = self.command, self.length, self.args
        # The byte count apart from the executor's word index: one register for both took every
        # state of both machines into its input (an ECP5-85 node's path at 125 MHz).
        received = Signal(16)
        got, byte = self.bytes.valid, self.bytes.payload
        refuse, reason = self.refuse, self.reason
        m.d.comb += [crc.data.eq(byte), store.data.eq(byte.replicate(2)),
                     store.addr.eq(received[1:]), store.en.eq(0)]
        m.d.sync += [self.execute.eq(0), refuse.eq(0)]  # one-cycle pulses, set below
        with m.FSM(name="receive"):
            with m.State("sync"):
                m.d.comb += crc.start.eq(1)
                with m.If(got & (byte == p.SYNC)):
                    m.next = "command"
            with m.State("command"):
                m.d.comb += crc.valid.eq(got)
                with m.If(got):
                    m.d.sync += command.eq(byte)
                    m.next = "length0"
            with m.State("length0"):
                m.d.comb += crc.valid.eq(got)
                with m.If(got):
                    m.d.sync += length[:8].eq(byte)
                    m.next = "length1"
            with m.State("length1"):
                m.d.comb += crc.valid.eq(got)
                with m.If(got):
                    m.d.sync += [length[8:].eq(byte), received.eq(0), args.eq(0)]
                    m.next = "payload"
                    with m.If(Cat(length[:8], byte) == 0):
                        m.next = "crc1"
            with m.State("payload"):
                m.d.comb += crc.valid.eq(got)
                with m.If(got):
                    with m.If(received < p.MAX_PAYLOAD):
                        m.d.comb += store.en.eq(Mux(received[0], 0b10, 0b01))
                    for k in range(p.READ_HEADER):
                        with m.If(received == k):
                            m.d.sync += args.word_select(k, 8).eq(byte)
                    m.d.sync += received.eq(received + 1)
                    with m.If(received == length - 1):
                        m.next = "crc1"
            with m.State("crc1"):
                m.d.comb += crc.valid.eq(got)
                with m.If(got):
                    m.next = "crc0"
            with m.State("crc0"):
                m.d.comb += crc.valid.eq(got)
                with m.If(got):
                    m.next = "check"
            with m.State("check"):  # the CRC register has taken the last byte
                # The verdict reaches the executor through registers, a cycle later: the CRC
                # comparison ran on through the executor's decode into its state (an ECP5-85
                # node's host paths at 125 MHz).
                with m.If(~self.answering):
                    with m.If(~crc.match_detected):
                        m.d.sync += [refuse.eq(1), reason.eq(p.NakReason.CRC_ERROR)]
                    with m.Elif(length > p.MAX_PAYLOAD):
                        m.d.sync += [refuse.eq(1), reason.eq(p.NakReason.FRAME_TOO_LONG)]
                    with m.Else():
                        m.d.sync += self.execute.eq(1)
                    m.next = "busy"
            with m.State("busy"):
                with m.If(self.done):
                    m.next = "sync"
        return m


class TrainerLeds(wiring.Signature):
    def __init__(self):
        super().__init__({"link_up": Out(1), "training": Out(1), "error": Out(1)})


def _field_bits(fields):
    return sum(size for _, size in fields) * 8


# The one-board chain's links: a 32-bit lane (twice the serial links' 16, for a little more
# logic) and two registers each way.
ON_CHIP_LANE_WIDTH, ON_CHIP_LATENCY = 32, 2


class Trainer(wiring.Component):
    """The chain of ``mapping``'s nodes ``nodes`` (a range; default all) behind the host interface.

    ``divisor``: clock cycles per UART bit. ``params``: initial weights built into the memories
    (None: zeros; the host loads them). The host streams images and labels into node 0 (on the
    board that holds it). Neighbours on the board are joined by link cores over an
    :class:`~hw.link.onchip_phy.OnChipPhy` of ``lane_width`` bits; a side that leads off the
    board ends in a :class:`~hw.link.endpoint.LinkEndpoint` whose lane is the port ``{side}_phy``
    (``up``, ``down``; ``link_lane_width`` bits, buffers sized for ``link_latency`` cycles each
    way), received in clock domain ``{side}_link_rx``. With ``link_clock`` "node" the endpoint
    sends on the node clock (a PHY on I/O pins clocked by the node); with "phy" on clock domain
    ``{side}_link`` (a transceiver's word clock), its channels and counters crossed into the node's.
    ``off_board``: those endpoints by side.

    Resets: ``reset`` resets the host interface, and the chain a cycle later (a board drives it
    from its PLL's lock; its ``sync`` domain has no reset of its own). The chain's flip-flops take
    one reset, a register of ``reset`` or STOP, and nothing else: on an ECP5 board through a
    global clock buffer, which reaches the thousands of them within the clock period (from
    a LUT that ORed the domain's reset with STOP, general routing took up to 5.9 ns).
    """

    def __init__(self, mapping, *, divisor, family=None, params=None, nodes=None, lane_width=ON_CHIP_LANE_WIDTH,
                 link_lane_width=link_model.LANE_WIDTH, link_latency=link_model.PHY_LATENCY, link_clock="node"):
        if link_clock not in ("node", "phy"):
            raise ValueError(f"link_clock must be 'node' or 'phy', not {link_clock!r}")
        self.mapping, self.divisor, self.lane_width, self.family = mapping, divisor, lane_width, family
        held = range(len(mapping.nodes)) if nodes is None else nodes
        # what the design is made of, for a simulation's build cache; weights built in are not named
        self.recipe = None if params is not None else json.dumps({
            "class": "Trainer", "mapping": mapping.to_json(), "divisor": divisor, "family": family,
            "nodes": list(held), "lane_width": lane_width, "link_lane_width": link_lane_width,
            "link_latency": link_latency, "link_clock": link_clock})
        self.first = held[0]
        self.nodes = [Node(mapping.nodes[n], params=params, family=family) for n in held]
        for node in self.nodes:
            if node.dram_queues:
                refuse(self, f"node {node.config.index} keeps {', '.join(node.dram_queues)} in DRAM, but the boards "
                             f"do not build a DRAM controller yet; map with --act-storage chip --fc-weights chip")
        self.formats = mapping.nodes[0].formats
        ends = {"up": self.nodes[0], "down": self.nodes[-1]}
        # On the node clock, the node's streams meet the link layer without a crossing (the
        # layer's own staging register decouples their handshakes).
        self.off_board = {side: LinkEndpoint(chain_link_config(getattr(node, side), link_lane_width, link_latency),
                                             "sync", "sync" if link_clock == "node" else f"{side}_link",
                                             f"{side}_link_rx", status_domain="sync")
                          for side, node in ends.items()
                          if side in node.signature.members and not (side == "up" and self.first == 0)}
        super().__init__({"reset": In(1), "rx": In(1, init=1), "tx": Out(1, init=1), "leds": Out(TrainerLeds()),
                          **{f"{side}_phy": Out(PhySignature(link_lane_width)) for side in self.off_board}})

    def elaborate(self, platform):
        m = Module()
        nodes = self.nodes
        stop = Signal()
        chain = Module()
        for n, node in enumerate(nodes):
            chain.submodules[f"node{n}"] = node
        links = link_chain(chain, nodes, on_chip_phy(self.lane_width, ON_CHIP_LATENCY), lane_width=self.lane_width,
                           phy_latency=ON_CHIP_LATENCY)
        off_board = self.off_board
        for side, endpoint in off_board.items():
            chain.submodules[f"{side}_link"] = endpoint
            port = nodes[0].up if side == "up" else nodes[-1].down
            attach_endpoint(chain, port, endpoint, upstream=side == "down")
            connect(m, endpoint.phy, flipped(getattr(self, f"{side}_phy")))
        m.d.comb += self.leds.link_up.eq(Cat(end.link_up for end in off_board.values()).all())
        feeds = self.first == 0  # the host feeds images and labels into node 0

        m.submodules.uart_rx = rx = UartRx(self.divisor)
        m.submodules.uart_tx = tx = UartTx(self.divisor)
        m.submodules.sender = sender = FrameSender()
        m.d.comb += [rx.pin.eq(self.rx), self.tx.eq(tx.pin)]
        wiring.connect(m, sender.bytes, tx.bytes)

        m.submodules.receiver = receiver = FrameReceiver()
        wiring.connect(m, rx.bytes, receiver.bytes)
        command, length, execute, refuse = receiver.command, receiver.length, receiver.execute, receiver.refuse
        index = Signal(16)  # the executor's word in the frame buffer
        done = Signal()  # the executor has handed the whole answer to the sender
        frame_errors = Signal(32)
        m.d.comb += [receiver.answering.eq(sender.busy), receiver.done.eq(done)]

        # --- state the host sets and the counters ------------------------------------------
        # Timing: the counters and flags here only report, so what they read from the nodes
        # (each node's update count, a minimum over its slices) and the START that clears them
        # arrive through registers, a cycle late (the reports are unchanged: ``cycle`` starts a
        # cycle later too); they spanned the node and this decoder (an ECP5-85 node's worst
        # paths at 125 MHz).
        total_samples, expected_updates = Signal(32), Signal(32)
        training, error = Signal(), Signal()
        starting, clear = Signal(), Signal()  # START: a new run
        m.d.sync += clear.eq(starting)
        cycle = Signal(32)
        with m.If(clear):
            m.d.sync += cycle.eq(0)
        with m.Elif(training):
            m.d.sync += cycle.eq(cycle + 1)
        updates = [Signal(32, name=f"updates{n}") for n in range(len(nodes))]
        m.d.sync += [seen.eq(node.updates) for seen, node in zip(updates, nodes)]
        finished = Signal()
        m.d.sync += finished.eq(Cat(seen >= expected_updates for seen in updates).all())
        m.d.comb += [self.leds.training.eq(training & ~finished), self.leds.error.eq(error)]
        node_fields = []
        for n, (node, seen) in enumerate(zip(nodes, updates)):
            samples, cycles, last_updates = Signal(32), Signal(32), Signal(32)
            m.d.comb += node.total_samples.eq(total_samples)
            # Counted a cycle late, from a register of the label handshake (from deep in the
            # node, it ran into the counter's enable).
            label_taken = Signal(name=f"label_taken{n}")
            m.d.sync += label_taken.eq(node.up.label.valid & node.up.label.ready)
            with m.If(label_taken):
                m.d.sync += samples.eq(samples + 1)
            m.d.sync += last_updates.eq(seen)
            with m.If(seen != last_updates):
                m.d.sync += cycles.eq(cycle)
            with m.If(clear):
                m.d.sync += [samples.eq(0), cycles.eq(0)]
            ends = [link.upstream for link in links if link.index == n] + [
                link.downstream for link in links if link.index + 1 == n] + [
                end for side, end in off_board.items() if n == (0 if side == "up" else len(nodes) - 1)]
            link_retries = sum((end.counters.replays for end in ends), Const(0, 32))[:32]
            link_crc_errors = sum((end.counters.crc_errors for end in ends), Const(0, 32))[:32]
            node_fields.append(Cat(samples, seen, cycles, link_retries, link_crc_errors))

        loss_squares, loss_samples = Signal(64), Signal(32)
        if nodes[-1].loss is not None:
            self._loss(m, nodes[-1].loss, loss_squares, loss_samples, clear, error)
        with m.If(refuse):
            m.d.sync += [frame_errors.eq(frame_errors + 1), error.eq(1)]

        links_up = Cat(off_board[side].link_up if side in off_board else 1 for side in ("up", "down"))
        status = Cat(training, Const(0, 7), error, Const(0, 7), links_up, Const(0, 6), frame_errors,
                     loss_squares, loss_samples, *node_fields)
        assert len(status) == 8 * p.status_bytes(len(nodes))
        info = Cat(Const(self.first, 8), Const(len(nodes), 8), *(Const(len(node.memories), 8) for node in nodes))
        snapshot = Signal(max(len(status), len(info)))

        # --- executor ----------------------------------------------------------------------
        args = receiver.args
        node_index, mem = args[0:8], args[8:16]
        # The address, lane and count a WRITE or READ moves on: the executor's, loaded from the
        # arguments when the frame executes (the receiver's registers are its own).
        addr, lane, count = Signal(16), Signal(16), Signal(16)
        # The argument checks, registered: length and arguments are final two UART bytes
        # before ``execute`` (the CRC's), and as comparisons in front of the executor's decode
        # they ran into its state (node 0's latest inputs at 125 MHz).
        write_bad, read_bad, start_bad = (Signal(name=name) for name in ("write_bad", "read_bad", "start_bad"))
        m.d.sync += [write_bad.eq((length < p.WRITE_HEADER) | length[0] | (node_index >= len(nodes))),
                     read_bad.eq((length != p.READ_HEADER) | (node_index >= len(nodes))
                                 | (args[48:64] > p.MAX_PAYLOAD // 2)),
                     start_bad.eq(length != 8)]
        word = Signal(16)
        first = Signal(16)  # words of arguments before the data
        m.d.comb += receiver.words.addr.eq(index)
        label_in, act_in = nodes[0].up.label, nodes[0].up.act
        if feeds:
            # Into node 0 through skid buffers (in the chain, reset with it): the executor's
            # state decode ran on into the write side of node 0's label FIFO.
            skids = [SkidBuffer(port.payload.shape()) for port in (label_in, act_in)]
            for name, skid, port in zip(("label", "act"), skids, (label_in, act_in)):
                chain.submodules[f"host_{name}_skid"] = skid
                connect(chain, skid.o, port)
            label_in, act_in = (skid.i for skid in skids)
        channels = len(Value.cast(act_in.payload)) // WORD_BITS
        pixel = Signal(len(Value.cast(act_in.payload)))
        channel = Signal(range(channels + 1))
        if feeds:
            m.d.comb += act_in.payload.eq(pixel)
        node_data = Signal(signed(WORD_BITS))
        for n, node in enumerate(nodes):
            m.d.comb += [node.host.mem.eq(mem), node.host.addr.eq(addr), node.host.lane.eq(lane),
                         node.host.value.eq(word)]
            with m.If(node_index == n):
                m.d.comb += node_data.eq(node.host.data)
        # WRITE and READ run on past the end of a row into the next address.
        last_lane = Signal.like(lane)
        for n, node in enumerate(nodes):
            for k, ram in enumerate(node.memories):
                with m.If((node_index == n) & (mem == k)):
                    m.d.comb += last_lane.eq(ram.banks * ram.words - 1)
        next_word = [lane.eq(Mux(lane == last_lane, 0, lane + 1)), addr.eq(addr + (lane == last_lane))]
        host_read, host_write = Signal(), Signal()
        for n, node in enumerate(nodes):
            m.d.comb += [node.host.read.eq(host_read & (node_index == n)),
                         node.host.write.eq(host_write & (node_index == n))]
        wait = Signal(2)
        read_word = Signal(16)

        # Whether every word of a WRITE, LABEL or IMAGE is taken, a register loaded with the
        # index (the comparison of index and length in front of the fetch states' decisions held
        # node 0's executor state late at 125 MHz).
        fetched_all = Signal()

        def advance():
            m.d.sync += [index.eq(index + 1), fetched_all.eq(index + 1 == length[1:])]

        def answer(code, size):
            m.d.comb += [sender.start.eq(1), sender.command.eq(code), sender.length.eq(size)]

        with m.FSM(name="execute"):
            with m.State("wait"):
                with m.If(refuse):
                    answer(p.NAK, 1)
                    m.d.sync += snapshot.eq(receiver.reason)
                    m.next = "send_snapshot"
                with m.Elif(execute):
                    m.d.sync += [index.eq(0), addr.eq(args[16:32]), lane.eq(args[32:48]), count.eq(args[48:64])]
                    with m.Switch(command):
                        with m.Case(p.Command.INFO):
                            answer(p.Command.INFO | p.REPLY, len(info) // 8)
                            m.d.sync += snapshot.eq(info)
                            m.next = "send_snapshot"
                        with m.Case(p.Command.STATUS):
                            answer(p.Command.STATUS | p.REPLY, len(status) // 8)
                            m.d.sync += snapshot.eq(status)
                            m.next = "send_snapshot"
                        with m.Case(p.Command.WRITE):
                            with m.If(write_bad):
                                m.next = "bad_argument"
                            with m.Else():
                                m.d.sync += [index.eq(p.WRITE_HEADER // 2), first.eq(p.WRITE_HEADER // 2),
                                             fetched_all.eq(length[1:] == p.WRITE_HEADER // 2)]
                                m.next = "write_fetch"
                        with m.Case(p.Command.READ):
                            with m.If(read_bad):
                                m.next = "bad_argument"
                            with m.Else():
                                answer(p.Command.READ | p.REPLY, args[48:64] << 1)
                                m.next = "read_issue"
                        with m.Case(p.Command.LABEL, p.Command.IMAGE):
                            if not feeds:  # node 0 is on another board
                                m.next = "bad_argument"
                            else:
                                with m.If(length[0]):
                                    m.next = "bad_argument"
                                with m.Else():
                                    m.d.sync += [first.eq(0), channel.eq(0), fetched_all.eq(length[1:] == 0)]
                                    m.next = "feed_fetch"
                        with m.Case(p.Command.START):
                            with m.If(start_bad):
                                m.next = "bad_argument"
                            with m.Else():
                                m.d.sync += [total_samples.eq(args[:32]), expected_updates.eq(args[32:64]),
                                             training.eq(1), error.eq(0)]
                                m.d.comb += starting.eq(1)
                                m.next = "acknowledge"
                        with m.Case(p.Command.STOP):
                            m.d.sync += [training.eq(0), stop.eq(1)]
                            m.next = "acknowledge"
                        with m.Default():
                            answer(p.NAK, 1)
                            m.d.sync += snapshot.eq(p.NakReason.UNKNOWN_COMMAND)
                            m.next = "send_snapshot"
            with m.State("bad_argument"):
                answer(p.NAK, 1)
                m.d.sync += snapshot.eq(p.NakReason.BAD_ARGUMENT)
                m.next = "send_snapshot"
            with m.State("acknowledge"):
                m.d.sync += stop.eq(0)
                answer(command | p.REPLY, 0)
                m.d.comb += done.eq(1)
                m.next = "wait"
            with m.State("send_snapshot"):
                # Shifted out a byte at a time: no multiplexer over the snapshot's bytes.
                m.d.comb += [sender.payload.payload.eq(snapshot[:8]), sender.payload.valid.eq(sender.busy)]
                with m.If(sender.payload.ready & sender.payload.valid):
                    m.d.sync += snapshot.eq(snapshot[8:])
                with m.If(~sender.busy & ~sender.start):
                    m.d.comb += done.eq(1)
                    m.next = "wait"
            # WRITE: one word per two cycles (the buffer's read takes one).
            with m.State("write_fetch"):
                m.d.sync += Assert(fetched_all == (index == length[1:]), "host interface: fetched_all disagrees")
                with m.If(fetched_all):
                    m.next = "acknowledge"
                with m.Else():
                    m.next = "write_word"
            with m.State("write_word"):
                m.d.comb += [word.eq(receiver.words.data), host_write.eq(1)]
                m.d.sync += next_word
                advance()
                m.next = "write_fetch"
            # READ: a word is on the node's host port three cycles after the read (hw/node/top.py).
            with m.State("read_issue"):
                with m.If(count == 0):
                    with m.If(~sender.busy):
                        m.d.comb += done.eq(1)
                        m.next = "wait"
                with m.Else():
                    m.d.comb += host_read.eq(1)
                    m.d.sync += wait.eq(2)
                    m.next = "read_wait"
            with m.State("read_wait"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [read_word.eq(node_data), count.eq(count - 1), *next_word]
                    m.next = "read_low"
            for state, part, following in (("read_low", read_word[:8], "read_high"),
                                           ("read_high", read_word[8:], "read_issue")):
                with m.State(state):
                    m.d.comb += [sender.payload.payload.eq(part), sender.payload.valid.eq(1)]
                    with m.If(sender.payload.ready):
                        m.next = following
            if feeds:
                # LABEL / IMAGE: one beat per label word, per ``channels`` pixel words.
                with m.State("feed_fetch"):
                    m.d.sync += Assert(fetched_all == (index == length[1:]), "host interface: fetched_all disagrees")
                    with m.If(fetched_all):
                        m.next = "acknowledge"
                    with m.Else():
                        m.next = "feed_word"
                with m.State("feed_word"):
                    with m.If(command == p.Command.LABEL):
                        m.d.comb += [label_in.payload.eq(receiver.words.data[:LABEL_BITS]), label_in.valid.eq(1)]
                        with m.If(label_in.ready):
                            advance()
                            m.next = "feed_fetch"
                    with m.Else():
                        m.d.sync += pixel.eq(Cat(pixel[WORD_BITS:], receiver.words.data))
                        advance()
                        with m.If(channel == channels - 1):
                            m.d.sync += channel.eq(0)
                            m.next = "feed_pixel"
                        with m.Else():
                            m.d.sync += channel.eq(channel + 1)
                            m.next = "feed_fetch"
                with m.State("feed_pixel"):
                    m.d.comb += act_in.valid.eq(1)
                    with m.If(act_in.ready):
                        m.next = "feed_fetch"

        top = Module()
        top.submodules.host = ResetInserter(self.reset)(m)
        chain_reset = Signal(reset_less=True, init=1)  # held from configuration until ``reset`` falls
        top.d.sync += chain_reset.eq(self.reset | stop)
        if platform is not None and self.family == "ecp5":
            on_global = Signal(name="chain_reset_global")
            top.submodules.chain_reset_buffer = Instance("DCCA", i_CLKI=chain_reset, i_CE=Const(1), o_CLKO=on_global)
            chain_reset = on_global
        top.submodules.chain = ResetInserter(chain_reset)(chain)  # STOP resets the links too: they retrain
        return top

    def _loss(self, m, loss, squares, samples, clear, error):
        """Sum of (y_c - onehot_c << act_frac)^2 over the samples the loss unit takes."""
        classes = loss.classes
        one = 1 << self.formats.act_frac
        diffs = [Signal(signed(WORD_BITS + 2), name=f"loss_diff{c}") for c in range(classes)]
        pending = Signal(range(classes + 1))
        taken = loss.scores.valid & loss.scores.ready
        with m.If(taken):
            for c, diff in enumerate(diffs):
                m.d.sync += diff.eq(loss.scores.payload[c] - Mux(loss.labels.payload == c, one, 0))
            m.d.sync += [pending.eq(classes), samples.eq(samples + 1)]
            with m.If(pending != 0):
                m.d.sync += error.eq(1)
        with m.Elif(pending != 0):
            # Squares the first class and shifts the others down.
            m.d.sync += [squares.eq(squares + diffs[0] * diffs[0]), pending.eq(pending - 1)]
            for c in range(classes - 1):
                m.d.sync += diffs[c].eq(diffs[c + 1])
        with m.If(clear):
            m.d.sync += [squares.eq(0), samples.eq(0), pending.eq(0)]
