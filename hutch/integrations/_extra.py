"""A framework that is not installed names the extra that installs it."""

from __future__ import annotations


def missing(extra: str, e: ImportError) -> ImportError:
    return ImportError(f"{e.name or 'a package'} is not installed: pip install 'hutch[{extra}]'")
