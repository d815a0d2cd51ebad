"""Secret values at rest: AES-256-GCM under a key kept in the data dir (readable by root only).

Each value is sealed with a fresh nonce and bound to its team and secret id as associated data,
so a sealed value copied onto another row does not open. The key never leaves this process; the
database alone (a backup, a leaked dump) holds nothing readable.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE = 12
VERSION = b"\x01"  # the format of a sealed value, so the key or cipher can change later


class VaultError(RuntimeError):
    """A sealed value did not open: the key is not the one it was sealed with, or it was altered."""


class Vault:
    def __init__(self, key_path: Path) -> None:
        if not key_path.exists():
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(AESGCM.generate_key(bit_length=256))
        key = key_path.read_bytes()
        if len(key) != 32:
            raise VaultError(f"{key_path} is not a 256-bit key")
        self._aead = AESGCM(key)

    def seal(self, value: str, bound_to: str) -> bytes:
        nonce = os.urandom(NONCE)
        return VERSION + nonce + self._aead.encrypt(nonce, value.encode(), bound_to.encode())

    def open(self, sealed: bytes, bound_to: str) -> str:
        if sealed[:1] != VERSION:
            raise VaultError("unknown sealed-value format")
        try:
            return self._aead.decrypt(sealed[1:1 + NONCE], sealed[1 + NONCE:], bound_to.encode()).decode()
        except InvalidTag:
            raise VaultError("the sealed value does not open with this data dir's key") from None
