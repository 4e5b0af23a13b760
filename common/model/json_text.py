"""JSON text inside an annotation (``volcano.sh/card.quota``, ``volcano.sh/card.request``,
``volcano.sh/resource-strategy-weight``), read within the limits of :mod:`common.model.limits`.

The json module alone is not total on such text: an integer of more than 4,300 digits raises
``ValueError`` (Python's limit on int <-> str conversion), nesting past the recursion limit a
``RecursionError``, and ``NaN``/``Infinity`` (not JSON) are accepted. :func:`load_json_text` refuses
all of these, and text or nesting past the limits, as one :class:`InvalidValue` (of the caller's
class) naming the field: ``... (invalid JSON: an integer of more than 64 digits)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final

from gpuq_k8s.common.model.errors import InvalidAnnotation, InvalidValue
from gpuq_k8s.common.model.limits import MAX_DIGITS, MAX_JSON_DEPTH, MAX_TEXT_CHARS


class _Refused(Exception):
    """Raised from the decoder's hooks; turned into the caller's InvalidValue below."""


def _integer(digits: str) -> int:
    if len(digits) - digits.startswith("-") > MAX_DIGITS:
        raise _Refused(f"an integer of more than {MAX_DIGITS} digits")
    return int(digits)


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


_DECODER: Final = json.JSONDecoder(parse_int=_integer, parse_constant=_constant)


def load_json_text(
    text: str,
    field: str,
    expected: str,
    where: str = "",
    *,
    error: type[InvalidValue] = InvalidAnnotation,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """``text`` decoded as JSON; anything else, or past the limits, raises ``error`` naming
    ``field`` and ``where`` with ``expected`` and the reason (``(invalid JSON: ...)``)."""
    if len(text) > MAX_TEXT_CHARS:
        raise error(field, text, f"{expected} (at most {MAX_TEXT_CHARS} characters)", where)
    decoder = _DECODER
    if object_pairs_hook is not None:
        decoder = json.JSONDecoder(
            parse_int=_integer, parse_constant=_constant, object_pairs_hook=object_pairs_hook
        )
    try:
        data = decoder.decode(text)
    except json.JSONDecodeError as err:
        reason = err.msg
    except _Refused as err:
        reason = str(err)
    except RecursionError:
        reason = f"nested more than {MAX_JSON_DEPTH} deep"
    else:
        if _depth_over(data, MAX_JSON_DEPTH):
            reason = f"nested more than {MAX_JSON_DEPTH} deep"
        else:
            return data
    raise error(field, text, f"{expected} (invalid JSON: {reason})", where) from None


def _depth_over(data: Any, limit: int) -> bool:
    """Whether ``data`` nests arrays and objects more than ``limit`` deep (iteratively: a deep
    value must not exhaust the stack here either)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            # A list of pairs (object_pairs_hook) nests its values one level further, like a dict.
            children = value
        elif isinstance(value, tuple):
            children = value[1:]
            depth -= 1  # a (key, value) pair of a hook's list is not a level of its own
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
