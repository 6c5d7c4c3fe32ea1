"""Memory helpers: the attributes that place a memory where the mapping planned it, and the
synchronous read register every RAM of the generator uses."""

from amaranth.hdl import Signal

from mapping.resources import ram_style

# Yosys attribute: a read colliding with a write returns don't-care data. Without it
# Yosys must emulate the read-first behaviour Amaranth promises, in logic around the
# block RAM; every collision that could matter here is prevented (and asserted).
NO_RW_CHECK = {"no_rw_check": 1}


def ram_attrs(depth, family):
    """Yosys attributes placing a memory ``depth`` deep in block or distributed RAM.

    Every memory of the generator takes them, so that Yosys and the mapping's estimate
    (``mapping.resources``, the one rule ``ram_style``) agree; ``family`` None (simulation)
    leaves the choice to the tool.
    """
    return {} if family is None else {"ram_style": ram_style(depth, family)}


def read_register(m, mem, addr, en):
    """A synchronous read of ``mem``: ``mem[addr]`` one cycle after ``en``, held while ``en`` is low.

    Built as an asynchronous read port and an enabled register, which Yosys merges into
    a block-RAM read port; on a memory carrying :data:`NO_RW_CHECK` that port needs no
    collision logic. Simulation returns the data from before a same-cycle write.
    """
    port = mem.read_port(domain="comb")
    value = Signal(mem.shape, reset_less=True)  # a reset would be logic around the block RAM
    m.d.comb += port.addr.eq(addr)
    with m.If(en):
        m.d.sync += value.eq(port.data)
    return value
