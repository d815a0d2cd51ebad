"""A box's network rules, and the one function that decides a connection.

    allow_out: CIDRs and domains ("example.com" exactly; "*.example.com" any depth below it, not
               the apex)
    deny_out:  CIDRs

Order of the decision: the always-denied names, ranges and the host's own addresses (no rule can
open them), then any allow rule (allow wins over deny, so deny 0.0.0.0/0 plus an allow list is the
strict pattern), then deny rules, then allowed by default.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Never reachable from a box: "this" network, private, carrier-grade NAT (with Alibaba's metadata
# 100.100.100.200), loopback, link-local (with the metadata address 169.254.169.254 of AWS, GCP,
# Azure, Oracle, DigitalOcean, OpenStack and others, and AWS's 169.254.170.2), the IETF's
# 192.0.0.0/24 (with Oracle's 192.0.0.192), multicast and reserved, their IPv6 kin (with AWS's
# fd00:ec2::254 in fc00::/7), and Azure's wireserver, a public address.
ALWAYS_DENIED: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4", "168.63.129.16/32",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    # IPv6 forms that carry an IPv4 address (and could carry a private one), denied whole:
    # IPv4-compatible, SIIT's IPv4-translated, NAT64 (well-known and local), 6to4, Teredo. (The
    # IPv4-mapped ::ffff:0:0/96 is decided as the IPv4 address it is.)
    "::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32",
))
# Names refused before any lookup, whatever the rules say: the clouds' metadata services (GCP's
# metadata.google.internal and AWS's instance-data.ec2.internal fall under *.internal) and the
# names kept for private use: localhost (RFC 6761), .local (mDNS), home.arpa (RFC 8375), .internal.
ALWAYS_DENIED_NAMES = ("metadata.goog", "instance-data", "metadata.tencentyun.com", "metadata.platformequinix.com",
                       "metadata.packet.net", "api.metadata.cloud.ibm.com", "localhost", "*.localhost", "local",
                       "*.local", "home.arpa", "*.home.arpa", "internal", "*.internal")
EVERYWHERE = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))

MAX_RULES = 256
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def normalize_host(host: str) -> str | None:
    """A DNS name in lower case without its trailing dot, or None if it is not one. Names whose
    last label is a number (127.1, 0x7f.1 is not, 2130706433) are refused: resolvers read them as
    addresses."""
    name = host.lower().removesuffix(".")
    if not name or len(name) > 253:
        return None
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        return None
    if labels[-1].startswith("0x") and all(c in "0123456789abcdefx" for c in labels[-1]):
        return None
    return name


def denied_name(host: str) -> Verdict | None:
    """The refusal of a name no rule can open (a host in normal form), if it is one."""
    pattern = next((p for p in ALWAYS_DENIED_NAMES if domain_matches(p, host)), None)
    return None if pattern is None else Verdict(False, f"always_denied:{pattern}")


def parse_cidr(text: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not a CIDR (like 10.0.0.0/8 or 2001:db8::/32)") from None


def parse_domain(text: str) -> str:
    """A domain pattern ("example.com" or "*.example.com") in normal form."""
    wildcard = text.startswith("*.")
    name = normalize_host(text[2:] if wildcard else text)
    if name is None or "*" in text[2 if wildcard else 0:]:
        raise ValueError(f"{text!r} is not a domain (example.com or *.example.com)")
    return f"*.{name}" if wildcard else name


def domain_matches(pattern: str, host: str) -> bool:
    """"example.com" matches itself only; "*.example.com" any name below it, not the apex."""
    return host.endswith(pattern[1:]) if pattern.startswith("*.") else host == pattern


def parse_allow(text: str) -> IPNetwork | str:
    """An allow_out entry: a network, or a domain pattern in normal form."""
    try:
        return parse_cidr(text)
    except ValueError:
        pass
    try:
        return parse_domain(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither a CIDR nor a domain (example.com or *.example.com)") from None


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    rule: str  # what decided: "default", "allow_out:*.example.com", "deny_out:0.0.0.0/0", ...
    by_domain: bool = False  # a domain rule allowed it: only the name vouches for the destination


@dataclass(frozen=True)
class NetworkRules:
    allow_domains: tuple[str, ...] = ()
    allow_nets: tuple[IPNetwork, ...] = ()
    deny_nets: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, allow_out: Iterable[str] = (), deny_out: Iterable[str] = ()) -> NetworkRules:
        """Raises ValueError naming the first bad entry."""
        allows = [parse_allow(a) for a in allow_out]
        denies = [parse_cidr(d) for d in deny_out]
        if EVERYWHERE[0] in denies and EVERYWHERE[1] not in denies:
            denies.append(EVERYWHERE[1])  # "deny 0.0.0.0/0" means deny everything, IPv6 too
        return cls(tuple(a for a in allows if isinstance(a, str)),
                   tuple(a for a in allows if not isinstance(a, str)), tuple(denies))

    def refuses_unresolved(self, host: str) -> Verdict | None:
        """A refusal that needs no lookup: deny-all, and nothing that could allow this name.
        (Resolving it would itself send the name out: a DNS query is a channel.)"""
        if (denied := denied_name(host)) is not None:
            return denied
        if self.domain_rule(host) is None and not self.allow_nets and all(n in self.deny_nets for n in EVERYWHERE):
            return Verdict(False, "deny_out:0.0.0.0/0")
        return None

    def domain_rule(self, host: str) -> str | None:
        """The allow rule that names this host, if any."""
        return next((pattern for pattern in self.allow_domains if domain_matches(pattern, host)), None)

    def decide(self, host: str | None, ip: IPAddress, host_addresses: frozenset[IPAddress]) -> Verdict:
        """Whether a connection to `ip` (reached by the name `host`, or by the address alone when
        `host` is None) may go."""
        if host is not None and (denied := denied_name(host)) is not None:
            return denied
        if isinstance(ip, ipaddress.IPv6Address):
            ip = ipaddress.IPv6Address(int(ip))  # without a %zone, which would slip past set lookups
            if ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
        for net in ALWAYS_DENIED:
            if ip.version == net.version and ip in net:
                return Verdict(False, f"always_denied:{net}")
        if ip in host_addresses:
            return Verdict(False, "always_denied:host_address")
        if host is not None and (pattern := self.domain_rule(host)):
            return Verdict(True, f"allow_out:{pattern}", by_domain=True)
        for net in self.allow_nets:
            if ip.version == net.version and ip in net:
                return Verdict(True, f"allow_out:{net}")
        for net in self.deny_nets:
            if ip.version == net.version and ip in net:
                return Verdict(False, f"deny_out:{net}")
        return Verdict(True, "default")
