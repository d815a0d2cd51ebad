"""Webhooks' pure parts: where they may go (the operator's allow list, refused addresses), and the
signatures a receiver checks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import json
import time

import pytest

from hutch import verify_webhook
from hutch.sdk.errors import ValidationError
from hutch.services.deliveries import Destinations, RefusedDestination, e2b_signature, hutch_signature


def _resolve(d: Destinations, url: str) -> str:
    return str(asyncio.run(d.resolve(url))[3])


def test_the_allow_list_takes_names_addresses_and_networks_and_refuses_anything_else() -> None:
    d = Destinations.parse(["127.0.0.1", "10.0.0.0/8", "Hooks.LAN."])
    assert d.names == {"hooks.lan"} and [str(n) for n in d.networks] == ["127.0.0.1/32", "10.0.0.0/8"]
    for bad in ("", "not a host", "http://x", "*.lan"):
        with pytest.raises(ValueError):
            Destinations.parse([bad])


@pytest.mark.parametrize("url", ["http://127.0.0.1/", "http://10.1.2.3:8080/x", "http://[::ffff:10.0.0.1]/",
                                 "http://169.254.169.254/", "http://0.0.0.0/", "http://[::]/", "http://100.100.100.200/",
                                 "http://224.0.0.1/", "http://2130706433/", "http://0x7f.1/", "http://localhost/",
                                 "http://a.internal/", "https://x.local/", "http://[fe80::1]/", "http://[64:ff9b::a00:1]/"])
def test_private_destinations_are_refused(url: str) -> None:
    with pytest.raises(RefusedDestination):
        _resolve(Destinations(), url)


def test_what_the_operator_names_is_let_through_and_nothing_beside_it() -> None:
    d = Destinations.parse(["127.0.0.1", "10.0.0.0/8"])
    assert _resolve(d, "http://127.0.0.1:9/") == "127.0.0.1"
    assert _resolve(d, "https://10.9.8.7/") == "10.9.8.7"
    for url in ("http://127.0.0.2/", "http://192.168.0.1/", "http://[::1]/"):
        with pytest.raises(RefusedDestination):
            _resolve(d, url)
    assert _resolve(Destinations(), "https://93.184.215.14/") == "93.184.215.14"


@pytest.mark.parametrize("url", ["ftp://h/", "http:///x", "https://u:p@93.184.215.14/", "http://93.184.215.14/ x",
                                 "http://93.184.215.14:99999/", "javascript:alert(1)", "http://exämple.com/"])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(RefusedDestination):
        Destinations().parsed(url)


def test_a_hutch_signature_verifies_and_nothing_altered_does() -> None:
    body = json.dumps({"id": 7, "type": "sandbox.killed"}).encode()
    now = int(time.time())
    header = hutch_signature("whsec_s3cret", now, body)
    assert verify_webhook(body, header, "whsec_s3cret") == {"id": 7, "type": "sandbox.killed"}
    for b, h, secret in ((body + b"x", header, "whsec_s3cret"), (body, header, "whsec_other"),
                         (body, header.replace(f"t={now}", f"t={now + 1}"), "whsec_s3cret"), (body, "v1=00", "whsec_s3cret"),
                         (body, hutch_signature("whsec_s3cret", now - 600, body), "whsec_s3cret")):
        with pytest.raises(ValidationError) as refused:
            verify_webhook(b, h, secret)
        assert refused.value.code == "bad_webhook_signature"


def test_e2bs_signature_is_the_unpadded_base64_sha256_of_secret_and_body() -> None:
    body = b'{"type":"sandbox.lifecycle.created"}'
    expected = base64.b64encode(hashlib.sha256(b"sekret" + body).digest()).decode().rstrip("=")
    assert e2b_signature("sekret", body) == expected and "=" not in e2b_signature("sekret", body)


def test_a_delivery_connects_to_the_checked_address_and_names_the_host() -> None:
    import httpx

    from hutch.services.deliveries import _pinned

    client = httpx.AsyncClient()
    six = _pinned(client, "http://[2606:4700::1]/hook", "http", "2606:4700::1", 80,
                  ipaddress.ip_address("2606:4700::1"), {}, b"{}")
    assert six.headers["Host"] == "[2606:4700::1]" and six.url.host == "2606:4700::1"
    named = _pinned(client, "https://hooks.example.com:8443/x?y=1", "https", "hooks.example.com", 8443,
                    ipaddress.ip_address("93.184.215.14"), {}, b"{}")
    assert str(named.url) == "https://93.184.215.14:8443/x?y=1" and named.headers["Host"] == "hooks.example.com:8443"
    assert named.extensions["sni_hostname"] == "hooks.example.com"


def test_an_endpoint_is_sent_only_what_its_flavor_can_send() -> None:
    from hutch.services.deliveries import Flavor, _types_for

    every = Flavor(None, lambda e: b"", lambda *a: {})
    lifecycle = Flavor(frozenset({"sandbox.created", "sandbox.killed"}), lambda e: b"", lambda *a: {})
    assert _types_for([], every) == [] and _types_for(["sandbox.paused"], every) == ["sandbox.paused"]
    assert _types_for([], lifecycle) == ["sandbox.created", "sandbox.killed"]
    assert _types_for(["sandbox.killed", "template.build.ready"], lifecycle) == ["sandbox.killed"]
    assert _types_for(["template.build.ready"], lifecycle) is None, "nothing it can send: not every type"


def test_a_signature_with_strange_bytes_is_refused_not_an_error() -> None:
    with pytest.raises(ValidationError):
        verify_webhook(b"{}", f"t={int(time.time())},v1=caf\u00e9", "whsec_x")
