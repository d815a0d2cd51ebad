"""The keys every member of a fleet must share, kept in its store: the access-token signer's (any
API server checks any token), the secrets vault's (any API server seals, any node swaps secrets
in), the egress CA's (a box resumed on another node still trusts its proxy), and the fleet's own
key, which a node asks of whoever calls it. The first member to start makes each one; the
others take it. Each is written into the member's data dir where the single-host code reads it.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hutch.egress.ca import CertificateAuthority
from hutch.store import Store


def _new_ca() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        CertificateAuthority(Path(tmp))
        return json.dumps({"key": (Path(tmp) / "ca.key").read_text(), "cert": (Path(tmp) / "ca.crt").read_text()}).encode()


def _write(path: Path, data: bytes) -> None:
    """Atomically, readable by root only; unchanged if it already holds `data`. A data dir that
    holds another key (a single host's, say, whose secrets it sealed) is refused, not overwritten."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        if path.read_bytes() == data:
            return
        raise RuntimeError(f"{path} holds a key other than the fleet's: give this fleet member a data dir of its own "
                           "(what that key sealed or signed is not the fleet's)")
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def materialize(store: Store, data_dir: Path) -> None:
    _write(data_dir / "server.key", store.key("server.key", lambda: secrets.token_bytes(32)))
    _write(data_dir / "secrets.key", store.key("secrets.key", lambda: AESGCM.generate_key(bit_length=256)))
    ca = json.loads(store.key("egress-ca", _new_ca))
    _write(data_dir / "ca" / "ca.key", ca["key"].encode())
    _write(data_dir / "ca" / "ca.crt", ca["cert"].encode())


def fleet_key(store: Store) -> str:
    """What a node's relay asks of its callers."""
    return store.key("fleet.key", lambda: secrets.token_hex(32).encode()).decode()
