"""A small certificate authority: create a CA, issue serving and client certificates.

Used by the webhook (its serving certificate and the caBundle of the webhook configurations) and
by the e2e control plane (kube-apiserver serving certificate, admin client certificate).

Keys are ECDSA P-256. Every consumer here accepts it (Go's crypto/tls in kube-apiserver and etcd,
OpenSSL behind Python's ssl, the API server's service-account token signer as ES256), a key is
generated in well under a millisecond where RSA 2048 takes tens of milliseconds (it adds up in
tests that issue many certificates), and the certificates stay small.
"""

from __future__ import annotations

import datetime as dt
import inspect
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpuq_k8s.common.model.errors import InvalidValue

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: How far back ``not_valid_before`` is set, so a certificate is valid at once on a host whose clock
#: runs slightly behind the issuer's.
CLOCK_SKEW = dt.timedelta(minutes=5)
DEFAULT_CA_VALIDITY = dt.timedelta(days=3650)
DEFAULT_LEAF_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key."""

    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def private_key_pem(self) -> bytes:
        return private_key_pem(self.private_key)

    def public_key_pem(self) -> bytes:
        return public_key_pem(self.private_key)


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """PKCS#8, unencrypted: what kube-apiserver, etcd, Python's ssl and kubeconfig files accept."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The SubjectPublicKeyInfo of ``key`` (e.g. kube-apiserver's --service-account-key-file)."""
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def generate_private_key() -> ec.EllipticCurvePrivateKey:
    """A fresh P-256 key (also usable as a service-account token signing key)."""
    return ec.generate_private_key(ec.SECP256R1())


def create_ca(
    common_name: str,
    *,
    validity: dt.timedelta = DEFAULT_CA_VALIDITY,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    _require_name(common_name, "common_name")
    key = generate_private_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _validity(validity, now)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


def ca_still_good(
    ca: KeyPair, *, for_at_least: dt.timedelta = DEFAULT_LEAF_VALIDITY, now: dt.datetime | None = None
) -> bool:
    """Whether ``ca`` may sign the next leaf: a CA certificate valid now and for at least
    ``for_at_least`` more (a leaf is cut at its CA's expiry, so a nearly expired CA would make the
    next rotation come early); otherwise a new CA is due, with a new caBundle."""
    at = now or dt.datetime.now(dt.UTC)
    cert = ca.certificate
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return (
        constraints.ca and cert.not_valid_before_utc <= at and cert.not_valid_after_utc - at >= for_at_least
    )


def issue_serving_certificate(
    ca: KeyPair,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str | IPAddress] = (),
    common_name: str | None = None,
    validity: dt.timedelta = DEFAULT_LEAF_VALIDITY,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A TLS server certificate for the given DNS names and IP addresses.

    Clients match the host name against the subjectAltName only (the CN is ignored since Go 1.15),
    so at least one name or address is required. The CN defaults to the first DNS name, else the
    first address, which is only cosmetic.
    """
    dns = [_require_name(name, "dns_names") for name in dns_names]
    ips = [_parse_ip(address) for address in ip_addresses]
    if not dns and not ips:
        raise InvalidValue(
            "dns_names/ip_addresses", [], "at least one DNS name or IP address for a serving certificate"
        )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    sans += [x509.IPAddress(ip) for ip in ips]
    cn = common_name if common_name is not None else (dns[0] if dns else str(ips[0]))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _require_name(cn, "common_name"))])
    return _issue_leaf(
        ca, subject, validity, now, ExtendedKeyUsageOID.SERVER_AUTH, x509.SubjectAlternativeName(sans)
    )


def issue_client_certificate(
    ca: KeyPair,
    common_name: str,
    *,
    organizations: Iterable[str] = (),
    validity: dt.timedelta = DEFAULT_LEAF_VALIDITY,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A TLS client certificate.

    kube-apiserver's x509 authenticator maps the CN to the user name and each O to a group, so
    ``issue_client_certificate(ca, "admin", organizations=["system:masters"])`` is a cluster admin.
    """
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, _require_name(common_name, "common_name"))]
    attributes += [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, _require_name(org, "organizations"))
        for org in organizations
    ]
    return _issue_leaf(ca, x509.Name(attributes), validity, now, ExtendedKeyUsageOID.CLIENT_AUTH)


def _issue_leaf(
    ca: KeyPair,
    subject: x509.Name,
    validity: dt.timedelta,
    now: dt.datetime | None,
    usage: x509.ObjectIdentifier,
    *extensions: x509.ExtensionType,
) -> KeyPair:
    """A new key and its leaf certificate signed by ``ca``, with ``extensions`` (non-critical)
    besides those every leaf has."""
    not_before, not_after = _validity(validity, now)
    # A leaf outliving its CA fails verification at the CA's expiry anyway; cap it so the
    # certificate says what it is worth.
    not_after = min(not_after, ca.certificate.not_valid_after_utc)
    ca_ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    key = generate_private_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .public_key(key.public_key())
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    certificate = builder.add_extension(
        x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
    ).sign(ca.private_key, hashes.SHA256())
    return KeyPair(certificate, key)


# Every key usage x509.KeyUsage takes (all required); each is granted (True) or not.
_KEY_USAGES = tuple(inspect.signature(x509.KeyUsage).parameters)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    # ECDHE key agreement signs with the key: digital_signature is what TLS needs. key_encipherment
    # only applies to RSA key transport and is left off for EC keys. A CA also signs certificates and CRLs.
    granted = {"digital_signature", "key_cert_sign", "crl_sign"} if cert_sign else {"digital_signature"}
    return x509.KeyUsage(**{usage: usage in granted for usage in _KEY_USAGES})


def _validity(validity: dt.timedelta, now: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    if validity <= dt.timedelta(0):
        raise InvalidValue("validity", validity, "a positive duration")
    start = now if now is not None else dt.datetime.now(dt.UTC)
    if start.tzinfo is None:
        raise InvalidValue("now", start, "a timezone-aware datetime")
    return start - CLOCK_SKEW, start + validity


def _require_name(value: str, field: str) -> str:
    if not value or value != value.strip():
        raise InvalidValue(field, value, "a non-empty name without surrounding whitespace")
    return value


def _parse_ip(value: str | IPAddress) -> IPAddress:
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return value
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        raise InvalidValue("ip_addresses", value, "an IPv4 or IPv6 address") from None
