"""Screenshots compared pixel by pixel, with the standard library alone: a PNG decoder for what scrot
and hutch's screenshot write (8-bit RGB or RGBA, not interlaced)."""

from __future__ import annotations

import struct
import zlib

MAGIC = b"\x89PNG\r\n\x1a\n"


def decode(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes)."""
    assert data[:8] == MAGIC, "not a PNG"
    pos, idat, head = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            head = chunk
        elif kind == b"IDAT":
            idat.append(chunk)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", head)
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth}, color {color}"
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        _unfilter(kind, line, prev, bpp)
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
        prev = line
    return width, height, rows


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    if kind == 0:
        return
    if kind == 2:
        for i in range(len(line)):
            line[i] = (line[i] + prev[i]) & 0xFF
        return
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + a) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + ((a + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            raise AssertionError(f"unknown PNG filter {kind}")


def differing(one: bytes, other: bytes) -> int:
    """How many pixels differ between two screenshots of one size."""
    w1, h1, rows1 = decode(one)
    w2, h2, rows2 = decode(other)
    assert (w1, h1) == (w2, h2), f"sizes differ: {w1}x{h1} and {w2}x{h2}"
    count = 0
    for r1, r2 in zip(rows1, rows2, strict=True):
        if r1 != r2:
            count += sum(r1[i:i + 3] != r2[i:i + 3] for i in range(0, len(r1), 3))
    return count
