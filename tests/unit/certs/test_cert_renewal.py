"""Issue 12, certificates renew themselves: the pure decisions of certs/renewal.py.

When a serving certificate is renewed, how a CA rollover overlaps the old and the new CA in the bundle,
and when the old CA may leave it; and, over 20 simulated minutes of 2-minute certificates, that every
serving certificate a replica may still serve verifies against every bundle an apiserver may still hold.
"""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509

from gpuq_k8s.certs.authority import KeyPair, create_ca, issue_serving_certificate
from gpuq_k8s.certs.renewal import Authorities, RenewalPolicy, may_retire, next_authorities, serving_renewal
from gpuq_k8s.certs.renewer import (
    _ca_of,
    _serving_of,
    authorities_from_secret,
    bundle_pem,
    secret_of_authorities,
    serving_names,
)
from gpuq_k8s.common.kube.status import Reply
from gpuq_k8s.common.model.errors import InvalidValue

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
POLICY = RenewalPolicy(serving_validity=120 * S, ca_validity=240 * S, grace=10 * S)
NAMES = ["gpuq-webhook.gpuq-system.svc"]
SANS = serving_names(NAMES, ["127.0.0.1"])


def _ca(at: dt.datetime = T0) -> KeyPair:
    return create_ca("test-ca", validity=POLICY.ca_validity, now=at)


def _serving(ca: KeyPair, at: dt.datetime = T0) -> x509.Certificate:
    pair = issue_serving_certificate(
        ca, dns_names=NAMES, ip_addresses=["127.0.0.1"], validity=POLICY.serving_validity, now=at
    )
    return pair.certificate


def _verifies(serving: x509.Certificate, bundle: list[x509.Certificate]) -> bool:
    for ca in bundle:
        try:
            serving.verify_directly_issued_by(ca)
        except Exception:
            continue
        return True
    return False


def test_a_serving_certificate_is_renewed_with_a_third_of_its_validity_left() -> None:
    ca = create_ca("long", now=T0)  # a CA good for years: no cap
    auth = Authorities(ca, T0)
    serving = _serving(ca)
    assert serving_renewal(serving, auth, SANS, T0 + 79 * S, POLICY) is None
    why = serving_renewal(serving, auth, SANS, T0 + 81 * S, POLICY)
    assert why is not None and "39s left" in why
    assert serving_renewal(None, auth, SANS, T0, POLICY) == "no serving certificate yet"
    assert "not valid now" in str(serving_renewal(serving, auth, SANS, T0 + 121 * S, POLICY))


def test_a_serving_certificate_of_another_ca_or_other_names_is_replaced() -> None:
    ca, other = create_ca("a", now=T0), create_ca("b", now=T0)
    serving = _serving(other)
    assert "not signed by the current CA" in str(
        serving_renewal(serving, Authorities(ca, T0), SANS, T0, POLICY)
    )
    names = serving_names([*NAMES, "extra.example"], ["127.0.0.1"])
    assert "names" in str(serving_renewal(_serving(ca), Authorities(ca, T0), names, T0, POLICY))


def test_no_renewal_that_gains_nothing_next_to_an_expiring_ca() -> None:
    """A certificate is cut at its CA's expiry: with the CA 30 s from its end, a new certificate would
    end when the current one does; the CA rollover renews it, not a new certificate every round."""
    ca = _ca()
    serving = _serving(ca, T0 + 200 * S)  # capped at T0 + 240 s
    assert serving.not_valid_after_utc == ca.certificate.not_valid_after_utc
    assert serving_renewal(serving, Authorities(ca, T0), SANS, T0 + 210 * S, POLICY) is None


def test_a_ca_rollover_overlaps_then_switches_then_retires() -> None:
    old = _ca()
    made: list[KeyPair] = []

    def new_ca() -> KeyPair:
        made.append(_ca(now))
        return made[-1]

    now = T0 + 150 * S  # 90 s left, more than a third of 240: nothing
    auth = Authorities(old, T0)
    serving = _serving(old, T0 + 100 * S)
    assert next_authorities(auth, serving, now, POLICY, new_ca).reason is None
    now = T0 + 161 * S  # 79 s left: a new CA is published next to the old one, which still signs
    step = next_authorities(auth, serving, now, POLICY, new_ca)
    assert step.reason and "published" in step.reason
    auth = step.authorities
    assert auth.signing is old and auth.incoming is made[0]
    assert auth.bundle() == [old.certificate, made[0].certificate]
    now += 9 * S  # within the grace: no switch yet
    assert next_authorities(auth, serving, now, POLICY, new_ca).authorities is auth
    now += 1 * S  # the grace is over: the new CA signs, the old one stays in the bundle
    step = next_authorities(auth, serving, now, POLICY, new_ca)
    auth = step.authorities
    assert auth.signing is made[0] and auth.retiring == old.certificate and auth.incoming is None
    assert auth.bundle() == [old.certificate, made[0].certificate]
    assert "not signed by the current CA" in str(serving_renewal(serving, auth, SANS, now, POLICY))
    renewed = _serving(auth.signing, now)
    assert not may_retire(auth, serving, now + 60 * S, POLICY), "the old serving certificate is still out"
    assert not may_retire(auth, renewed, now + 9 * S, POLICY), "the renewed one is not out for a grace yet"
    assert may_retire(auth, renewed, now + 10 * S, POLICY)
    step = next_authorities(auth, renewed, now + 10 * S, POLICY, new_ca)
    assert step.authorities.bundle() == [made[0].certificate] and step.authorities.retiring is None
    assert len(made) == 1


def test_an_expired_old_ca_leaves_the_bundle_at_once() -> None:
    old, new = _ca(), _ca(T0 + 200 * S)
    auth = Authorities(new, T0 + 239 * S, retiring=old.certificate)
    assert may_retire(auth, None, T0 + 240 * S, POLICY)
    assert not may_retire(auth, None, T0 + 239 * S, POLICY)


def test_a_lost_or_expired_ca_starts_afresh() -> None:
    fresh = _ca(T0 + 500 * S)
    step = next_authorities(None, None, T0, POLICY, lambda: fresh)
    assert step.authorities.signing is fresh and step.reason == "no CA kept yet"
    step = next_authorities(Authorities(_ca(), T0), None, T0 + 500 * S, POLICY, lambda: fresh)
    assert step.authorities.bundle() == [fresh.certificate] and "not valid now" in str(step.reason)


@pytest.mark.parametrize(
    ("policy", "flag"),
    [
        (RenewalPolicy(grace=0 * S), "--rotation-grace"),
        (RenewalPolicy(serving_validity=30 * S, grace=10 * S), "--certificate-validity"),
        (RenewalPolicy(serving_validity=600 * S, ca_validity=60 * S, grace=10 * S), "--ca-validity"),
    ],
)
def test_a_policy_whose_steps_cannot_fit_is_refused(policy: RenewalPolicy, flag: str) -> None:
    with pytest.raises(InvalidValue, match=flag):
        policy.validate()


def test_twenty_minutes_of_rotations_never_serve_an_untrusted_certificate() -> None:
    """Every second a renewal round runs. An apiserver may hold any bundle of the last grace, and a
    replica may serve any serving certificate of the last grace: each such pair must verify and the
    certificate must be valid. Serving rotations and CA rollovers both happen many times."""
    now = T0
    auth: Authorities | None = None
    serving: KeyPair | None = None
    bundles: list[tuple[dt.datetime, list[x509.Certificate]]] = []
    servings: list[tuple[dt.datetime, x509.Certificate]] = []

    def new_ca() -> KeyPair:
        return create_ca("sim", validity=POLICY.ca_validity, now=now)

    switches = 0
    while now < T0 + 1200 * S:
        step = next_authorities(auth, serving.certificate if serving else None, now, POLICY, new_ca)
        if auth is not None and step.authorities.signing is not auth.signing:
            switches += 1
        auth = step.authorities
        if not bundles or bundles[-1][1] != auth.bundle():
            bundles.append((now, auth.bundle()))
        if serving_renewal(serving.certificate if serving else None, auth, SANS, now, POLICY) is not None:
            serving = issue_serving_certificate(
                auth.signing,
                dns_names=NAMES,
                ip_addresses=["127.0.0.1"],
                validity=POLICY.serving_validity,
                now=now,
            )
            servings.append((now, serving.certificate))
        held = [
            b
            for i, (at, b) in enumerate(bundles)
            if i + 1 == len(bundles) or bundles[i + 1][0] > now - POLICY.grace
        ]
        served = [
            c
            for i, (at, c) in enumerate(servings)
            if i + 1 == len(servings) or servings[i + 1][0] > now - POLICY.grace
        ]
        for certificate in served:
            assert certificate.not_valid_before_utc <= now < certificate.not_valid_after_utc, now - T0
            for bundle in held:
                assert _verifies(certificate, bundle), (
                    f"at {now - T0}: a served certificate fails a held bundle"
                )
        now += S
    assert switches >= 4 and len(servings) >= 10, (switches, len(servings))


def test_the_kept_state_round_trips_through_its_secret_and_reads_a_gpuq_certs_issue_secret() -> None:
    old, new, incoming = _ca(), _ca(T0 + 100 * S), _ca(T0 + 150 * S)
    auth = Authorities(new, T0 + 101 * S, incoming=incoming, retiring=old.certificate)
    secret = secret_of_authorities("gpuq-system", "gpuq-webhook-ca", auth)
    back = authorities_from_secret(secret, "Secret/gpuq-system/gpuq-webhook-ca")
    assert back.bundle() == auth.bundle() and back.changed_at == auth.changed_at
    assert back.signing.private_key_pem() == new.private_key_pem()
    assert back.incoming is not None and back.incoming.private_key_pem() == incoming.private_key_pem()
    # What `gpuq certs issue --ca-secret` keeps: the CA only, no rollover, its grace long over.
    plain = {"data": {k: v for k, v in secret["data"].items() if k in ("ca.crt", "ca.key")}}
    kept = authorities_from_secret(plain, "Secret/gpuq-system/gpuq-webhook-ca")
    assert kept.bundle() == [new.certificate] and kept.changed_at < T0
    with pytest.raises(InvalidValue, match=r"Secret/gpuq-system/x: invalid value \['tls.crt'\]"):
        authorities_from_secret({"data": {"tls.crt": "eA=="}}, "Secret/gpuq-system/x")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "ca.crt",
            "not base64!",
            r"Secret/ns/ca data.ca.crt: invalid value '\(not shown\)': expected base64",
        ),
        (
            "retiring-ca.crt",
            "eA==",
            r"Secret/ns/ca retiring-ca.crt: invalid value .*: expected a PEM certificate",
        ),
    ],
)
def test_a_damaged_ca_secret_is_an_invalid_value_naming_the_key(key: str, value: str, message: str) -> None:
    """A round reading it fails with a logged GpuqError and is retried; any other error would end the
    renewal task for good."""
    secret = secret_of_authorities("ns", "ca", Authorities(_ca(), T0))
    secret["data"][key] = value
    with pytest.raises(InvalidValue, match=message):
        authorities_from_secret(secret, "Secret/ns/ca")


def test_a_damaged_tls_secret_is_reissued_not_a_crash() -> None:
    """Bad base64 in the TLS Secret reads as no certificate and no bundle: the round issues a fresh
    pair and rewrites the bundle (an uncaught decoding error would end the renewal task)."""
    damaged = Reply(200, {"data": {"tls.crt": "not base64!", "tls.key": "x", "ca.crt": "not base64!"}})
    assert _serving_of(damaged) is None
    assert _ca_of(damaged) is None
    ca = _ca()
    intact = Reply(200, {"data": {"ca.crt": base64.b64encode(bundle_pem([ca.certificate])).decode()}})
    assert _ca_of(intact) == bundle_pem([ca.certificate])
