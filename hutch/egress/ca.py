"""The per-install certificate authority with which the egress proxy terminates TLS, and what the
boxes trust.

The proxy terminates TLS only for hosts a box holds a secret for (see inject.py): there it shows
the box a certificate for the host, signed by this CA, which every box trusts. The CA's key stays
in the data dir and never enters a box. Each install makes its own CA the first time it starts,
so a certificate minted by one hutch means nothing to the boxes of another.

What a box trusts is one read-only directory, mounted at /.hutch/ca: `ca.crt` (this CA alone) and
`bundle.crt` (the Debian base's public roots, the server's extra CAs, and this CA).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# every IPv4 and IPv6 address, excluded from a name-constrained CA (x509 leaves a type it does not
# name unconstrained)
NO_ADDRESSES = (x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")), x509.IPAddress(ipaddress.ip_network("::/0")))
CA_DAYS = 3650
LEAF_DAYS = 30
LEAF_REUSE_SECONDS = 24 * 3600  # a host's certificate is minted again after a day
MAX_CACHED_HOSTS = 512


def new_ca(common_name: str, permitted_domain: str | None = None) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new CA's key and self-signed certificate; with `permitted_domain`, name-constrained to that
    domain and the names below it, and to no IP address (a client that trusts it trusts nothing
    else it could sign)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hutch"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if permitted_domain is not None:
        builder = builder.add_extension(x509.NameConstraints(permitted_subtrees=[x509.DNSName(permitted_domain)],
                                                             excluded_subtrees=list(NO_ADDRESSES)), critical=True)
    return key, builder.sign(key, hashes.SHA256())


def issue_leaf(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, leaf_key: ec.EllipticCurvePrivateKey,
               names: list[str], days: int) -> x509.Certificate:
    """A server certificate for `names` (the first is its common name), signed by the CA."""
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
            .issuer_name(ca_cert.subject).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))


def write_pair(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, key_path: Path, cert_path: Path) -> None:
    """The key (readable by root alone) and the certificate, as PEM, each written beside its place
    and renamed in: a crash leaves the old file or the new one, never half of one."""
    for path, data, mode in ((key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()), 0o600),
                             (cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


class CertificateAuthority:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key_path, cert_path = self.dir / "ca.key", self.dir / "ca.crt"
        if not (key_path.exists() and cert_path.exists()):
            self._create(key_path, cert_path)
        self._key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        self.cert_pem = cert_path.read_bytes()
        self._cert = x509.load_pem_x509_certificate(self.cert_pem)
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())  # one per process: minting stays ~1 ms
        self._contexts: OrderedDict[str, tuple[float, ssl.SSLContext]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _create(key_path: Path, cert_path: Path) -> None:
        key, cert = new_ca(f"hutch egress CA {os.urandom(4).hex()}")
        write_pair(key, cert, key_path, cert_path)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for `host` signed by this CA (HTTP/1.1
        only: the proxy reads requests with h11)."""
        with self._lock:
            cached = self._contexts.get(host)
            if cached is not None and cached[0] > time.monotonic():
                self._contexts.move_to_end(host)
                return cached[1]
            ctx = self._mint(host)
            self._contexts[host] = (time.monotonic() + LEAF_REUSE_SECONDS, ctx)
            while len(self._contexts) > MAX_CACHED_HOSTS:
                self._contexts.popitem(last=False)
            return ctx

    def _mint(self, host: str) -> ssl.SSLContext:
        ca_key = self._key
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        cert = issue_leaf(ca_key, self._cert, self._leaf_key, [host], LEAF_DAYS)
        pem = cert.public_bytes(serialization.Encoding.PEM) + self._leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        # ssl loads a chain only from a file: one that lives for the call, readable by root alone
        fd, name = tempfile.mkstemp(dir=self.dir, prefix=".leaf-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
            ctx.load_cert_chain(name)
        finally:
            os.unlink(name)
        return ctx

    def write_box_trust(self, target: Path, public_roots: Path | None, extra: list[Path]) -> None:
        """The directory every box mounts read-only at /.hutch/ca."""
        target.mkdir(parents=True, exist_ok=True, mode=0o755)
        parts = [public_roots.read_bytes()] if public_roots is not None and public_roots.is_file() else []
        parts += [p.read_bytes() for p in extra]
        parts.append(self.cert_pem)
        bundle = b"".join(part if part.endswith(b"\n") else part + b"\n" for part in parts)
        for name, data in (("ca.crt", self.cert_pem), ("bundle.crt", bundle)):
            tmp = target / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.chmod(0o644)
            tmp.replace(target / name)


def upstream_context(extra: list[Path]) -> ssl.SSLContext:
    """How the proxy checks the real servers of the TLS it terminates: the host's trust store,
    plus the server's extra CAs."""
    ctx = ssl.create_default_context()
    ctx.set_alpn_protocols(["http/1.1"])
    for path in extra:
        ctx.load_verify_locations(cafile=str(path))
    return ctx
