"""A stand-in for the internet, on this machine: test hosts in a network namespace behind a veth
pair, for the egress tests and the egress benchmark. Nothing leaves this machine.

    198.51.100.2, 198.51.100.3  HTTP on 80, HTTPS on 443 (egress_server.py)
    198.51.100.1                the host's end of the pair: one of the host's own addresses

198.51.100.0/24 is a documentation range (RFC 5737). Not 203.0.113.0/24: on these machines the
package registries resolve into it, and a route of ours there would take their traffic.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What the egress proxy of every test server resolves names with (`--egress-hosts`, with the
# system resolver off): no name a box asks for ever reaches a real resolver.
EGRESS_HOSTS = """
198.51.100.2 example.test api.example.test deep.sub.example.test other.test api.anthropic.com api.openai.com
198.51.100.3 denied.test
10.1.2.3 private.example.test
127.0.0.1 loopback.example.test
169.254.169.254 metadata.example.test
"""


@functools.cache
def certificate() -> tuple[Path, Path]:
    """The test hosts' self-signed certificate and key, made once per test run. Test servers
    trust it (`--trust-ca`), as a real server trusts the public roots."""
    work = Path(tempfile.mkdtemp(prefix="hutch-cert-"))
    cert, key = work / "cert.pem", work / "key.pem"
    names = "DNS:example.test,DNS:*.example.test,DNS:other.test,DNS:api.anthropic.com,DNS:api.openai.com"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=example.test", "-addext", f"subjectAltName={names}"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@dataclass
class Internet:
    namespace: str
    seen_log: Path  # every request the test hosts got, with its headers (egress_server.py)
    files: Path  # served at http://example.test/files/NAME
    host_address: str = "198.51.100.1"
    server_address: str = "198.51.100.2"
    other_address: str = "198.51.100.3"

    def seen(self) -> list[dict[str, Any]]:
        """What the test hosts received, oldest first: only the host side reads this, never a box."""
        if not self.seen_log.exists():
            return []
        return [json.loads(line) for line in self.seen_log.read_text().splitlines() if line]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextmanager
def stand_in_internet(work: Path) -> Iterator[Internet]:
    tag = f"{os.getpid() % 100000}"
    ns, veth = f"hutch-net-{tag}", f"hvt{tag}"
    net = Internet(ns, work / "seen.jsonl", work / "files")
    net.files.mkdir(exist_ok=True)
    cert, key = certificate()
    server: subprocess.Popen[str] | None = None
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("addr", "add", f"{net.host_address}/24", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", f"{net.server_address}/24", "dev", "eth0")
        _ip("-n", ns, "addr", "add", f"{net.other_address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        for address in (net.server_address, net.other_address):  # never a test request out of this machine
            route = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True, check=True).stdout
            assert f"dev {veth} " in route, f"{address} would not go to the test namespace: {route}"
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(Path(__file__).parent / "egress_server.py"),
                                   str(cert), str(key), str(net.seen_log), str(net.files)],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield net
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
