"""Built-in kinds (Pod, Node, Deployment, ...) checked field by field, as kubectl's strict field
validation and the apiserver's decoding check them.

``gpuq simulate`` accepts exactly what a cluster can hold (design.md "gpuq simulate"): a Pod with
``spec.schedulerNmae`` is refused by ``kubectl apply`` (``strict decoding error: unknown field
"spec.schedulerNmae"``), so it is an input error here too, naming the object and the field, and so is a
value of the wrong JSON type (a list where a map belongs, a string where an integer does).

The field tree is the apiserver's own: ``core_schema.json``, compacted from the OpenAPI v3 documents the
e2e control plane's kube-apiserver (the version the harness pins) serves, by ``python -m
tests.e2e.core_schema``; ``tests/e2e/test_core_schema.py`` fails when it no longer matches. The
``kubernetes`` client packages carry the same field lists in their generated models, but for the
release they were generated from, which lags behind the apiserver (a field newer than the package
would be refused) and would make a client library a dependency of the check. Required fields, enums
and value formats are the apiserver's validation, not its decoding; Pods and Nodes keep their own
checks of those the scheduler reads (quantities, affinity, a known PriorityClass).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any, Final

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.scheduler.simulate.schema import Problem

SCHEMA_FILE: Final = Path(__file__).resolve().parent / "core_schema.json"

_INT32: Final = (-(2**31), 2**31 - 1)
_EXPECTED: Final = {
    "string": "a string",
    "integer": "an integer",
    "int32": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "quantity": "a quantity such as 500m or 1Gi",
    "int-or-string": "an integer or a string",
    "object": "a mapping",
}


@dataclass(frozen=True, slots=True)
class CoreSchema:
    """The compact field tree: ``kinds`` maps ``apiVersion/Kind`` to a type expression, ``types`` an
    object type's name to its fields' type expressions (the format of ``tests/e2e/core_schema.py``)."""

    version: str
    kinds: Mapping[str, str]
    types: Mapping[str, Mapping[str, str]]

    def kind_type(self, api_version: str, kind: str) -> str | None:
        """The type expression of ``kind`` in ``api_version``; None when the schema does not hold it."""
        return self.kinds.get(f"{api_version}/{kind}")

    def versions(self, kind: str) -> list[str]:
        """The apiVersions the schema holds ``kind`` in (``apps/v1``), for an error's expectation."""
        return _versions(self.kinds, kind)

    def check(self, obj: Mapping[str, Any], api_version: str) -> list[Problem] | None:
        """Every problem of ``obj`` against the type of its kind in ``api_version``; None when the
        schema has no such kind."""
        expression = self.kind_type(api_version, str(obj.get("kind")))
        if expression is None:
            return None
        return list(self._check(expression, obj, ""))

    def check_value(self, expression: str, value: Any, path: str) -> list[Problem]:
        """Every problem of ``value`` (at ``path``) against a type expression
        (``@api.core.v1.PodTemplateSpec``)."""
        return list(self._check(expression, value, path))

    def _check(self, expression: str, value: Any, path: str) -> Iterator[Problem]:
        if value is None:
            return  # JSON null decodes as the field's zero value: the apiserver accepts it
        head = expression[0]
        if head == "@":
            if not isinstance(value, Mapping):
                yield _bad(path, value, "a mapping")
                return
            fields = self.types[expression[1:]]
            for raw_key, item in value.items():
                key = str(raw_key)
                at = f"{path}.{key}" if path else key
                field = fields.get(key)
                if field is None:
                    yield Problem(at, "unknown field")
                else:
                    yield from self._check(field, item, at)
        elif head == "[":
            if not isinstance(value, list):
                yield _bad(path, value, "a list")
                return
            inner = expression[1:-1]
            for index, item in enumerate(value):
                yield from self._check(inner, item, f"{path}[{index}]")
        elif head == "{":
            if not isinstance(value, Mapping):
                yield _bad(path, value, "a mapping")
                return
            inner = expression[1:-1]
            for key, item in value.items():
                yield from self._check(inner, item, f"{path}[{key}]")
        elif not _scalar_ok(expression, value):
            yield _bad(path, value, _EXPECTED.get(expression, expression))


def _versions(kinds: Mapping[str, str], kind: str) -> list[str]:
    return sorted(key.rpartition("/")[0] for key in kinds if key.rpartition("/")[2] == kind)


def _bad(path: str, value: Any, expected: str) -> Problem:
    return Problem(path, f"invalid value {value!r}: expected {expected}")


def _scalar_ok(expression: str, value: Any) -> bool:
    if expression == "string":
        # An unquoted YAML timestamp is a date to PyYAML and a string to kubectl's YAML reader.
        return isinstance(value, str | date)
    if expression == "object":
        return isinstance(value, Mapping)
    if isinstance(value, bool):
        return expression == "boolean"
    if expression == "boolean":
        return False
    number = isinstance(value, int | float)
    if expression in ("integer", "int32"):
        # JSON has one number type: 2.0 decodes into an integer field, 2.5 does not.
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return whole and (expression == "integer" or _INT32[0] <= value <= _INT32[1])
    if expression == "number":
        return number
    if expression == "quantity":
        return number or isinstance(value, str)
    if expression == "int-or-string":
        return isinstance(value, int | str)
    return True  # a type expression this reader does not know: the file is newer; nothing to check


@cache
def load_core_schema(path: Path = SCHEMA_FILE) -> CoreSchema:
    """The shipped field tree; raises :class:`GpuqError` naming the file when it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return CoreSchema(str(data["version"]), data["kinds"], data["types"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise GpuqError(f"{path}: cannot read the built-in kinds' schema: {err}") from None
