"""A simulated chain as one component, the same for every simulation backend.

``ChainTop`` connects a mapping's nodes (``hw.node.connect_chain``), takes the images and
labels on two streams into node 0, shares the sample count with every node and shows,
per node, the mini-batch updates applied and whether an input beat entered this cycle.
Amaranth's simulator and the Verilator backend drive exactly these ports, so both count
the same cycles. Each queue a node keeps in DRAM gets a simulated DRAM
(hw/memory/dram_model.py) in the node's clock domain. Random stalls are hardware (``sim/stall.py``), on every link and on the
two feeds, so they are the same in both backends too.
"""

import dataclasses
import json
from types import SimpleNamespace

from amaranth.hdl import DomainRenamer, Module, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.link.model_phy import line_layout
from hw.memory.dram_model import simulated_drams
from hw.memory.update_gate import COUNT_BITS
from hw.node.loss import LABEL_BITS
from hw.node.top import Node, connect_chain
from mapping import numerics
from sim.stall import StallInjector, stalling_link


class ChainTop(wiring.Component):
    """The nodes of ``mapping`` in a chain. ``params``: initial words (golden layout) or None
    for zeros; ``stall``: probability that a link or a feed idles on a cycle; ``links``: a
    ``sim.chain_links.LinkedChain`` joining neighbours through link cores (then ``lanes``,
    its SimulatedLinks, holds the PHY processes, clocks and counters, and every endpoint's
    counters are outputs, ``link{i}_up_counters`` and ``link{i}_down_counters``) instead of port
    to port; ``gateware_links``: their lanes in logic (the Verilator backend).

    ``part``: a range of the mapping's nodes, the part of a chain cut at its lanes that one
    process simulates (sim/distributed.py; links in logic only). Its ports ``updates`` and
    ``entered`` count its own nodes; only the first part has the feeds ``act`` and ``label``; a
    link to a node of another part is cut after its lane's errors, at the sending end: the line
    (``hw.link.model_phy.line_layout``) it sends leaves on ``link{i}_{side}_line_out`` and the
    one it receives, delayed by the lane's latency, comes in on ``link{i}_{side}_line_in``."""

    def __init__(self, mapping, params=None, stall=0.0, links=None, gateware_links=False, part=None):
        self.mapping, self.stall = mapping, stall
        self.part = range(len(mapping.nodes)) if part is None else part
        # what the design is made of, for the Verilator cache (sim/verilated.py); weights
        # built into it are not named, so such a chain has none
        self.recipe = None if params is not None else json.dumps({
            "class": "ChainTop", "mapping": mapping.to_json(), "stall": stall, "gateware_links": gateware_links,
            "links": None if links is None else dataclasses.asdict(links), "part": [self.part.start, self.part.stop]})
        cut = (self.part.start > 0, self.part.stop < len(mapping.nodes))
        if any(cut) and not (links and gateware_links):
            raise ValueError("a part of a chain is cut at its lanes: it needs links in logic")
        self.nodes = [Node(cfg, params=params) for cfg in mapping.nodes[self.part.start:self.part.stop]]
        self.drams = [simulated_drams(node, node.config.dram_bits_per_cycle) for node in self.nodes]
        self.domains = links.node_domains(len(self.nodes)) if links else ["sync"] * len(self.nodes)
        # The link cores are built here, so the simulator's lane processes exist before it runs.
        self.link_cores = Module() if links else None
        self.lanes = links.join(self.link_cores, self.nodes, gateware=gateware_links, first=self.part.start,
                                cut=cut) if links else None
        count = len(self.nodes)
        members = {}
        if not cut[0]:
            act = self.nodes[0].signature.members["up"].signature.members["act"].signature
            members = {"act": In(act.flip()), "label": In(stream.Signature(LABEL_BITS))}
        counters = {name: Out(layout) for *_, name, layout in self.lanes.counter_ports()} if links else {}
        for c in self.lanes.cuts if links else ():
            layout = line_layout(links.lane_width)
            members.update({f"link{c.link}_{c.side}_line_out": Out(layout),
                            f"link{c.link}_{c.side}_line_in": In(layout)})
        super().__init__({
            **members,
            "total_samples": In(COUNT_BITS),
            "updates": Out(COUNT_BITS).array(count),
            "entered": Out(1).array(count),  # a beat entered the node's up.act this cycle
            **counters,
        })

    def elaborate(self, platform):
        m = Module()
        for n, (node, domain) in enumerate(zip(self.nodes, self.domains)):
            m.submodules[f"node{n}"] = node if domain == "sync" else DomainRenamer(domain)(node)
            m.d.comb += [node.total_samples.eq(self.total_samples), self.updates[n].eq(node.updates),
                         self.entered[n].eq(node.up.act.valid & node.up.act.ready)]
            if self.drams[n]:
                drams = Module()
                for name, model in self.drams[n].items():
                    drams.submodules[f"dram_{name}"] = model
                    wiring.connect(drams, getattr(node.dram, name), model.port)
                m.submodules[f"node{n}_drams"] = drams if domain == "sync" else DomainRenamer(domain)(drams)
        if self.lanes is not None:
            m.submodules.links = self.link_cores
            for link, _, side, endpoint in self.lanes.endpoints():
                m.d.comb += getattr(self, f"link{link}_{side}_counters").eq(endpoint.counters)
            for c in self.lanes.cuts:
                line_in = getattr(self, f"link{c.link}_{c.side}_line_in")
                m.d.comb += [getattr(self, f"link{c.link}_{c.side}_line_out").eq(c.errors.line),
                             c.endpoint.phy.rx.eq(line_in.flit), c.endpoint.phy.rx_valid.eq(1),
                             c.endpoint.phy.rx_locked.eq(line_in.locked)]
        else:
            connect_chain(m, self.nodes, link=stalling_link(self.stall) if self.stall else None)
        if self.part.start > 0:
            return m
        first = self.nodes[0].up
        for name, seed in (("act", 101), ("label", 103)):
            source, sink = wiring.flipped(getattr(self, name)), getattr(first, name)
            if self.stall:
                feed = m.submodules[f"{name}_feed"] = StallInjector(source.payload.shape(), seed=seed,
                                                                    stall=self.stall)
                wiring.connect(m, source, feed.i)
                source = feed.o
            wiring.connect(m, source, sink)
        return m

    def param_rams(self):
        """Every weight memory as (hierarchical name below the top, the LayerSlice whose rows it
        holds, whether it holds that slice's biases instead, ParamRam or the DramRows of FC weights
        in DRAM), in the submodule names of ``Node.elaborate``, ``SliceUnit.elaborate`` and
        ``ChainTop.elaborate``: what ``param_ram.memory_contents`` and ``store_contents`` take."""
        for n, node in enumerate(self.nodes):
            for k, unit in enumerate(node.units):
                prefix = f"node{n}.slice{k}_{unit.slice.layer}"
                if unit.lpram is not None:
                    yield f"{prefix}.lpram", unit.remote.local, False, unit.lpram
                if unit.owns_bias:
                    yield f"{prefix}.bias_ram", unit.slice, True, unit.bias_ram
            for host in node.hosted:
                yield f"node{n}.host_{host.rows.layer}_for{host.block.owner}.bpram", host.rows, False, host.bpram
            for k, unit in enumerate(node.units):
                if unit.dram_weights is not None:
                    name = f"slice{k}_fc_weights"
                    yield (f"node{n}_drams.dram_{name}", unit.slice, False,
                           DramRows(self.drams[n][name], unit.dram_weights.layout))


class DramRows:
    """The FC weights a SimulatedDram holds (row r at word r, hw/memory/dram_weights.py), seen as
    the weight read-back sees a ParamRam: ``layout``, ``rows``, ``banks``, ``words``,
    ``memory_paths`` and ``mem.data[r]``, the row as a ParamRam's, its words bank-major."""

    memory_paths = ("mem",)

    def __init__(self, dram, layout):
        self.layout = layout
        self.rows, self.banks, self.words = layout.rows, layout.banks, layout.words
        words = data.ArrayLayout(signed(numerics.WORD_BITS), layout.banks * layout.words)
        self.mem = SimpleNamespace(data=[words(dram.mem.data[r]) for r in range(layout.rows)])
