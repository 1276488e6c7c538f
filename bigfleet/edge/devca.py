"""A throwaway certificate authority for loopback mutual TLS (`bigfleet dev`, tests).

    ca = make_dev_ca(Path(".bigfleet/tls"), server_names=["localhost"], clients=["web", "batch",
                     "bigfleet-worker"])

writes, in that directory:

    ca.pem, ca-key.pem            the CA (verifies both sides)
    server.pem, server-key.pem    one server certificate for every BigFleet server on this
                                  machine: localhost, 127.0.0.1, ::1 and `server_names`
    NAME.pem, NAME-key.pem        a client certificate per name, whose common name and only DNS
                                  name are NAME: a cluster's (the gateway reads the cluster from
                                  it), or "bigfleet-worker" for BigFleet's own calls

It is idempotent: what is there is kept if it is still valid for DAYS_LEFT days, was issued by
this CA and names what is asked; anything else is issued again (a new CA reissues everything).
Keys are EC P-256, files 0600. Never use it for anything but a development machine.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..deployment import ClientTLS, ServerTLS

VALID_DAYS = 90
DAYS_LEFT = 7  # reissue what expires sooner
LOOPBACK = ("localhost", "127.0.0.1", "::1")
RESERVED = {"ca", "server"}  # their files are the CA's and the server's
_DNS = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


@dataclass(frozen=True)
class DevCA:
    """Where make_dev_ca put everything."""

    directory: Path
    ca: Path
    ca_key: Path
    server: CertPaths
    clients: dict[str, CertPaths] = field(default_factory=dict)

    def server_tls(self, mutual: bool = True) -> ServerTLS:
        return ServerTLS(
            cert=str(self.server.cert),
            key=str(self.server.key),
            client_ca=str(self.ca) if mutual else None,
        )

    def client_tls(self, name: str | None = None, server_name: str | None = None) -> ClientTLS:
        """TLS of a client: this CA's server, as client `name` (None: no client certificate)."""
        if name is None:
            return ClientTLS(ca=str(self.ca), server_name=server_name)
        paths = self.clients[name]
        return ClientTLS(
            ca=str(self.ca), cert=str(paths.cert), key=str(paths.key), server_name=server_name
        )


def make_dev_ca(
    directory: str | Path,
    server_names: Iterable[str] = (),
    clients: Iterable[str] = (),
) -> DevCA:
    """Make (or reuse) the CA, the server certificate and one client certificate per name."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(clients))
    for name in names:
        if not _DNS.match(name) or name in RESERVED or name.endswith("-key"):
            raise ValueError(
                f"client name {name!r}: must be a DNS name, not 'ca' or 'server', and not end "
                "in '-key' (its files would collide)"
            )
    ca_paths = CertPaths(root / "ca.pem", root / "ca-key.pem")
    ca_cert, ca_key, fresh = _ca(ca_paths)
    wanted = list(dict.fromkeys([*LOOPBACK, *server_names]))
    server = CertPaths(root / "server.pem", root / "server-key.pem")
    if fresh or not _usable(server, ca_cert, wanted):
        _issue(server, ca_cert, ca_key, "localhost", wanted, ExtendedKeyUsageOID.SERVER_AUTH)
    issued = {}
    for name in names:
        paths = CertPaths(root / f"{name}.pem", root / f"{name}-key.pem")
        if fresh or not _usable(paths, ca_cert, [name]):
            _issue(paths, ca_cert, ca_key, name, [name], ExtendedKeyUsageOID.CLIENT_AUTH)
        issued[name] = paths
    return DevCA(root, ca_paths.cert, ca_paths.key, server, issued)


# ---- the CA ----------------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _lasts(cert: x509.Certificate) -> bool:
    now = _now()
    return (
        cert.not_valid_before_utc <= now
        and cert.not_valid_after_utc - now >= dt.timedelta(days=DAYS_LEFT)
    )


def _ca(paths: CertPaths) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, bool]:
    """The CA kept in `paths`, or a new one; True if new."""
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
        if (
            isinstance(key, ec.EllipticCurvePrivateKey)
            and _lasts(cert)
            and _same_key(cert.public_key(), key.public_key())
        ):
            return cert, key, False
    except (OSError, ValueError):
        pass
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "BigFleet dev CA")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(paths, cert, key)
    return cert, key, True


def _usable(paths: CertPaths, ca: x509.Certificate, names: list[str]) -> bool:
    """The certificate in `paths` was issued by `ca`, lasts, names every one of `names`, and
    its key is there and matches."""
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
        cert.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    if not _lasts(cert) or not _same_key(cert.public_key(), key.public_key()):
        return False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(n) for n in san.get_values_for_type(x509.DNSName)}
    have |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return all(_canonical(n) in have for n in names)


def _same_key(a: object, b: object) -> bool:
    def spki(k: object) -> bytes:
        return k.public_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    return spki(a) == spki(b)


def _canonical(name: str) -> str:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def _issue(
    paths: CertPaths,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    names: list[str],
    usage: x509.ObjectIdentifier,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(paths, cert, key)


def _write(paths: CertPaths, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """Key first, then certificate, each written whole (a temporary file renamed over)."""
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _atomic(paths.key, key_pem, 0o600)
    _atomic(paths.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
