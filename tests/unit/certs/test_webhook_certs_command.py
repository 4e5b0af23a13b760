"""``gpuq certs issue`` to files: a CA and a serving certificate for the Service's DNS names."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from gpuq_k8s.certs import create_ca, issue_serving_certificate, load_key_pair
from gpuq_k8s.certs.authority import ca_still_good
from gpuq_k8s.certs.command import main, register, service_dns_names
from gpuq_k8s.certs.files import key_pair_from_pem
from gpuq_k8s.common.model.errors import InvalidValue


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuq")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["certs", *argv])


def test_issue_to_files_and_reuse_the_ca(tmp_path: Path) -> None:
    args = parse(
        "issue", "--service", "gpuq-webhook", "--namespace", "gpuq-system", "--out-dir", str(tmp_path)
    )
    assert args.func(args) == 0
    ca = load_key_pair(tmp_path / "ca.crt", tmp_path / "ca.key")
    leaf = load_key_pair(tmp_path / "tls.crt", tmp_path / "tls.key")
    leaf.certificate.verify_directly_issued_by(ca.certificate)
    sans = leaf.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == service_dns_names("gpuq-webhook", "gpuq-system")
    assert "gpuq-webhook.gpuq-system.svc" in sans.get_values_for_type(x509.DNSName)
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600

    again = tmp_path / "rotated"
    args = parse(
        "issue", "--service", "s", "--namespace", "n", "--out-dir", str(again),
        "--ca-cert", str(tmp_path / "ca.crt"), "--ca-key", str(tmp_path / "ca.key"),
    )  # fmt: skip
    assert main(args) == 0
    rotated = load_key_pair(again / "tls.crt", again / "tls.key")
    rotated.certificate.verify_directly_issued_by(ca.certificate)


def test_issue_refuses_half_a_ca_and_nothing_to_do(tmp_path: Path) -> None:
    args = parse("issue", "--service", "s", "--namespace", "n", "--ca-cert", str(tmp_path / "x"))
    assert main(args) == 2
    assert main(parse("issue", "--service", "s", "--namespace", "n")) == 2


def test_a_kept_ca_is_reused_only_while_good_for_another_leaf() -> None:
    """``--ca-secret``: the next rotation keeps the caBundle unless the CA would cut the new leaf short."""
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    fresh = create_ca("ca", now=now)
    assert ca_still_good(fresh, now=now)
    assert ca_still_good(fresh, now=now + dt.timedelta(days=3650 - 366))
    assert not ca_still_good(fresh, now=now + dt.timedelta(days=3650 - 364))  # under a year left
    assert not ca_still_good(fresh, now=now - dt.timedelta(days=1))  # not valid yet
    leaf = issue_serving_certificate(fresh, dns_names=["x"], now=now)
    assert not ca_still_good(leaf, now=now)  # not a CA


def test_a_kept_ca_must_be_a_matching_pem_pair() -> None:
    ca, other = create_ca("a"), create_ca("b")
    pair = key_pair_from_pem(
        ca.certificate_pem(), ca.private_key_pem(), "Secret/ns/x ca.crt", "Secret/ns/x ca.key"
    )
    assert pair.certificate == ca.certificate
    with pytest.raises(
        InvalidValue, match=r"Secret/ns/x ca.key: .*expected the private key of Secret/ns/x ca.crt"
    ):
        key_pair_from_pem(
            ca.certificate_pem(), other.private_key_pem(), "Secret/ns/x ca.crt", "Secret/ns/x ca.key"
        )
    with pytest.raises(InvalidValue, match=r"Secret/ns/x ca.crt: .*expected a PEM certificate"):
        key_pair_from_pem(b"junk", ca.private_key_pem(), "Secret/ns/x ca.crt", "Secret/ns/x ca.key")


def test_ca_cert_and_ca_secret_are_exclusive(tmp_path: Path) -> None:
    args = parse(
        "issue", "--service", "s", "--namespace", "n", "--out-dir", str(tmp_path),
        "--ca-cert", "a", "--ca-key", "b", "--ca-secret", "kept",
    )  # fmt: skip
    assert main(args) == 2
