"""Fixtures for the unit tests, which run with no server, no root and no runsc: nothing here boots
anything (the session server is tests/integration's alone)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_client_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK reads its key and server from HUTCH_* variables: a shell's own must not reach a test."""
    for name in [n for n in os.environ if n.startswith(("HUTCH_", "E2B_"))]:
        monkeypatch.delenv(name)
