"""The node top: every layer slice of one NodeConfig, chained, with the paper's two link pairs.

Slices are in layer order; consecutive slices on one node are the end of layer L
and the start of layer L+1, so inside the node only two streams join them: L's
finished activations forward (``act``) and L+1's input errors backward (``err``),
exactly the channels of the first slice's ``down`` and the second's ``up`` (or two slices
of a grouped layer on either side of a group boundary, joined by all their channels). The
node's ``up`` and ``down`` ports (hw/node/ports.py) are the first slice's
predecessor-facing channels and the last slice's successor-facing ones, the labels
(which enter node 0 with the images and travel to the last node, where the loss
turns the class scores into output errors), and the streams of every block of weight
rows that crosses the link: rows the node's slices keep on a host (hw/balance),
rows it hosts, and rows it relays. ``connect_chain`` joins neighbours port to port,
or through a ``link`` (stall injectors in simulation; link cores between boards).

The ``dram`` port, where slices keep the samples in flight in DRAM (``act_storage``), has a
DramQueueSignature per queue (:attr:`Node.dram_queues`); the board gives each a DRAM port
and simulations a model (hw/memory/dram_model.simulated_drams, holding ``dram_init``).

The ``host`` port reaches every weight memory of the node (:attr:`Node.memories`, in
that order) to load initial weights and read trained ones back while the node is idle
(boards/: the host interface); read data is registered once more here, so a word read
in cycle t is on ``host.data`` in cycle t+2. The last node also keeps its ``loss`` unit
as an attribute, whose scores and labels the host interface watches to report the loss.
"""

from amaranth.back import rtlil
from amaranth.hdl import ClockSignal, Instance, Module, Mux, ResetSignal, Signal, signed
from amaranth.hdl._ir import PortDirection  # what rtlil.convert's ``ports`` take; not re-exported
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from mapping.memories import LABEL_FIFO_DEPTH
from mapping.numerics import WORD_BITS

from ..balance.blocks import RowStreams, hosted_blocks, relayed_blocks
from ..balance.hosted_rows import HostedRows
from ..balance.relay import Relay
from ..base.checks import check_family, refuse
from ..memory.param_ram import memory_contents, store_contents
from ..memory.fifo import Fifo
from ..memory.update_gate import COUNT_BITS
from .loss import LABEL_BITS, LossUnit
from .ports import CHANNELS, ChainLink, link_streams
from .slice_unit import SliceUnit, slice_ports


class NodeHostSignature(wiring.Signature):
    """The host's access to a node's weight memories: ``mem`` picks one of
    :attr:`Node.memories`, the rest is its :class:`~hw.base.signatures.HostPortSignature`,
    a cycle later (the node registers the request) and ``data`` a cycle later again: a read's
    word three cycles after it."""

    def __init__(self, memories):
        super().__init__({
            "mem": Out(range(max(len(memories), 1))),
            # A node may hold no weight memory at all (its weights in DRAM, no biases).
            "addr": Out(range(max((ram.rows for ram in memories), default=1))),
            "lane": Out(range(max((ram.banks * ram.words for ram in memories), default=1))),
            "read": Out(1),
            "write": Out(1),
            "value": Out(signed(WORD_BITS)),
            "data": In(signed(WORD_BITS)),
        })


class Node(wiring.Component):
    """``params``: the network's initial parameter words (golden layout) or None for zeros.
    ``family``: the device family for vendor primitives; None simulates.

    ``slices_apart``: each slice is an instance of module :meth:`slice_module_name` with the
    slice's :meth:`SliceUnit.module_ports`, whose RTLIL :func:`slice_rtlil` makes, in another
    process if one likes (``python -m hw.build`` elaborates a node's slices side by side); the node's
    own RTLIL and theirs together are the node's."""

    def __init__(self, config, *, params=None, family=None, slices_apart=False):
        check_family(self, family)
        if not config.slices:
            refuse(self, f"node {config.index} has no layer slices")
        if config.chain_length < 1:
            refuse(self, f"node {config.index}: the NodeConfig does not say how long the chain is")
        self.config, self.params, self.family, self.slices_apart = config, params, family, slices_apart
        self.applies_loss = config.index == config.chain_length - 1
        self.units = [SliceUnit(s, config.formats, config.training, params=params, family=family)
                      for s in config.slices]
        self.hosted = [HostedRows(block, config.formats, config.training, params=params, family=family)
                       for block in hosted_blocks(config)]
        self.relays = [Relay(block, family=family) for block in relayed_blocks(config)]
        # Every weight memory the host loads and reads back, with what it holds: ("weights",
        # LayerSlice of the rows) for an LPRAM or BPRAM, ("bias", LayerSlice) for a bias RAM.
        self.memories, self.contents = [], []
        for unit in self.units:
            if unit.lpram is not None:
                self.memories.append(unit.lpram)
                self.contents.append(("weights", unit.remote.local))
            if unit.bias_ram is not None:
                self.memories.append(unit.bias_ram)
                self.contents.append(("bias", unit.slice))
        for host in self.hosted:
            self.memories.append(host.bpram)
            self.contents.append(("weights", host.rows))
        self.loss = None
        up, _ = slice_ports(config.slices[0], config.formats.psum_bits)
        _, down = slice_ports(config.slices[-1], config.formats.psum_bits)
        up["label"] = LABEL_BITS
        if self.applies_loss:
            last = config.slices[-1]
            self.loss = LossUnit(classes=last.out_shape[0], position=last.position, formats=config.formats)
            down = {}
        else:
            down["label"] = LABEL_BITS
        # Every block of rows whose streams cross a link of this node, by side.
        rows = {"up": {}, "down": {}}
        for block in [b for unit in self.units for b in unit.remote.blocks]:
            rows[self._side(block.host)][RowStreams.member_name(block)] = block
        for host in self.hosted:
            rows[self._side(host.block.owner)][RowStreams.member_name(host.block)] = host.block
        for relay in self.relays:
            for end in (relay.block.host, relay.block.owner):
                rows[self._side(end)][RowStreams.member_name(relay.block)] = relay.block
        # The queues its slices keep in DRAM, by member name of the ``dram`` port.
        self.dram_queues = {f"slice{n}_{name}": signature for n, unit in enumerate(self.units)
                            for name, signature in unit.dram_queues.items()}
        self.dram_traffic = {f"slice{n}_{name}": bits for n, unit in enumerate(self.units)
                             for name, bits in unit.dram_traffic.items()}
        # Their first contents where a queue starts full (the FC weights), by the same names.
        self.dram_init = {f"slice{n}_{name}": words for n, unit in enumerate(self.units)
                          for name, words in unit.dram_init.items()}
        members = {"total_samples": In(COUNT_BITS), "updates": Out(COUNT_BITS),
                   "host": In(NodeHostSignature(self.memories)),
                   "up": In(self._link(up, rows["up"], self.config.index - 1))}
        if down:
            members["down"] = Out(self._link(down, rows["down"], self.config.index))
        if self.dram_queues:
            members["dram"] = Out(wiring.Signature({name: Out(signature)
                                                    for name, signature in self.dram_queues.items()}))
        super().__init__(members)

    def memory_rows(self, index, params):
        """The contents of memory ``index`` of :attr:`memories` for the network's parameter words
        ``params`` (golden layout): one list of ``banks * words`` words per address."""
        ram, (kind, rows) = self.memories[index], self.contents[index]
        return memory_contents(params, rows, ram, bias=kind == "bias")

    def store_memory(self, index, contents, params):
        """Put ``contents`` (memory ``index``'s words, address-major) into ``params`` (golden
        layout, changed in place): the inverse of :meth:`memory_rows`."""
        ram, (kind, rows) = self.memories[index], self.contents[index]
        store_contents(params, rows, ram, contents, bias=kind == "bias")

    def _side(self, node):
        return "down" if node > self.config.index else "up"

    @staticmethod
    def _link(channels, blocks, upstream_node):
        """A ChainLink whose upstream end is node ``upstream_node``."""
        return ChainLink(channels, {name: RowStreams(block) for name, block in blocks.items()},
                         upstream_hosts={name for name, block in blocks.items() if block.host <= upstream_node})

    def _rows_port(self, block, node):
        """This node's port for ``block``'s streams on the side of ``node``."""
        return getattr(getattr(self, self._side(node)), RowStreams.member_name(block))

    def elaborate(self, platform):
        m = Module()
        units = self.units
        for n, unit in enumerate(units):
            if self.slices_apart:
                ports = [("i" if direction is PortDirection.Input else "o", name, signal)
                         for name, (signal, direction) in unit.module_ports().items()]
                unit = Instance(slice_module_name(self.config, n), ("i", "clk", ClockSignal()),
                                ("i", "rst", ResetSignal()), *ports)
            m.submodules[slice_submodule(self.config, n)] = unit
        for host in self.hosted:
            m.submodules[f"host_{host.rows.layer}_for{host.block.owner}"] = host
        for relay in self.relays:
            m.submodules[f"relay_{relay.block.layer}_for{relay.block.owner}_from{relay.block.host}"] = relay
        # Mini-batch updates every slice and hosted range of this node has applied.
        fewest = units[0].updates
        for unit in units + self.hosted:
            m.d.comb += unit.total_samples.eq(self.total_samples)
            fewest = Mux(unit.updates < fewest, unit.updates, fewest)
        m.d.comb += self.updates.eq(fewest)

        # Weight balancing: each block's streams between this node's unit and its port.
        for unit in units:
            for block, streams in zip(unit.remote.blocks, unit.remote_streams()):
                connect(m, flipped(self._rows_port(block, block.host)), streams)
        for host in self.hosted:
            connect(m, host.streams, flipped(self._rows_port(host.block, host.block.owner)))
        for relay in self.relays:
            connect(m, flipped(self._rows_port(relay.block, relay.block.host)), relay.host_side)
            connect(m, relay.owner_side, flipped(self._rows_port(relay.block, relay.block.owner)))

        for n, unit in enumerate(units):
            for name in unit.dram_queues:
                connect(m, getattr(unit.dram, name), flipped(getattr(self.dram, f"slice{n}_{name}")))

        for upstream, downstream in zip(units, units[1:]):
            connect(m, upstream.down, downstream.up)
        for channel in units[0].up_channels:
            connect(m, flipped(getattr(self.up, channel)), getattr(units[0].up, channel))
        if not self.applies_loss:
            for channel in units[-1].down_channels:
                connect(m, getattr(units[-1].down, channel), flipped(getattr(self.down, channel)))

        labels = m.submodules.labels = Fifo(LABEL_BITS, LABEL_FIFO_DEPTH, family=self.family)
        connect(m, flipped(self.up.label), labels.i)
        if self.applies_loss:
            loss = m.submodules.loss = self.loss
            connect(m, units[-1].down.act, loss.scores)
            connect(m, loss.errors, units[-1].down.err)
            labels_out = loss.labels
        else:
            labels_out = flipped(self.down.label)
        connect(m, labels.o, labels_out)
        self._host_access(m)
        return m

    def _host_access(self, m):
        # The request through registers: the host's decode stops here instead of running on
        # into every memory's port-A enable and address (the CI bitstream's worst path at
        # 124.6 MHz, d47e622, ran from the host interface's READ arguments into the clock enable of the
        # FP weights' read register).
        host = self.host
        request = {name: Signal.like(getattr(host, name), name=f"host_{name}", reset_less=True)
                   for name in ("mem", "addr", "lane", "value")}
        read, write = Signal(), Signal()
        m.d.sync += [*(register.eq(getattr(host, name)) for name, register in request.items()),
                     read.eq(host.read), write.eq(host.write)]
        selected = Signal.like(host.mem)
        with m.If(read):
            m.d.sync += selected.eq(request["mem"])
        data = Signal.like(host.data)
        for n, ram in enumerate(self.memories):
            chosen = request["mem"] == n
            m.d.comb += [ram.host.addr.eq(request["addr"]), ram.host.lane.eq(request["lane"]),
                         ram.host.value.eq(request["value"]), ram.host.read.eq(read & chosen),
                         ram.host.write.eq(write & chosen)]
            with m.If(selected == n):
                m.d.comb += data.eq(ram.host.data)
        m.d.sync += host.data.eq(data)


def slice_submodule(config, n):
    return f"slice{n}_{config.slices[n].layer}"


def slice_module_name(config, n):
    """The module of slice ``n`` of ``config`` in the RTLIL of its node, converted as ``top``."""
    return f"top.{slice_submodule(config, n)}"


def slice_rtlil(config, n, *, params=None, family=None):
    """The RTLIL of slice ``n`` of ``config`` (a NodeConfig), the module (and its submodules) that a
    ``Node(config, slices_apart=True)`` instantiates; for the node's RTLIL to have one top, this
    text marks none."""
    unit = SliceUnit(config.slices[n], config.formats, config.training, params=params, family=family)
    text = rtlil.convert(unit, name=slice_module_name(config, n), ports=unit.module_ports())
    top = "attribute \\top 1\n"
    if text.count(top) != 1:
        raise RuntimeError(f"slice {n}'s RTLIL marks {text.count(top)} modules as its top, not 1")
    return text.replace(top, "")


def connect_chain(m, nodes, link=None):
    """Every node's ``down`` port to its successor's ``up`` port, stream by stream.

    ``link(m, producer, consumer)`` connects one stream (default: directly); simulations
    use it to put random back-pressure on the links.
    """
    link = link or (lambda m, producer, consumer: connect(m, producer, consumer))
    check_chain(nodes)
    for a, b in zip(nodes, nodes[1:]):
        theirs_by_path = {path: theirs for path, _, theirs in link_streams(b.up)}
        for path, downstream, ours in link_streams(a.down):
            theirs = theirs_by_path[path]
            if downstream:
                link(m, ours, theirs)
            else:
                link(m, theirs, ours)


def check_chain(nodes, ends=(True, True)):
    """Refuse a chain whose ends have weight-balancing streams crossing to no node, or whose
    neighbours disagree about the link between them (ValueError, one line). ``ends``: whether
    ``nodes`` starts and ends the chain (a part of a chain cut at its links has neighbours
    beyond them)."""
    for node, side, is_end in ((nodes[0], "up", ends[0]), (nodes[-1], "down", ends[1])):
        if is_end and side in node.signature.members:
            dangling = sorted(set(node.signature.members[side].signature.members) - set(CHANNELS))
            if dangling:
                raise ValueError(f"node {node.config.index}: weight-balancing streams {dangling} cross its "
                                 f"{side} link, which has no node on the other side")
    for a, b in zip(nodes, nodes[1:]):
        down, up = a.signature.members["down"].signature, b.signature.members["up"].signature.flip()
        if down != up:
            only_a = sorted(set(down.members) - set(up.members))
            only_b = sorted(set(up.members) - set(down.members))
            differ = sorted(name for name in set(down.members) & set(up.members)
                            if down.members[name] != up.members[name])
            raise ValueError(f"nodes {a.config.index} and {b.config.index} disagree about the link between "
                             f"them: only node {a.config.index} has {only_a}, only node {b.config.index} "
                             f"has {only_b}, different: {differ}")
