"""The server name (SNI) a TLS ClientHello asks for: what an HTTPS connection really goes to.

Read from the first bytes the box sends after CONNECT, before anything is relayed. The bytes are
hostile: every length is checked against what is there, and anything odd is "no name".
"""

from __future__ import annotations

RECORD_HEADER = 5
MAX_HELLO = 16 * 1024 + RECORD_HEADER  # one TLS record at most


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


def is_tls(first: bytes) -> bool:
    return len(first) >= 3 and first[0] == 0x16 and first[1] == 0x03


def record_length(header: bytes) -> int:
    """How many bytes the first record takes, from its 5-byte header."""
    return RECORD_HEADER + int.from_bytes(header[3:5], "big")


def server_name(record: bytes) -> str | None:
    """The host_name of the ClientHello's server_name extension, or None."""
    try:
        r = _Reader(record)
        if r.uint(1) != 0x16:  # handshake
            return None
        r.take(2)
        body = r.vector(2)
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
