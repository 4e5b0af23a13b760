"""certs: CA and leaf issuance, extensions, chain verification, PEM files."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path
from typing import TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from gpuq_k8s.certs import (
    KeyPair,
    create_ca,
    issue_client_certificate,
    issue_serving_certificate,
    load_key_pair,
    write_key_pair,
)
from gpuq_k8s.common.model.errors import InvalidValue

NOW = dt.datetime(2026, 1, 15, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return create_ca("gpuq-test-ca", now=NOW)


E = TypeVar("E", bound=x509.ExtensionType)


def _ext(cert: x509.Certificate, kind: type[E]) -> x509.Extension[E]:
    return cert.extensions.get_extension_for_class(kind)


def test_ca_is_self_signed_p256_and_may_sign_leaves_only(ca: KeyPair) -> None:
    cert = ca.certificate
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "gpuq-test-ca"
    assert isinstance(ca.private_key, ec.EllipticCurvePrivateKey)
    assert ca.private_key.curve.name == "secp256r1"
    cert.verify_directly_issued_by(cert)

    constraints = _ext(cert, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca is True
    assert constraints.value.path_length == 0
    usage = _ext(cert, x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign and usage.value.crl_sign and usage.value.digital_signature


def test_serving_certificate_sans_usage_and_chain(ca: KeyPair) -> None:
    leaf = issue_serving_certificate(
        ca,
        dns_names=["localhost", "gpuq-webhook.gpuq-system.svc"],
        ip_addresses=["127.0.0.1", ipaddress.ip_address("::1")],
        now=NOW,
    )
    cert = leaf.certificate
    sans = _ext(cert, x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "gpuq-webhook.gpuq-system.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "localhost"
    assert cert.issuer == ca.certificate.subject
    cert.verify_directly_issued_by(ca.certificate)

    assert _ext(cert, x509.BasicConstraints).value.ca is False
    usage = _ext(cert, x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    assert list(_ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ca_ski = _ext(ca.certificate, x509.SubjectKeyIdentifier).value.digest
    assert _ext(cert, x509.AuthorityKeyIdentifier).value.key_identifier == ca_ski


def test_serving_certificate_passes_a_real_tls_client_policy(ca: KeyPair) -> None:
    # The same checks a TLS client runs: chain to the trusted root, name match, EKU, validity.
    leaf = issue_serving_certificate(ca, dns_names=["gpuq-webhook.gpuq-system.svc"], now=NOW)
    store = Store([ca.certificate])
    at = NOW + dt.timedelta(days=1)
    verifier = (
        PolicyBuilder()
        .store(store)
        .time(at)
        .build_server_verifier(x509.DNSName("gpuq-webhook.gpuq-system.svc"))
    )
    chain = verifier.verify(leaf.certificate, [])
    assert chain[-1] == ca.certificate

    wrong_name = PolicyBuilder().store(store).time(at).build_server_verifier(x509.DNSName("evil.example"))
    with pytest.raises(VerificationError):
        wrong_name.verify(leaf.certificate, [])


def test_serving_certificate_is_rejected_by_another_ca(ca: KeyPair) -> None:
    other = create_ca("other-ca", now=NOW)
    leaf = issue_serving_certificate(other, ip_addresses=["127.0.0.1"], now=NOW)
    verifier = (
        PolicyBuilder()
        .store(Store([ca.certificate]))
        .time(NOW)
        .build_server_verifier(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    )
    with pytest.raises(VerificationError):
        verifier.verify(leaf.certificate, [])


def test_client_certificate_maps_to_user_and_groups(ca: KeyPair) -> None:
    leaf = issue_client_certificate(ca, "admin", organizations=["system:masters", "gpuq"], now=NOW)
    cert = leaf.certificate
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "gpuq",
    ]
    assert list(_ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # (cryptography's client verifier applies the Web PKI policy, which demands a SAN that
    # Kubernetes client certificates do not carry; the signature check is what matters here.)
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.issuer == ca.certificate.subject


def test_validity_window_backdated_and_capped_at_the_ca(ca: KeyPair) -> None:
    leaf = issue_serving_certificate(ca, dns_names=["a"], validity=dt.timedelta(days=30), now=NOW)
    assert leaf.certificate.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
    assert leaf.certificate.not_valid_after_utc == NOW + dt.timedelta(days=30)
    assert ca.certificate.not_valid_after_utc == NOW + dt.timedelta(days=3650)

    outliving = issue_serving_certificate(ca, dns_names=["a"], validity=dt.timedelta(days=99999), now=NOW)
    assert outliving.certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc


def test_every_certificate_gets_a_distinct_key_and_serial(ca: KeyPair) -> None:
    first = issue_serving_certificate(ca, dns_names=["a"], now=NOW)
    second = issue_serving_certificate(ca, dns_names=["a"], now=NOW)
    assert first.certificate.serial_number != second.certificate.serial_number
    assert first.public_key_pem() != second.public_key_pem()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "dns_names/ip_addresses"),
        ({"dns_names": [""]}, "dns_names"),
        ({"dns_names": [" a"]}, "dns_names"),
        ({"ip_addresses": ["256.0.0.1"]}, "ip_addresses"),
        ({"dns_names": ["a"], "validity": dt.timedelta(0)}, "validity"),
        ({"dns_names": ["a"], "now": dt.datetime(2026, 1, 1)}, "now"),  # naive on purpose
    ],
)
def test_invalid_serving_requests_name_the_field(ca: KeyPair, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        issue_serving_certificate(ca, **kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_pem_files_modes_round_trip_and_tls_load(ca: KeyPair, tmp_path: Path) -> None:
    leaf = issue_serving_certificate(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    cert_path, key_path = tmp_path / "tls" / "tls.crt", tmp_path / "tls" / "tls.key"
    write_key_pair(leaf, cert_path, key_path)

    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cert_path.stat().st_mode) == 0o644
    assert key_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert sorted(p.name for p in cert_path.parent.iterdir()) == ["tls.crt", "tls.key"]  # no temp files

    loaded = load_key_pair(cert_path, key_path)
    assert loaded.certificate == leaf.certificate
    assert loaded.private_key_pem() == leaf.private_key_pem()

    # The webhook serves with these files through Python's ssl module: it must accept them.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)


def test_load_key_pair_rejects_a_mismatched_key(ca: KeyPair, tmp_path: Path) -> None:
    one = issue_serving_certificate(ca, dns_names=["a"])
    two = issue_serving_certificate(ca, dns_names=["a"])
    write_key_pair(one, tmp_path / "one.crt", tmp_path / "one.key")
    write_key_pair(two, tmp_path / "two.crt", tmp_path / "two.key")
    with pytest.raises(InvalidValue, match="the private key of"):
        load_key_pair(tmp_path / "one.crt", tmp_path / "two.key")
