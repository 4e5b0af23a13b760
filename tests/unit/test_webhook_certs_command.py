"""``gpuq certs issue`` to files: a CA and a serving certificate for the Service's DNS names."""

from __future__ import annotations

import argparse
from pathlib import Path

from cryptography import x509

from certs import load_key_pair
from certs.command import main, register, service_dns_names


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
