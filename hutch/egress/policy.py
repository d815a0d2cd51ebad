"""What the proxy knows of a box for one connection: whose it is, its rules, its secrets."""

from __future__ import annotations

from dataclasses import dataclass

from hutch.egress.inject import Injection
from hutch.egress.rules import NetworkRules


@dataclass(frozen=True)
class Policy:
    """Whose box this is and the rules it has now (read for each connection: edits apply at once)."""

    sandbox_id: str
    rules: NetworkRules
    injections: tuple[Injection, ...] = ()  # the box's secrets, with their hosts
