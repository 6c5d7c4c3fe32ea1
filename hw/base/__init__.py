"""The base layer: payload layouts, port signatures, parameter checks and memory helpers.

Every other part of ``hw`` may import it; it imports nothing of ``hw`` itself.
"""
