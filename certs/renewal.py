"""When the webhook's certificates renew, and how a CA rollover overlaps: the pure decisions.

The renewer (:mod:`certs.renewer`) reads the kept state, asks these functions what to do at ``now``,
and writes what they answer; nothing here does I/O or reads the clock.

The CAs the apiserver trusts (the caBundle of the webhook configurations) are :class:`Authorities`:
the CA that signs serving certificates, a new CA published next to it before it signs anything
(``incoming``), and the previous CA kept after the switch while serving certificates it signed may still
be in use (``retiring``). A rollover takes three steps, one ``grace`` apart, so that no apiserver ever
meets a serving certificate whose CA it does not trust yet, and no webhook replica ever serves one
whose CA has left the bundle:

1. ``incoming`` is created and published: the bundle holds the old and the new CA;
2. after ``grace`` (every apiserver has the two-CA bundle) the new CA signs: the serving certificate is
   re-issued by it at once, the old CA stays in the bundle as ``retiring``;
3. once the serving certificate signed by the new CA has been out for ``grace`` (every replica serves
   it), the old CA leaves the bundle.

A CA rollover starts when the signing CA has less than a third of its validity left, a serving
certificate is renewed when it has less than a third of its validity left (and only if a new one would
outlive it: a certificate is cut at its CA's expiry, so next to an expiring CA the CA rollover is what
renews it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from gpuq_k8s.certs.authority import CLOCK_SKEW, DEFAULT_CA_VALIDITY, KeyPair
from gpuq_k8s.common.model.errors import InvalidValue

#: What is left of a certificate's validity (as a share of the policy's validity) when it is renewed.
RENEW_WHEN_LEFT = 1 / 3
DEFAULT_SERVING_VALIDITY = dt.timedelta(days=90)
DEFAULT_GRACE = dt.timedelta(minutes=2)


@dataclass(frozen=True, slots=True)
class RenewalPolicy:
    """``grace``: how long a change of the bundle or of the serving certificate takes to reach every
    apiserver and every webhook replica (webhook configurations reach the apiservers' informers in
    about a second; the replicas read the TLS Secret every ``--cert-reload-interval``)."""

    serving_validity: dt.timedelta = DEFAULT_SERVING_VALIDITY
    ca_validity: dt.timedelta = DEFAULT_CA_VALIDITY
    grace: dt.timedelta = DEFAULT_GRACE

    def validate(self) -> None:
        """A rollover (two graces) must end while the old CA is valid, a renewal (one grace) while the
        old serving certificate is; raises InvalidValue naming the flag otherwise."""
        if self.grace <= dt.timedelta(0):
            raise InvalidValue("--rotation-grace", _seconds(self.grace), "a positive number of seconds")
        if self.serving_validity * RENEW_WHEN_LEFT <= self.grace:
            raise InvalidValue(
                "--certificate-validity",
                _seconds(self.serving_validity),
                f"more than 3 x --rotation-grace ({_seconds(self.grace * 3)}s)",
            )
        if self.ca_validity * RENEW_WHEN_LEFT <= self.grace * 2:
            raise InvalidValue(
                "--ca-validity",
                _seconds(self.ca_validity),
                f"more than 6 x --rotation-grace ({_seconds(self.grace * 6)}s)",
            )


def as_utc(moment: dt.datetime) -> dt.datetime:
    """``moment`` with its timezone; one without (``2024-01-01T00:00:00``) is read as UTC, the zone
    every time gpuq writes is in."""
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment


def read_time(text: str, field: str) -> dt.datetime:
    """An RFC 3339 time as gpuq keeps it in an annotation (``gpuq.io/ca-changed-at``); without a
    timezone it is UTC (:func:`as_utc`). Anything else raises :class:`InvalidValue` naming ``field``."""
    try:
        return as_utc(dt.datetime.fromisoformat(text))
    except (TypeError, ValueError):
        raise InvalidValue(field, text, "an RFC 3339 time such as 2024-01-01T00:00:00Z") from None


def _seconds(delta: dt.timedelta) -> str:
    return f"{delta.total_seconds():g}"


@dataclass(frozen=True, slots=True)
class Authorities:
    """The CAs of the webhook: ``signing`` signs serving certificates; the bundle is ``retiring``,
    ``signing`` and ``incoming``, each when present. ``changed_at``: when the bundle or the signer last
    changed (the start of the current grace)."""

    signing: KeyPair
    changed_at: dt.datetime
    incoming: KeyPair | None = None
    retiring: x509.Certificate | None = None

    def __post_init__(self) -> None:
        # Compared with aware times on every tick: a naive one would be a TypeError each time.
        object.__setattr__(self, "changed_at", as_utc(self.changed_at))

    def bundle(self) -> list[x509.Certificate]:
        """What the apiserver trusts, oldest first."""
        certificates = [self.signing.certificate]
        if self.retiring is not None:
            certificates.insert(0, self.retiring)
        if self.incoming is not None:
            certificates.append(self.incoming.certificate)
        return certificates


@dataclass(frozen=True, slots=True)
class Step:
    """The authorities after a decision and why they changed (``reason`` None: they did not)."""

    authorities: Authorities
    reason: str | None = None


def _valid_at(certificate: x509.Certificate, now: dt.datetime) -> bool:
    return certificate.not_valid_before_utc <= now < certificate.not_valid_after_utc


def _left(certificate: x509.Certificate, now: dt.datetime) -> dt.timedelta:
    return certificate.not_valid_after_utc - now


def issued_at(certificate: x509.Certificate) -> dt.datetime:
    """When gpuq issued ``certificate`` (its notBefore is set :data:`CLOCK_SKEW` earlier)."""
    return certificate.not_valid_before_utc + CLOCK_SKEW


def signed_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def next_authorities(
    current: Authorities | None,
    serving: x509.Certificate | None,
    now: dt.datetime,
    policy: RenewalPolicy,
    new_ca: Callable[[], KeyPair],
) -> Step:
    """At most one step of the rollover at ``now`` (``serving``: the certificate in the TLS Secret)."""
    if current is None:
        return Step(Authorities(new_ca(), now), "no CA kept yet")
    if not _valid_at(current.signing.certificate, now):
        # Nothing it signed verifies any more: there is no overlap to keep, start afresh.
        return Step(Authorities(new_ca(), now), "the kept CA is not valid now")
    if current.retiring is not None:
        if may_retire(current, serving, now, policy):
            return Step(replace(current, retiring=None, changed_at=now), "the previous CA leaves the bundle")
        return Step(current)
    if current.incoming is not None:
        if now - current.changed_at >= policy.grace and _valid_at(current.incoming.certificate, now):
            switched = Authorities(current.incoming, now, retiring=current.signing.certificate)
            return Step(switched, "the new CA signs from now on; the previous one stays in the bundle")
        return Step(current)
    if _left(current.signing.certificate, now) < policy.ca_validity * RENEW_WHEN_LEFT:
        return Step(
            replace(current, incoming=new_ca(), changed_at=now),
            "a new CA is published next to the current one",
        )
    return Step(current)


def may_retire(
    authorities: Authorities, serving: x509.Certificate | None, now: dt.datetime, policy: RenewalPolicy
) -> bool:
    """Whether the retiring CA may leave the bundle: it has expired (nothing it signed verifies), or
    the serving certificate is signed by the current CA and has been out for ``grace`` (every replica
    serves it) and the switch itself is ``grace`` old."""
    retiring = authorities.retiring
    if retiring is None:
        return False
    if now >= retiring.not_valid_after_utc:
        return True
    if serving is None or not signed_by(serving, authorities.signing.certificate):
        return False
    return now - authorities.changed_at >= policy.grace and now - issued_at(serving) >= policy.grace


def serving_renewal(
    serving: x509.Certificate | None,
    authorities: Authorities,
    names: Sequence[x509.GeneralName],
    now: dt.datetime,
    policy: RenewalPolicy,
) -> str | None:
    """Why a new serving certificate is due now, or None."""
    if serving is None:
        return "no serving certificate yet"
    signer = authorities.signing.certificate
    if not signed_by(serving, signer):
        return "the serving certificate is not signed by the current CA"
    try:
        sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the serving certificate has no subjectAltName"
    if set(sans) != set(names):
        return "the serving certificate's names are not the Service's"
    if not _valid_at(serving, now):
        return "the serving certificate is not valid now"
    left = _left(serving, now)
    if left >= policy.serving_validity * RENEW_WHEN_LEFT:
        return None
    # A new certificate ends at most at its CA's expiry: renew only when that gains more than a grace;
    # otherwise the CA rollover (already under way) brings the next one.
    fresh_end = min(now + policy.serving_validity, signer.not_valid_after_utc)
    if fresh_end - serving.not_valid_after_utc > policy.grace:
        return f"the serving certificate has {left.total_seconds():.0f}s left"
    return None
