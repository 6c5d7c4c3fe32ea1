"""Transceiver link cores: logical channels multiplexed over a reliable, credit-based link
between neighbouring FPGAs (see docs/link_protocol.md)."""
