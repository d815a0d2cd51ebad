"""Egress: the rules of each box, the proxy that enforces them, and the host's own addresses."""
