"""The base layer: payload layouts, port signatures, parameter checks, memory helpers,
handshakes and counters.

Every other part of ``hw`` may import it; it imports nothing of ``hw`` itself.
"""
