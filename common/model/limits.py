"""Size limits on what gpuq reads from a cluster or a client, stated once (design.md Semantics 3).

Every reader of user input (quantities, the JSON of the card annotations, node labels, custom
resource bodies, admission reviews) refuses a value past these bounds with its own
:class:`~common.model.errors.InvalidValue`, naming the field, instead of letting one of Python's own
limits fire deep inside a parser (``int`` <-> ``str`` beyond 4,300 digits is a ``ValueError``, JSON
nested past the recursion limit a ``RecursionError``), and instead of letting one object cost
unbounded time, memory or message size. A value that cannot be read then meets the documented
fallback of its rule (Semantics 3), like any other malformed value.

The bounds are far beyond any real value and far inside what Python handles cheaply:

* :data:`MAX_DIGITS`: a number gpuq reads (a JSON integer, a quantity's digits, a count in a label)
  has at most 64 digits. Every amount gpuq keeps fits in int64 (19 digits, ``quantity.MAX_UNITS``),
  so a 64-digit number is refused by its range check anyway; this bound only keeps the conversion
  itself (quadratic in the digits, and a ``ValueError`` beyond 4,300) from ever running.
* :data:`MAX_EXPONENT`: a quantity's exponent (``1e3``) is within +-30 (no amount needs more, and
  ``1e999999999`` would otherwise allocate a billion-digit integer).
* :data:`MAX_JSON_DEPTH`: JSON text in an annotation nests at most 32 deep (the annotations are
  flat objects; Python's own limit is a ``RecursionError`` near 1,000).
* :data:`MAX_TEXT_CHARS`: a text gpuq parses (one annotation value) has at most 256 Ki characters,
  the apiserver's limit on all the annotations of one object together.
* :data:`MAX_NAME_CHARS`: a card type name has at most 253 characters (a DNS subdomain's length;
  the longest name a node's labels can make, a 63-character product with an MPS or MIG suffix, is
  far shorter), and :data:`MAX_NAMES_CHARS`: a list of ``A|B|C`` alternatives at most 1,024 in all.
* :data:`MAX_QUOTED_CHARS`: a value quoted in a message (a denial, an event, a condition) shows at
  most 200 characters of its text, with its size stated (:func:`common.model.quoting.quote`).
"""

from __future__ import annotations

import re
from typing import Final

MAX_DIGITS: Final = 64
MAX_EXPONENT: Final = 30
MAX_JSON_DEPTH: Final = 32
MAX_TEXT_CHARS: Final = 256 * 1024
MAX_NAME_CHARS: Final = 253
MAX_NAMES_CHARS: Final = 1024
MAX_QUOTED_CHARS: Final = 200

_DECIMAL: Final = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def decimal(text: str) -> int | None:
    """``text`` as a non-negative integer when it is 1 to :data:`MAX_DIGITS` ASCII digits, else None
    (``str.isdigit`` also takes ``'²'``, which ``int`` refuses; a label's count is plain ASCII)."""
    return int(text) if _DECIMAL.fullmatch(text) else None
