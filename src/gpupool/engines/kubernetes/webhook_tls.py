"""The webhook's TLS certificate when gpupool makes it itself (no cert-manager): a CA of its
own and a serving certificate for the webhook Service's DNS names, kept in a directory
(`ca.crt`, `tls.crt`, `tls.key`, private), renewed `renew_before_s` before it expires.
The CA goes into gpupool's own MutatingWebhookConfiguration's `caBundle`
(`NativeApi.set_ca_bundle`, the one object the chart lets it patch)."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VALID_S = 365 * 86400
RENEW_BEFORE_S = 30 * 86400


@dataclass(frozen=True)
class ServingCert:
    cert_file: Path
    key_file: Path
    ca_pem: bytes
    not_after: float
    #: made (or renewed) by this call: the caBundle must be patched, the server restarted
    made: bool


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _san(name: str) -> Any:
    """A DNS name, or an IP address (a test's loopback webhook)."""
    import ipaddress

    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def make(dns_names: list[str], now: float, valid_s: int = VALID_S) -> tuple[bytes, bytes, bytes]:
    """(ca_pem, cert_pem, key_pem): a fresh CA and a certificate for `dns_names` it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    start = dt.datetime.fromtimestamp(now - 300, dt.UTC)
    end = dt.datetime.fromtimestamp(now + valid_s, dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpupool webhook CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in dns_names]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


def not_after(cert_pem: bytes) -> float:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.timestamp()


def ensure(
    directory: Path, dns_names: list[str], now: float, renew_before_s: float = RENEW_BEFORE_S
) -> ServingCert:
    """The certificate in `directory`, made or renewed when missing, for other names, or
    expiring within `renew_before_s`."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_f, cert_f, key_f = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    if ca_f.exists() and cert_f.exists() and key_f.exists():
        from cryptography import x509

        cert_pem = cert_f.read_bytes()
        cert = x509.load_pem_x509_certificate(cert_pem)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        expires = cert.not_valid_after_utc.timestamp()
        if (
            sorted(map(str, names.value)) == sorted(map(str, map(_san, dns_names)))
            and expires - now > renew_before_s
        ):
            return ServingCert(cert_f, key_f, ca_f.read_bytes(), expires, made=False)
    ca_pem, cert_pem, key_pem = make(dns_names, now)
    _write(key_f, key_pem)
    _write(cert_f, cert_pem)
    _write(ca_f, ca_pem)
    return ServingCert(cert_f, key_f, ca_pem, not_after(cert_pem), made=True)
