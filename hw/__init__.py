"""The hardware generator: Amaranth blocks that build one node of a mapping.

Layers, from the bottom: ``base`` (layouts, signatures, checks, memory helpers; imports
nothing else of ``hw``), ``arith``, ``streams``, ``memory``, ``engines``, ``balance``,
``node``, ``link``; ``build`` and ``synth`` are the tools on top.
"""
