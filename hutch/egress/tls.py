"""The server name (SNI) a TLS ClientHello asks for: what an HTTPS connection really goes to.

Read from the first bytes the box sends after CONNECT, before anything is relayed (the proxy puts
the handshake message together from its records). The bytes are hostile: every length is checked
against what is there, and anything odd is "no name".
"""

from __future__ import annotations

RECORD_HEADER = 5
HANDSHAKE = 0x16  # the content type of a handshake record


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("truncated")
        part = self.data[self.at:self.at + n]
        self.at += n
        return part

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, len_size: int) -> _Reader:
        return _Reader(self.take(self.uint(len_size)))


def server_name(handshake: bytes) -> str | None:
    """The host_name of a ClientHello's server_name extension (the handshake message, records
    already taken off), or None."""
    try:
        body = _Reader(handshake)
        if body.uint(1) != 0x01:  # client_hello
            return None
        hello = _Reader(body.take(body.uint(3)))
        hello.take(2 + 32)  # version, random
        hello.vector(1)  # session id
        hello.vector(2)  # cipher suites
        hello.vector(1)  # compression methods
        extensions = hello.vector(2)
        while extensions.at < len(extensions.data):
            kind = extensions.uint(2)
            ext = extensions.vector(2)
            if kind != 0:
                continue
            names = ext.vector(2)
            while names.at < len(names.data):
                name_type = names.uint(1)
                name = names.vector(2).data
                if name_type == 0:
                    return name.decode("ascii")
        return None
    except (ValueError, UnicodeDecodeError):
        return None
