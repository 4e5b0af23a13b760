"""The card annotations holding amounts: ``volcano.sh/card.quota`` on a Queue and ``volcano.sh/card.request``
on a PodGroup, JSON objects of card type (or alternatives) to a count of cards (capacity-card "Queue
Annotations for Card Quotas", "Job Annotations for Card Requests").

Strict: duplicates, floats, negatives, booleans and anything but an object are refused naming the key,
and so is JSON past gpuq's limits (:mod:`common.model.json_text`: a 5,000-digit count, deep nesting).
"""

from __future__ import annotations

from typing import Any, Final

from gpuq_k8s.common.model.annotations import CARD_QUOTA, CARD_REQUEST
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT, EXPECTED_CARD_COUNT, MAX_CARD_COUNT
from gpuq_k8s.common.model.cards.names import card_key, split_card_names
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.json_text import load_json_text
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.resources import Resources


class _Pairs(list[tuple[str, Any]]):
    """A JSON object's members in order, duplicates kept (json.loads would drop all but the last)."""


_JSON_TYPES: Final[dict[type, str]] = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _load_object(text: Any, key: str, where: str, expected: str) -> list[tuple[str, Any]]:
    if not isinstance(text, str):
        raise InvalidAnnotation(key, text, expected, where)

    data = load_json_text(text, key, expected, where, object_pairs_hook=_Pairs)
    if not isinstance(data, _Pairs):
        kind = _JSON_TYPES.get(type(data), type(data).__name__)
        raise InvalidAnnotation(key, text, f"{expected}, not a JSON {kind}", where)
    seen: set[str] = set()
    for name, _ in data:
        if name in seen:
            # json.loads would keep the last value silently; the user meant one of them.
            raise InvalidAnnotation(key, text, f"{expected} ({quote(name)} appears twice)", where)
        seen.add(name)
    return data


def _card_count(value: Any, name: str, key: str, where: str) -> int:
    # bool is an int in Python and 1.0 is a float in JSON: neither is a card count.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CARD_COUNT:
        raise InvalidAnnotation(f"{key}[{name}]", value, EXPECTED_CARD_COUNT, where)
    return value * CARD_UNIT


def parse_card_quota(text: Any, where: str = "") -> Resources:
    """``volcano.sh/card.quota`` on a Queue -> card type -> quota in milli-units.

    capacity-card.md "Queue Annotations for Card Quotas": a JSON object of single card type names to
    non-negative integers (``{"NVIDIA-A100": 10}``). A quota is per concrete card type, so an ``A|B``
    key is refused, as are floats, negatives, strings, repeated keys and anything but an object.
    """
    expected = 'a JSON object of card type name to non-negative integer, such as {"NVIDIA-A100": 4}'
    quota: dict[str, int] = {}
    for name, value in _load_object(text, CARD_QUOTA, where, expected):
        names = split_card_names(name, where, f"{CARD_QUOTA} key")
        if len(names) > 1:
            raise InvalidAnnotation(
                f"{CARD_QUOTA} key", name, "a single card type name (quota is per card type, not A|B)", where
            )
        quota[name] = _card_count(value, name, CARD_QUOTA, where)
    return Resources(quota)


def parse_card_request(text: Any, where: str = "") -> Resources:
    """``volcano.sh/card.request`` on a PodGroup -> card key -> requested cards in milli-units.

    capacity-card.md "Job Annotations for Card Requests": keys are a card type or ``A|B``
    alternatives (job mode sums the alternatives' quotas). Keys come back canonical
    (:func:`card_key`); two keys naming the same set of alternatives are refused as ambiguous.
    """
    expected = (
        'a JSON object of card type (or A|B alternatives) to non-negative integer, such as {"NVIDIA-A100": 8}'
    )
    request: dict[str, int] = {}
    sets: dict[frozenset[str], str] = {}
    for name, value in _load_object(text, CARD_REQUEST, where, expected):
        names = split_card_names(name, where, f"{CARD_REQUEST} key")
        as_set = frozenset(names)
        if as_set in sets:
            same = f"each set of card types once ({quote(sets[as_set])} names the same)"
            raise InvalidAnnotation(f"{CARD_REQUEST} key", name, same, where)
        sets[as_set] = name
        request[card_key(names)] = _card_count(value, name, CARD_REQUEST, where)
    return Resources(request)
