"""A node: its layer slices (FP/EB/PG datapaths, SFU, update gate), the loss on the last node,
and the chain of nodes joined by their two link pairs."""

from .top import Node, connect_chain

__all__ = ["Node", "connect_chain"]
