"""What the preview proxy reads in a request's head and changes in both heads.

Towards the box: hutch's credentials (its cookies, whatever their port, and its token header)
are taken off, and the forwarding headers are the proxy's own, never the client's (a box's
server that trusts X-Forwarded-Host or X-Forwarded-For would otherwise believe whatever the
client wrote). Towards the browser: the box cannot set a cookie with one of hutch's names, and a
private port's answers may be framed by their own origin only.

What browsers say about a request (Sec-Fetch-*) cannot be forged by a page, only left out by an
old browser or a non-browser client, which the answer's frame headers then cover.
"""

from __future__ import annotations

from collections.abc import Sequence

from hutch.http_relay import Headers
from hutch.preview import access

# client headers that say where a request came from or went to: dropped, then set by the proxy
_FORWARDING = (b"forwarded", b"x-real-ip")
_FORWARDING_PREFIX = b"x-forwarded-"
_FRAMES = (b"iframe", b"frame", b"embed", b"object", b"fencedframe")
_OWN_ORIGIN = (b"same-origin", b"none")  # "none": the user's own doing (the address bar, a bookmark)
FRAME_ANCESTORS = b"frame-ancestors 'self'"

Fields = Sequence[tuple[bytes, bytes]]  # a request's headers as h11 has them (names in lower case)


def _fetch(headers: Fields, name: bytes) -> list[bytes]:
    return [v.strip().lower() for k, v in headers if k == name]


def framed_from_elsewhere(headers: Fields) -> bool:
    """A request to be shown in a frame, an embed or an object of a page of another origin."""
    sites = _fetch(headers, b"sec-fetch-site")
    framed = any(d in _FRAMES for d in _fetch(headers, b"sec-fetch-dest")) or \
        b"nested-navigate" in _fetch(headers, b"sec-fetch-mode")  # Chrome 76-80 said so, without Dest
    return framed and any(s not in _OWN_ORIGIN for s in sites)


def from_another_site(headers: Fields, method: bytes) -> bool:
    """A request another site's page made, other than a link followed to a page: the cookie
    must not let one box's page drive another's port."""
    sites = _fetch(headers, b"sec-fetch-site")
    navigation = _fetch(headers, b"sec-fetch-mode") == [b"navigate"] and method in (b"GET", b"HEAD")
    return any(s in (b"same-site", b"cross-site") for s in sites) and not navigation


def _name(raw: bytes) -> bytes:
    """A header's name as servers that fold `_` into `-` read it (CGI, WSGI and PHP among them)."""
    return raw.lower().replace(b"_", b"-")


def cookie_pairs(headers: Fields) -> list[str]:
    """Every `name=value` of the request's Cookie headers."""
    return [c.strip() for k, v in headers if k == b"cookie" for c in v.decode("latin-1").split(";") if c.strip()]


def _forwarded_value(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_box(headers: Fields, client: str, host: str, https: bool) -> Headers:
    """The request's headers as the box gets them: no credential of hutch's, no forwarding
    header of the client's, the proxy's own after the rest."""
    token = access.TOKEN_HEADER.encode()
    kept = [(k, v) for k, v in headers
            if k != b"cookie" and _name(k) != token and _name(k) not in _FORWARDING
            and not _name(k).startswith(_FORWARDING_PREFIX)]
    cookies = [c for c in cookie_pairs(headers) if not access.is_ours(c.partition("=")[0])]
    if cookies:
        kept.append((b"cookie", "; ".join(cookies).encode("latin-1")))
    proto = "https" if https else "http"
    ip = client[1:-1] if client.startswith("[") else client
    node = f"[{ip}]" if ":" in ip else ip  # RFC 7239: an IPv6 node in brackets, quoted
    kept += [(b"x-forwarded-for", ip.encode()), (b"x-forwarded-host", host.encode("latin-1")),
             (b"x-forwarded-proto", proto.encode()), (b"x-real-ip", ip.encode()),
             (b"forwarded", f"for={_forwarded_value(node)};host={_forwarded_value(host)};proto={proto}"
                            .encode("latin-1"))]
    return kept


def _set_cookie_name(value: bytes) -> str:
    """The name a Set-Cookie value would give its cookie as the browser sends it back: a nameless
    cookie (`=name=value`, or no `=` at all) comes back as its value alone."""
    pair = value.split(b";", 1)[0].strip().lstrip(b"=")
    return pair.partition(b"=")[0].decode("latin-1")


def from_box(headers: Headers, private: bool) -> Headers:
    """The box's answer headers as the browser gets them: no cookie of hutch's names set, and on
    a private port, no framing but by its own origin. The box's own Content-Security-Policy
    stays (every policy sent is enforced, so ours can only narrow it), and its X-Frame-Options
    stays if it is DENY."""
    kept = [(k, v) for k, v in headers if not (k == b"set-cookie" and access.is_ours(_set_cookie_name(v)))]
    if not private:
        return kept
    options = [t.strip().lower() for k, v in kept if k == b"x-frame-options" for t in v.split(b",")]
    kept = [(k, v) for k, v in kept if k != b"x-frame-options"]
    kept += [(b"x-frame-options", b"DENY" if b"deny" in options else b"SAMEORIGIN"),
             (b"content-security-policy", FRAME_ANCESTORS)]
    return kept
