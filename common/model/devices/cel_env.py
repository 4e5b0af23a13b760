"""DeviceClass and request selectors: CEL with the Kubernetes DRA environment, compiled once per expression.

The environment is ``k8s.io/dynamic-resource-allocation/cel`` (v0.36.4, consumable capacity on): one
variable ``device`` with ``driver``, ``allowMultipleAllocations``, ``attributes[domain][id]`` and
``capacity[domain][id]`` (an attribute or capacity written without a domain is in the driver's
domain), ``cel.bind``, the strings and optional extensions, and Kubernetes' ``quantity`` and
``semver`` libraries: ``quantity()``, ``isQuantity()``, ``sign()``, ``.isGreaterThan()``,
``.isLessThan()``, ``.compareTo()``, ``.asApproximateFloat()``, ``.asInteger()``, ``.isInteger()``,
``.add()``, ``.sub()``; ``semver()`` (and ``semver(s, true)``, normalising), ``isSemver()``,
``.major()``, ``.minor()``, ``.patch()``, ``.isGreaterThan()``, ``.isLessThan()``, ``.compareTo()``.

**Library.** ``cel-expr-python`` (Google's cel-cpp behind a Python binding): measured on this
project's machine (``tests/bench/bench_cel.py``) it evaluates DRA selectors two orders of magnitude
faster than the pure-Python ``cel-python`` (about 1,800/s), which would make a cold start over
40,000 devices take most of a minute. Its one gap, opaque custom types, is closed with protobuf:
``kubernetes.Quantity`` and ``kubernetes.Semver`` are message types of a descriptor pool built
here, so the type checker tells them apart exactly as Kubernetes' environment does
(``quantity("1") == "1"`` does not compile) and ``==`` compares the canonical value (``1Gi`` equals
``1024Mi``). The member functions that quantities and semvers share (``compareTo``...) are declared
once per type for the checker and dispatched on the value in one implementation, because the
runtime keys overloads by kind and both types are messages.

**Where gpuq differs** (docs/design.md "DRA devices"):

* the Kubernetes base-environment libraries a device selector has no use for (URLs, IPs, CIDRs,
  ``format``, authorizer, the lists and sets extensions, regex ``find``) are absent: an expression
  using them does not compile, with the checker's message naming the function;
* no runtime cost limit (cel-cpp's Python binding exposes none); the apiserver already refused
  expressions whose estimated cost is over the limit when the class or claim was created;
* ``device.attributes[d]`` and ``device.capacity[d]`` for a domain ``d`` the device lacks are an
  empty map, as in Kubernetes, for every domain the expression writes as a literal (the form every
  selector uses); a domain computed at run time is a missing key (a runtime error).

A runtime error (an attribute the device lacks, a failed conversion) is a :class:`SelectorResult`
with the error text: the allocator then treats the device as not matching and reports the error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gpuq_k8s.common.model.devices.semver import SemverError, compare_semver, is_semver, parse_semver
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.quantity import parse_quantity

_INT64: Final = 2**63


def _message_types() -> tuple[Any, Any, Any]:
    fdp = descriptor_pb2.FileDescriptorProto(name="gpuq/dra_cel.proto", package="kubernetes", syntax="proto3")
    for name in ("Quantity", "Semver"):
        message = fdp.message_type.add(name=name)
        message.field.add(name="value", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    quantity = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))
    semver = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver"))
    return pool, quantity, semver


_POOL, _QUANTITY, _SEMVER = _message_types()
QUANTITY_TYPE: Final = cel.Type("kubernetes.Quantity")
SEMVER_TYPE: Final = cel.Type("kubernetes.Semver")


# --- values ------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def quantity_value(amount: Fraction) -> Any:
    """A ``kubernetes.Quantity`` CEL value; the field holds the exact canonical fraction."""
    return _QUANTITY(value=str(amount))


@lru_cache(maxsize=4096)
def semver_value(text: str) -> Any:
    """A ``kubernetes.Semver`` CEL value of a valid version (its precedence key: build ignored)."""
    return _SEMVER(value=parse_semver(text).precedence_key)


@lru_cache(maxsize=8192)
def _fraction(text: str) -> Fraction:
    return Fraction(text)


def _q(value: Any) -> Fraction:
    if type(value) is not _QUANTITY:
        raise TypeError("no such overload: expected a quantity")
    return _fraction(value.value)


def _new_quantity(amount: Fraction) -> Any:
    return _QUANTITY(value=str(amount))


# --- the library functions (Python implementations called from cel-cpp) -----------------------


def _to_quantity(text: str) -> Any:
    try:
        return quantity_value(parse_quantity(text, "quantity"))
    except InvalidValue as err:
        raise ValueError(
            f"quantities must match the regular expression (got {text!r}): {err.expected}"
        ) from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text, "quantity")
    except InvalidValue:
        return False
    return True


def _sign(q: Any) -> int:
    value = _q(q)
    return (value > 0) - (value < 0)


def _compare(a: Any, b: Any) -> int:
    if type(a) is _QUANTITY and type(b) is _QUANTITY:
        x, y = _fraction(a.value), _fraction(b.value)
        return (x > y) - (x < y)
    if type(a) is _SEMVER and type(b) is _SEMVER:
        return compare_semver(parse_semver(a.value), parse_semver(b.value))
    raise TypeError("no such overload: compare a quantity with a quantity or a semver with a semver")


def _greater(a: Any, b: Any) -> bool:
    return _compare(a, b) == 1


def _less(a: Any, b: Any) -> bool:
    return _compare(a, b) == -1


def _as_float(q: Any) -> float:
    return float(_q(q))


def _as_integer(q: Any) -> int:
    value = _q(q)
    if value.denominator != 1 or not -_INT64 <= value < _INT64:
        raise ValueError("cannot convert value to integer")
    return int(value)


def _is_integer(q: Any) -> bool:
    value = _q(q)
    return value.denominator == 1 and -_INT64 <= value < _INT64


def _add(a: Any, b: Any) -> Any:
    return _new_quantity(_q(a) + (b if isinstance(b, int) else _q(b)))


def _sub(a: Any, b: Any) -> Any:
    return _new_quantity(_q(a) - (b if isinstance(b, int) else _q(b)))


def _to_semver(text: str, normalize: bool = False) -> Any:
    try:
        version = parse_semver(text, normalize)
    except SemverError as err:
        raise ValueError(str(err)) from None
    return _SEMVER(value=version.precedence_key)


def _semver_part(index: int) -> Any:
    def part(s: Any) -> int:
        if type(s) is not _SEMVER:
            raise TypeError("no such overload: expected a semver")
        version = parse_semver(s.value)
        return (version.major, version.minor, version.patch)[index]

    return part


def _functions() -> list[Any]:
    q, s, i, b, d, t = (
        QUANTITY_TYPE,
        SEMVER_TYPE,
        cel.Type.INT,
        cel.Type.BOOL,
        cel.Type.DOUBLE,
        cel.Type.STRING,
    )

    def fn(name: str, *overloads: Any) -> Any:
        return cel.FunctionDecl(name, list(overloads))

    def ov(oid: str, ret: Any, params: list[Any], impl: Any = None, member: bool = False) -> Any:
        if impl is None:  # checked like the others, served by the first overload's implementation
            return cel.Overload(oid, return_type=ret, parameters=params, is_member=member)
        return cel.Overload(oid, return_type=ret, parameters=params, is_member=member, impl=impl)

    return [
        fn("quantity", ov("string_to_quantity", q, [t], _to_quantity)),
        fn("isQuantity", ov("is_quantity_string", b, [t], _is_quantity)),
        fn("sign", ov("quantity_sign", i, [q], _sign)),
        fn("asApproximateFloat", ov("quantity_get_float", d, [q], _as_float, True)),
        fn("asInteger", ov("quantity_get_int", i, [q], _as_integer, True)),
        fn("isInteger", ov("quantity_is_integer", b, [q], _is_integer, True)),
        fn("add", ov("quantity_add", q, [q, q], _add, True), ov("quantity_add_int", q, [q, i], _add, True)),
        fn("sub", ov("quantity_sub", q, [q, q], _sub, True), ov("quantity_sub_int", q, [q, i], _sub, True)),
        fn(
            "semver",
            ov("string_to_semver", s, [t], _to_semver),
            ov("string_bool_to_semver", s, [t, b], _to_semver),
        ),
        fn(
            "isSemver",
            ov("is_semver_string", b, [t], is_semver),
            ov("is_semver_string_bool", b, [t, b], is_semver),
        ),
        fn("major", ov("semver_major", i, [s], _semver_part(0), True)),
        fn("minor", ov("semver_minor", i, [s], _semver_part(1), True)),
        fn("patch", ov("semver_patch", i, [s], _semver_part(2), True)),
        fn(
            "compareTo",
            ov("quantity_compare_to", i, [q, q], _compare, True),
            ov("semver_compare_to", i, [s, s], None, True),
        ),
        fn(
            "isGreaterThan",
            ov("quantity_is_greater_than", b, [q, q], _greater, True),
            ov("semver_is_greater_than", b, [s, s], None, True),
        ),
        fn(
            "isLessThan",
            ov("quantity_is_less_than", b, [q, q], _less, True),
            ov("semver_is_less_than", b, [s, s], None, True),
        ),
    ]


_ENV: Final = cel.NewEnv(
    _POOL,
    variables={"device": cel.Type.DYN},
    extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional()],
    functions=_functions(),
)

# `device.attributes["d"]` / `device.capacity['d']` with a literal domain (also inside cel.bind).
_LITERAL_DOMAIN: Final = re.compile(
    r"""device\s*\.\s*(attributes|capacity)\s*\[\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')\s*\]"""
)
_ERROR_AT: Final = re.compile(r"ERROR: <input>:(\d+:\d+): ([^\n]*)")


# --- compiled selectors --------------------------------------------------------------------------


class SelectorCompileError(InvalidValue):
    """A selector that does not compile; located at the class or claim field that holds it."""


@dataclass(frozen=True, slots=True)
class SelectorResult:
    """One evaluation: ``matches``, or ``error`` (the device then does not match)."""

    matches: bool
    error: str | None = None


MATCH: Final = SelectorResult(True)
NO_MATCH: Final = SelectorResult(False)


class CompiledSelector:
    """One compiled expression. Evaluate with :meth:`evaluate` on a device's CEL data
    (:func:`device_data`)."""

    __slots__ = ("_program", "attribute_domains", "capacity_domains", "expression")

    def __init__(self, expression: str, program: Any) -> None:
        self.expression = expression
        self._program = program
        attributes: set[str] = set()
        capacity: set[str] = set()
        for kind, double, single in _LITERAL_DOMAIN.findall(expression):
            (attributes if kind == "attributes" else capacity).add(double or single)
        self.attribute_domains = frozenset(attributes)
        self.capacity_domains = frozenset(capacity)

    def evaluate(self, data: Mapping[str, Any]) -> SelectorResult:
        device = data
        attrs, caps = data["attributes"], data["capacity"]
        missing_a = [d for d in self.attribute_domains if d not in attrs]
        missing_c = [d for d in self.capacity_domains if d not in caps]
        if missing_a or missing_c:
            device = dict(data)
            device["attributes"] = {**attrs, **{d: {} for d in missing_a}}
            device["capacity"] = {**caps, **{d: {} for d in missing_c}}
        result = self._program.eval(data={"device": device})
        value = result.value()
        if value is True:
            return MATCH
        if value is False:
            return NO_MATCH
        kind = result.type().name()
        if kind == "ERROR":
            return SelectorResult(False, str(value))
        return SelectorResult(False, f"CEL result of type {kind.lower()} could not be converted to bool")


@lru_cache(maxsize=4096)
def _compile(expression: str) -> CompiledSelector | str:
    try:
        program = _ENV.compile(expression)
    except RuntimeError as err:
        text = str(err)
        found = _ERROR_AT.search(text)
        return f"compilation failed: {found.group(1)}: {found.group(2)}" if found else text.splitlines()[0]
    kind = program.return_type().name()
    if kind not in ("BOOL", "DYN"):
        return f"must evaluate to bool or the unknown type, not {kind.lower()}"
    return CompiledSelector(expression, program)


def compile_selector(expression: str, field: str, where: str) -> CompiledSelector:
    """The compiled selector (cached by expression); a :class:`SelectorCompileError` naming
    ``where`` (``DeviceClass/gpu``) and ``field`` (``spec.selectors[0].cel.expression``)."""
    compiled = _compile(expression)
    if isinstance(compiled, str):
        raise SelectorCompileError(field, expression, f"a CEL device selector ({compiled})", where)
    return compiled


# --- device data -----------------------------------------------------------------------------------


def split_qualified(name: str, driver: str) -> tuple[str, str]:
    """(domain, id) of an attribute or capacity name; no domain means the driver's."""
    domain, slash, ident = name.partition("/")
    return (domain, ident) if slash else (driver, name)


def device_data(
    driver: str,
    allow_multiple: bool,
    attributes: Mapping[str, Any],
    capacity: Mapping[str, Fraction],
) -> dict[str, Any]:
    """The value of ``device`` for one device. ``attributes`` holds bool, int, str or a version
    (:class:`VersionText`); ``capacity`` the exact amounts."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        domain, ident = split_qualified(name, driver)
        attrs.setdefault(domain, {})[ident] = semver_value(value) if isinstance(value, VersionText) else value
    caps: dict[str, dict[str, Any]] = {}
    for name, amount in capacity.items():
        domain, ident = split_qualified(name, driver)
        caps.setdefault(domain, {})[ident] = quantity_value(amount)
    return {
        "driver": driver,
        "allowMultipleAllocations": allow_multiple,
        "attributes": attrs,
        "capacity": caps,
    }


class VersionText(str):
    """A version attribute's text (a ``str`` for constraints, a ``kubernetes.Semver`` in CEL)."""

    __slots__ = ()
