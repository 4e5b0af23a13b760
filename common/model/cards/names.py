"""Card type names and ``A|B|C`` alternatives (capacity-card "Multi-Card Requests").

``volcano.sh/card.name`` on a pod lists the card types it accepts, left = preferred. Parsing is strict
(the webhook denies what it rejects); :func:`normalise_card_names` is the webhook's fix for spaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from gpuq_k8s.common.model.annotations import CARD_NAME
from gpuq_k8s.common.model.cards.card_type import CARD_NAME_RE, EXPECTED_CARD_NAMES, MULTI_CARD_SEPARATOR
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.limits import MAX_NAME_CHARS, MAX_NAMES_CHARS
from gpuq_k8s.common.model.quoting import quote


def parse_card_names(text: Any, where: str = "", field: str = CARD_NAME) -> tuple[str, ...]:
    """Split ``A|B|C`` into its alternatives, left = preferred (capacity-card.md "Multi-Card Requests").

    Strict: an empty alternative (``A||B``, ``|A``, ``""``), a repeated one (``A|A``), whitespace
    anywhere, or a name or list past :mod:`common.model.limits` (253 and 1,024 characters) raise
    :class:`InvalidAnnotation` naming ``where`` and ``field``. The webhook first passes user input
    through :func:`normalise_card_names`, so ``A | B`` is fixed at admission rather than
    being a scheduling-time surprise.
    """
    if not isinstance(text, str):
        raise InvalidAnnotation(field, text, EXPECTED_CARD_NAMES, where)
    return split_card_names(text, where, field)


def split_card_names(text: str, where: str, field: str) -> tuple[str, ...]:
    names = _split_cached(text)
    if isinstance(names, str):
        raise InvalidAnnotation(field, text, f"{EXPECTED_CARD_NAMES}; {names}", where)
    return names


@lru_cache(maxsize=4096)
def _split_cached(text: str) -> tuple[str, ...] | str:
    # Memoised because the scheduler asks for the same few `card.name` values for every pod of a
    # job; returns the problem as a string so the cache never holds an exception with a location.
    if text == "":
        return "the value is empty"
    if len(text) > MAX_NAMES_CHARS:
        return f"the value has {len(text)} characters, more than {MAX_NAMES_CHARS}"
    parts = text.split(MULTI_CARD_SEPARATOR)
    seen: set[str] = set()
    for position, part in enumerate(parts, start=1):
        if part == "":
            return f"alternative {position} is empty"
        if len(part) > MAX_NAME_CHARS:
            return f"alternative {position} has {len(part)} characters, more than {MAX_NAME_CHARS}"
        if not CARD_NAME_RE.match(part):
            return f"alternative {position} ({quote(part)}) contains whitespace or a non-printable character"
        if part in seen:
            return f"{quote(part)} is repeated"
        seen.add(part)
    return tuple(parts)


def normalise_card_names(text: str) -> str:
    """``" A | B "`` -> ``"A|B"``: spaces around names dropped, nothing else changed.

    The webhook's mutation for ``volcano.sh/card.name``; it does not repair empty or repeated
    alternatives, which :func:`parse_card_names` then rejects with a precise message.
    """
    return MULTI_CARD_SEPARATOR.join(part.strip() for part in text.strip().split(MULTI_CARD_SEPARATOR))


def card_key(names: Sequence[str]) -> str:
    """The ledger and request key for a set of alternatives (``("A", "B")`` -> ``"A|B"``)."""
    return MULTI_CARD_SEPARATOR.join(names)


def is_composite(key: str) -> bool:
    return MULTI_CARD_SEPARATOR in key


def key_alternatives(key: str) -> tuple[str, ...]:
    """The alternatives of a key built by :func:`card_key` (``"A|B"`` -> ``("A", "B")``)."""
    return tuple(key.split(MULTI_CARD_SEPARATOR))
