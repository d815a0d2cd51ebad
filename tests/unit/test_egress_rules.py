"""The egress decision and the TLS name reader, on their own (the end-to-end tests are in
tests/integration/test_egress.py)."""

from __future__ import annotations

import ipaddress
import random
import ssl

import pytest

from hutch.egress import tls
from hutch.egress.rules import NetworkRules, normalize_host, parse_allow

NONE: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()


def decide(rules: NetworkRules, host: str | None, ip: str) -> tuple[bool, str]:
    verdict = rules.decide(host, ipaddress.ip_address(ip), NONE)
    return verdict.allowed, verdict.rule


def test_wildcards_match_below_the_apex_at_any_depth() -> None:
    rules = NetworkRules.parse(["*.example.com"], ["0.0.0.0/0"])
    assert decide(rules, "a.example.com", "93.184.216.34") == (True, "allow_out:*.example.com")
    assert decide(rules, "a.b.c.example.com", "93.184.216.34")[0]
    assert decide(rules, "example.com", "93.184.216.34") == (False, "deny_out:0.0.0.0/0")
    assert not decide(rules, "badexample.com", "93.184.216.34")[0]
    assert not decide(rules, "example.com.evil.net", "93.184.216.34")[0]


def test_allow_wins_over_deny_and_the_default_is_allow() -> None:
    rules = NetworkRules.parse(["8.8.8.0/24"], ["8.0.0.0/8"])
    assert decide(rules, None, "8.8.8.8") == (True, "allow_out:8.8.8.0/24")
    assert decide(rules, None, "8.9.9.9") == (False, "deny_out:8.0.0.0/8")
    assert decide(rules, None, "1.1.1.1") == (True, "default")


@pytest.mark.parametrize("ip", ["10.1.1.1", "127.0.0.1", "169.254.169.254", "172.31.0.1", "192.168.0.1", "::1",
                                "fe80::1", "fd00::1", "::ffff:10.0.0.1", "0.0.0.0", "100.100.100.200",
                                "64:ff9b::a00:1", "2002:a00:1::1", "::10.0.0.1", "fe80::1%eth0"])
def test_always_denied_whatever_is_allowed(ip: str) -> None:
    rules = NetworkRules.parse(["0.0.0.0/0", "::/0", "internal.example.com"])
    allowed, rule = decide(rules, "internal.example.com", ip)
    assert not allowed and rule.startswith("always_denied:")


# IPv6 forms that carry an IPv4 address, each with a private, loopback or metadata one inside
IPV4_CARRYING = ["::ffff:0:7f00:1", "::ffff:0:a00:1", "::ffff:0:a9fe:a9fe",  # SIIT IPv4-translated
                 "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:168.63.129.16",  # IPv4-mapped
                 "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a00:1",  # NAT64, well-known and local
                 "2002:7f00:1::1", "2002:c0a8:101::1", "2002:a9fe:a9fe::1",  # 6to4
                 "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo (client 127.0.0.1, obfuscated)
                 "::127.0.0.1", "::a9fe:a9fe"]  # IPv4-compatible
# Every cloud's instance metadata: AWS (and its IPv6 address), GCP, Azure, Oracle, DigitalOcean,
# OpenStack, Hetzner (169.254.169.254), Azure's wireserver, Alibaba, Oracle's older one, Tencent
METADATA = ["169.254.169.254", "fd00:ec2::254", "168.63.129.16", "100.100.100.200", "192.0.0.192", "169.254.0.23",
            "169.254.170.2"]


@pytest.mark.parametrize("ip", IPV4_CARRYING + METADATA)
def test_ipv4_carrying_forms_and_metadata_addresses_are_always_denied(ip: str) -> None:
    rules = NetworkRules.parse(["0.0.0.0/0", "::/0", f"{ip}/128" if ":" in ip else f"{ip}/32"])
    allowed, rule = decide(rules, None, ip)
    assert not allowed and rule.startswith("always_denied:"), (ip, rule)


@pytest.mark.parametrize("name", ["metadata.google.internal", "METADATA.Google.Internal.", "metadata.goog",
                                  "instance-data.ec2.internal", "instance-data", "metadata.tencentyun.com",
                                  "metadata.platformequinix.com", "metadata.packet.net",
                                  "api.metadata.cloud.ibm.com", "x.internal", "localhost", "a.localhost",
                                  "printer.local", "router.home.arpa"])
def test_metadata_and_private_use_names_are_refused_without_a_lookup(name: str) -> None:
    host = normalize_host(name)
    assert host is not None
    rules = NetworkRules.parse(["0.0.0.0/0", "::/0", host, f"*.{host}"])
    verdict = rules.refuses_unresolved(host)
    assert verdict is not None and not verdict.allowed and verdict.rule.startswith("always_denied:"), name
    assert not rules.decide(host, ipaddress.ip_address("93.184.216.34"), NONE).allowed, "whatever it resolves to"


def test_names_that_only_look_like_metadata_go_on() -> None:
    rules = NetworkRules()
    for name in ("metadata.example.com", "internal.example.com", "localhost.example.com", "google.internal.example"):
        assert rules.refuses_unresolved(name) is None, name
        assert rules.decide(name, ipaddress.ip_address("93.184.216.34"), NONE).allowed, name


def test_deny_all_is_both_families_and_needs_no_lookup() -> None:
    rules = NetworkRules.parse(["*.example.com"], ["0.0.0.0/0"])
    assert decide(rules, None, "2606:4700::1") == (False, "deny_out:::/0")
    assert rules.refuses_unresolved("leak.attacker.net") is not None, "a denied name is never resolved"
    assert rules.refuses_unresolved("a.example.com") is None
    assert NetworkRules.parse([], ["10.0.0.0/8"]).refuses_unresolved("x.net") is None


def test_a_zone_does_not_hide_a_host_address() -> None:
    own = frozenset({ipaddress.ip_address("2001:db8::5")})
    verdict = NetworkRules().decide(None, ipaddress.ip_address("2001:db8::5%1"), own)
    assert (verdict.allowed, verdict.rule) == (False, "always_denied:host_address")


def test_the_hosts_own_addresses_are_denied() -> None:
    own = frozenset({ipaddress.ip_address("198.51.100.7")})
    verdict = NetworkRules.parse(["0.0.0.0/0"]).decide(None, ipaddress.ip_address("198.51.100.7"), own)
    assert (verdict.allowed, verdict.rule) == (False, "always_denied:host_address")


def test_rule_syntax() -> None:
    assert parse_allow("Example.COM.") == "example.com"
    assert parse_allow("*.Example.com") == "*.example.com"
    assert str(parse_allow("10.0.0.1/8")) == "10.0.0.0/8"
    for bad in ("", "*", "*.", "a..b", "-a.com", "a b.com", "*.*.a.com", "a.*.com", "x" * 300, "10.0.0.0/33"):
        with pytest.raises(ValueError):
            parse_allow(bad)
    with pytest.raises(ValueError):
        NetworkRules.parse([], ["example.com"])
    assert normalize_host("xn--bcher-kva.example") == "xn--bcher-kva.example"
    for bad in ("bücher.example", "127.1", "2130706433", "0x7f.0x1", "a.b\n", "a\n.b", "evil.com\x00.good.com"):
        assert normalize_host(bad) is None, bad


def _client_hello(name: str) -> bytes:
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        conn.do_handshake()
    return outgoing.read()


def test_the_server_name_is_read_from_a_real_client_hello() -> None:
    record = _client_hello("api.example.test")
    assert record[0] == tls.HANDSHAKE and int.from_bytes(record[3:5], "big") == len(record) - 5
    assert tls.server_name(record[5:]) == "api.example.test"


def test_hostile_bytes_never_raise() -> None:
    hello = _client_hello("api.example.test")[5:]
    rng = random.Random(7)
    for _ in range(3000):
        data = bytearray(hello[:rng.randrange(len(hello) + 1)])
        for _ in range(rng.randrange(4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        name = tls.server_name(bytes(data))
        assert name is None or isinstance(name, str)
