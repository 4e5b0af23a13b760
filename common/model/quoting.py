"""Quoting a value of user input in a message: bounded, with its size stated.

Denials, events and conditions name the value they refuse (design.md "Engineering conventions"), but
an annotation may hold 256 KiB and a review body several MiB: a message that echoed it whole would
turn one hostile object into a 200 KiB denial, a 200 KiB Event and a 200 KiB condition on every pod
of its queue. :func:`quote` is the one way a message quotes such a value (``InvalidValue`` and
friends, every ``invalid value ...`` text): the value's ``repr`` when it is short, else its first
:data:`~common.model.limits.MAX_QUOTED_CHARS` characters followed by its size.

It never raises: Python's ``repr`` of an integer beyond 4,300 digits is a ``ValueError`` and of a
structure nested past the recursion limit a ``RecursionError``; here the first is shown by its
leading digits and digit count, the second only a few levels deep (``reprlib``, whose containers
are bounded by count and level).
"""

from __future__ import annotations

import reprlib
from itertools import islice
from typing import Any, Final

from gpuq_k8s.common.model.limits import MAX_QUOTED_CHARS

# log10(2): an integer of b bits has floor((b - 1) * LOG10_2) + 1 or one more digits.
_LOG10_2: Final = 0.30102999566398120
_LEADING_DIGITS: Final = 20


def quote(value: Any) -> str:
    """``value`` as a message quotes it: ``repr(value)`` when that is at most
    :data:`~common.model.limits.MAX_QUOTED_CHARS` characters, else a cut with the size stated:
    ``'aaaa...'... (204800 characters)``, ``12345...(5001 digits)``, ``{'a': 1, ...}... (5000 entries)``."""
    try:
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return repr(value)
        if isinstance(value, int):
            return _int_text(value)
        if isinstance(value, str):
            return _text(value, "characters")
        if isinstance(value, bytes | bytearray):
            return _text(bytes(value), "bytes")
        text = _REPR.repr(value)
        count = len(value) if hasattr(value, "__len__") else None
        if len(text) <= MAX_QUOTED_CHARS and (count is None or count <= _REPR.maxlist):
            return text
        size = (
            f"a {type(value).__name__}"
            if count is None
            else f"{count} {'entry' if count == 1 else 'entries'}"
        )
        return f"{text[:MAX_QUOTED_CHARS]}... ({size})"
    except Exception:
        return f"<a {type(value).__name__}>"


def cut(text: str) -> str:
    """``text`` unquoted, as a message names something a user chose (a PodGroup or Queue named by
    an annotation): whole when at most :data:`~common.model.limits.MAX_QUOTED_CHARS` characters, else
    its start and its size (``xxxx... (5000 characters)``)."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return f"{text[:MAX_QUOTED_CHARS]}... ({len(text)} characters)"


def digit_count(number: int) -> int:
    """How many decimal digits ``abs(number)`` has, without converting it to text (which Python
    refuses beyond 4,300 digits)."""
    magnitude = abs(number)
    if magnitude < 10:
        return 1
    digits = int((magnitude.bit_length() - 1) * _LOG10_2)  # 10**digits <= magnitude
    while 10 ** (digits + 1) <= magnitude:
        digits += 1
    return digits + 1


def _int_text(number: int) -> str:
    if number.bit_length() < 600:  # at most 181 digits: repr is short and cheap
        text = repr(number)
        if len(text) <= MAX_QUOTED_CHARS:
            return text
    digits = digit_count(number)
    if digits <= MAX_QUOTED_CHARS:
        return repr(number)
    lead = abs(number) // 10 ** (digits - _LEADING_DIGITS)
    sign = "-" if number < 0 else ""
    return f"{sign}{lead}... ({digits} digits)"


def _text(text: str | bytes, unit: str) -> str:
    head = repr(text[:MAX_QUOTED_CHARS])
    if len(text) <= MAX_QUOTED_CHARS and len(head) <= MAX_QUOTED_CHARS + 3:
        return head
    # A repr escapes non-printable characters (up to ten characters each): cut until it fits.
    cut = MAX_QUOTED_CHARS
    while len(head) > MAX_QUOTED_CHARS + 3:
        cut //= 2
        head = repr(text[:cut])
    return f"{head}... ({len(text)} {unit})"


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` with gpuq's bounds: mappings in their own order (``repr`` does not sort keys
    either), strings and integers cut as :func:`quote` cuts them."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 16
        self.maxdeque = self.maxarray = 16
        self.maxstring = self.maxlong = self.maxother = MAX_QUOTED_CHARS

    def repr_int(self, x: int, level: int) -> str:
        return _int_text(x)

    def repr_str(self, x: str, level: int) -> str:
        return _text(x, "characters")

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        shown = islice(x.items(), self.maxdict)
        pieces = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}" for k, v in shown]
        if len(x) > self.maxdict:
            pieces.append("...")
        return "{" + ", ".join(pieces) + "}"


_REPR: Final = _BoundedRepr()
