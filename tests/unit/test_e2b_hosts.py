"""E2B's host form without a server: which host names what, the tokens that name their box, and the
certificate hutch issues for the domain."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from hutch.e2b.hosts import API_PREFIX, ENVD_PREFIX, Target, target_of
from hutch.server.site_tls import site_tls
from hutch.services.tokens import TokenSigner, sandbox_named

BOX = "8d0d2f24-6ee5-4d45-b0a2-a1548fe3e283"


@pytest.mark.parametrize(("host", "target"), [
    ("api.hutch.localhost:7443", Target(API_PREFIX)),
    ("API.Hutch.Localhost", Target(API_PREFIX)),
    (f"49983-{BOX}.hutch.localhost:7443", Target(ENVD_PREFIX, BOX)),
    (f"49999-{BOX}.hutch.localhost", Target(ENVD_PREFIX, BOX, "49999")),
    (f"8000-{BOX}.hutch.localhost.", Target(ENVD_PREFIX, BOX, "8000")),
    ("hutch.localhost", None),
    ("api.other.localhost", None),
    (f"49983-{BOX}.evil.hutch.localhost", None),  # one label only: nothing deeper
    (f"x-{BOX}.hutch.localhost", None),
    (f"0-{BOX}.hutch.localhost", None),
    (f"65536-{BOX}.hutch.localhost", None),
    (f"123456-{BOX}.hutch.localhost", None),
    ("49983-.hutch.localhost", None),
    ("", None),
    (None, None),
])
def test_a_host_name_names_the_control_plane_a_box_and_its_port_or_nothing(host: str | None, target: Target | None) -> None:
    assert target_of(host, "hutch.localhost") == target


def test_a_token_names_its_box_and_is_good_only_for_it() -> None:
    signer = TokenSigner(b"k" * 32)
    token = signer.token(BOX, 3)
    assert sandbox_named(token) == BOX
    assert signer.verify(token, BOX, 3)
    assert not signer.verify(token, BOX, 4)  # a rotated token is revoked
    assert not signer.verify(token.replace(BOX, "00000000-0000-4000-8000-000000000000"),
                             "00000000-0000-4000-8000-000000000000", 3)
    for other in (None, "", "hat_", "hat_nodot", "bearer x.y", "hat_" + "a" * 65 + ".mac", "hat_é.mac"):
        assert sandbox_named(other) is None


def test_hutch_issues_a_certificate_for_the_domain_from_a_ca_constrained_to_it(tmp_path: Path) -> None:
    tls = site_tls(tmp_path / "tls", "hutch.localhost")
    assert tls.ca_file is not None and tls.bundle is not None
    ca = x509.load_pem_x509_certificate(tls.ca_file.read_bytes())
    permitted = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert permitted.critical and permitted.value.permitted_subtrees == [x509.DNSName("hutch.localhost")]
    assert permitted.value.excluded_subtrees == [x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
                                                 x509.IPAddress(ipaddress.ip_network("::/0"))]  # no address either
    leaf = x509.load_pem_x509_certificate(tls.certfile.read_bytes())
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert sorted(names) == ["*.hutch.localhost", "hutch.localhost"]
    assert leaf.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=300)
    assert (tls.keyfile.stat().st_mode & 0o777) == 0o600
    assert tls.bundle.read_bytes().endswith(tls.ca_file.read_bytes())
    ssl.create_default_context(cafile=str(tls.bundle))  # one file a client loads
    # the same again: nothing issued anew
    again = site_tls(tmp_path / "tls", "hutch.localhost")
    assert again.certfile.read_bytes() == tls.certfile.read_bytes()


def test_a_new_domain_gets_a_new_ca_and_an_operators_certificate_is_used_as_given(tmp_path: Path) -> None:
    first = site_tls(tmp_path / "tls", "hutch.localhost")
    assert first.ca_file is not None
    before = first.ca_file.read_bytes()
    moved = site_tls(tmp_path / "tls", "sandboxes.example.test")
    assert moved.ca_file is not None and moved.ca_file.read_bytes() != before
    leaf = x509.load_pem_x509_certificate(moved.certfile.read_bytes())
    assert "*.sandboxes.example.test" in leaf.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    given = site_tls(tmp_path / "unused", "sandboxes.example.test", Path("/w.pem"), Path("/w.key"))
    assert (given.certfile, given.keyfile, given.ca_file, given.bundle) == (Path("/w.pem"), Path("/w.key"), None, None)
    assert not (tmp_path / "unused").exists()


def test_a_key_that_does_not_match_its_certificate_is_issued_again(tmp_path: Path) -> None:
    first = site_tls(tmp_path / "tls", "hutch.localhost")
    other = site_tls(tmp_path / "other", "hutch.localhost")
    first.keyfile.write_bytes(other.keyfile.read_bytes())  # a crash between two writes, say
    again = site_tls(tmp_path / "tls", "hutch.localhost")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(again.certfile), str(again.keyfile))  # raises on a mismatched pair


def test_the_interpreter_port_is_one_number_in_the_box_and_on_the_host() -> None:
    from hutch.guest import interpreter, protocol

    assert protocol.INTERPRETER_PORT == interpreter.PORT
