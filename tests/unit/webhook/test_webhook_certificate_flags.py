"""``gpuq webhook``'s certificate flags (webhook/certificates.py): a wrong combination or a renewal policy
whose steps cannot fit is exit 2 with one line naming the flag, before anything listens."""

from __future__ import annotations

import pytest

from gpuq_k8s.cli import main

RENEW = [
    "webhook",
    "--tls-secret",
    "gpuq-webhook-tls",
    "--certs-namespace",
    "gpuq-system",
    "--renew-certificates",
]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["webhook"], "--tls-cert-file"),
        (["webhook", "--tls-cert-file", "x"], "--tls-cert-file"),
        (
            ["webhook", "--tls-secret", "s", "--tls-cert-file", "x", "--tls-private-key-file", "y"],
            "--tls-secret",
        ),
        (["webhook", "--tls-secret", "s", "--certs-namespace", ""], "--certs-namespace"),
        (
            ["webhook", "--tls-cert-file", "x", "--tls-private-key-file", "y", "--renew-certificates"],
            "--renew-certificates",
        ),
        ([*RENEW, "--certificate-validity", "10", "--rotation-grace", "5"], "--certificate-validity"),
        ([*RENEW, "--ca-validity", "30", "--rotation-grace", "5"], "--ca-validity"),
        ([*RENEW, "--rotation-grace", "0"], "--rotation-grace"),
        ([*RENEW, "--rotation-grace", "4", "--renew-interval", "3"], "--renew-interval"),
    ],
)
def test_a_wrong_certificate_setup_exits_2_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and named in err, err
