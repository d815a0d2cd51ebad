"""The certificate of E2B's host-form listener (`api.<domain>`, `<port>-<id>.<domain>`: hutch.e2b.hosts).

An operator gives one (a wildcard for a real domain, `--e2b-cert` and `--e2b-key`); without one,
hutch issues its own from a CA of the install's, made for this and for nothing else: it is
name-constrained to the domain, so a client that trusts it (the system store, `SSL_CERT_FILE`,
Node's `NODE_EXTRA_CA_CERTS`) trusts no certificate it could sign for any other name. It is not the
egress CA, which the boxes trust and which signs the names they reach.

Beside the CA is `bundle.crt`: the host's public roots and this CA, what `SSL_CERT_FILE` names in
client.env (Python's clients take one file, and still reach the rest of the internet with it).
"""

from __future__ import annotations

import datetime
import fcntl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hutch.egress.ca import NO_ADDRESSES, issue_leaf, new_ca, write_pair

LEAF_DAYS = 365
RENEW_BEFORE_DAYS = 30  # a certificate with less left is issued again at start
PUBLIC_ROOTS = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class SiteTLS:
    certfile: Path
    keyfile: Path
    ca_file: Path | None  # hutch's own CA, when hutch issued the certificate
    bundle: Path | None  # the public roots and that CA


def site_tls(directory: Path, domain: str, certfile: Path | None = None, keyfile: Path | None = None) -> SiteTLS:
    """The listener's certificate: the operator's, or one issued (again, when the domain changed,
    a file is missing or does not match its key, or it nears its end) from the install's CA for
    `domain`. A fleet's API servers share the directory: one at a time, under a lock."""
    if certfile is not None and keyfile is not None:
        return SiteTLS(certfile, keyfile, None, None)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _issued(directory, domain)


def _issued(directory: Path, domain: str) -> SiteTLS:
    ca_key_path, ca_path = directory / "ca.key", directory / "ca.crt"
    ca, ca_key = _load(ca_path), _load_key(ca_key_path)
    if ca is None or ca_key is None or _constrained_to(ca) != domain or not _same_key(ca, ca_key):
        ca_key, ca = new_ca(f"hutch local CA for {domain}", permitted_domain=domain)
        write_pair(ca_key, ca, ca_key_path, ca_path)
    leaf_path, leaf_key_path = directory / "site.crt", directory / "site.key"
    leaf, leaf_key = _load(leaf_path), _load_key(leaf_key_path)
    if leaf is None or leaf_key is None or not _same_key(leaf, leaf_key) or not _fits(leaf, ca, domain):
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        write_pair(leaf_key, issue_leaf(ca_key, ca, leaf_key, [domain, f"*.{domain}"], LEAF_DAYS),
                   leaf_key_path, leaf_path)
    bundle = directory / "bundle.crt"
    roots = PUBLIC_ROOTS.read_bytes() if PUBLIC_ROOTS.is_file() else b""
    tmp = directory / ".bundle.tmp"
    tmp.write_bytes((roots if roots.endswith(b"\n") or not roots else roots + b"\n") + ca_path.read_bytes())
    tmp.chmod(0o644)
    tmp.replace(bundle)
    return SiteTLS(leaf_path, leaf_key_path, ca_path, bundle)


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey | None:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    return cert.public_key() == key.public_key()


def _load(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None


def _constrained_to(ca: x509.Certificate) -> str | None:
    try:
        permitted = ca.extensions.get_extension_for_class(x509.NameConstraints).value.permitted_subtrees or []
    except x509.ExtensionNotFound:
        return None
    names = [n.value for n in permitted if isinstance(n, x509.DNSName)]
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints).value
    if list(constraints.excluded_subtrees or []) != list(NO_ADDRESSES):  # one made before addresses were excluded
        return None
    return names[0] if len(names) == 1 else None


def _fits(leaf: x509.Certificate, ca: x509.Certificate, domain: str) -> bool:
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName)
    except x509.ExtensionNotFound:
        return False
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    left = leaf.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return sorted(names) == sorted([domain, f"*.{domain}"]) and left > datetime.timedelta(days=RENEW_BEFORE_DAYS)
