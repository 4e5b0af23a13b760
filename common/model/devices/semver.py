"""Semantic versions as Kubernetes' CEL library and DRA version attributes read them.

``k8s.io/apiserver/pkg/cel/library/semverlib.go`` parses with ``github.com/blang/semver/v4``
(strict semver 2.0.0: ``MAJOR.MINOR.PATCH[-PRE][+BUILD]``, no leading zeros, no empty identifiers)
and, with ``semver(s, true)``, normalises first (drops a ``v`` prefix, fills a missing minor or
patch with 0, strips leading zeros). Comparison is semver precedence: build metadata is ignored,
a pre-release sorts before its release, numeric identifiers sort numerically and before
alphanumeric ones. gpuq keeps its own small parser rather than a PyPI semver package because the
exact acceptance rules (and that normalisation) are blang's, and a differing library would accept
or order some version differently from kube-scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final

_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")


class SemverError(ValueError):
    """A string that is not a semantic version; the message says why, as blang/semver does."""


@dataclass(frozen=True, slots=True)
class Semver:
    """A parsed version. ``pre`` holds the pre-release identifiers (``int`` when numeric)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def precedence_key(self) -> str:
        """The version without build metadata: equal keys are equal versions (build is ignored)."""
        return str(Semver(self.major, self.minor, self.patch, self.pre))


def _number(text: str, what: str) -> int:
    if not text or not set(text) <= _NUMBERS:
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    value = int(text)
    if value >= 2**64:
        raise SemverError(f"{what} number {text!r} out of range")
    return value


@lru_cache(maxsize=4096)
def parse_semver(text: str, normalize: bool = False) -> Semver:
    """``text`` as a version; :class:`SemverError` when it is not one (see the module doc)."""
    if normalize:
        text = _normalize(text)
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: tuple[str, ...] = ()
    if "+" in rest:
        rest, _, build_text = rest.partition("+")
        build = tuple(build_text.split("."))
        for item in build:
            if not item:
                raise SemverError("Build meta data is empty")
            if not set(item) <= _ALPHANUM:
                raise SemverError(f"Invalid character(s) found in build meta data {item!r}")
    pre: list[int | str] = []
    if "-" in rest:
        rest, _, pre_text = rest.partition("-")
        for item in pre_text.split("."):
            if not item:
                raise SemverError("Prerelease is empty")
            if set(item) <= _NUMBERS:
                if len(item) > 1 and item[0] == "0":
                    raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {item!r}")
                pre.append(int(item))
            elif set(item) <= _ALPHANUM:
                pre.append(item)
            else:
                raise SemverError(f"Invalid character(s) found in prerelease {item!r}")
    patch = _number(rest, "patch")
    return Semver(major, minor, patch, tuple(pre), build)


def _normalize(text: str) -> str:
    # semverlib.go normalizeAndParse: drop "v", strip leading zeros per part, fill up to three parts.
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or not stripped[0].isdigit():
                stripped = "0" + stripped
            parts[i] = stripped
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize)
    except SemverError:
        return False
    return True


def compare_semver(a: Semver, b: Semver) -> int:
    """-1, 0 or 1 by semver precedence (build metadata ignored)."""
    left, right = (a.major, a.minor, a.patch), (b.major, b.minor, b.patch)
    if left != right:
        return 1 if left > right else -1
    if not a.pre or not b.pre:
        return (not a.pre) - (not b.pre)
    for x, y in zip(a.pre, b.pre, strict=False):
        if x == y:
            continue
        if isinstance(x, int) != isinstance(y, int):
            return -1 if isinstance(x, int) else 1  # numeric identifiers sort first
        return 1 if x > y else -1  # type: ignore[operator]  # same type by the check above
    return (len(a.pre) > len(b.pre)) - (len(a.pre) < len(b.pre))
