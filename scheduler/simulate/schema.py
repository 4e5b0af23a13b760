"""Custom resources checked against their CRDs' OpenAPI v3 schemas, as the apiserver checks them.

``gpuq simulate`` accepts exactly what a cluster can hold (design.md "gpuq simulate"): a Queue,
PodGroup, ElasticQuota or GPUResourceQuota the apiserver would refuse is an input error (exit 2),
whatever gpuq's own rules say of it. This module is the apiserver's side of that: a structural-schema
validator read from the CRD files (``deploy/crds``), with unknown fields an error as kubectl's default
strict field validation makes them, and ``metadata`` held to the standard ObjectMeta fields.

It knows the keywords structural schemas use: ``type``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``, ``minimum``/``maximum`` (and their exclusive forms),
``minLength``/``maxLength``, ``pattern``, ``minItems``/``maxItems``, ``minProperties``/``maxProperties``,
``anyOf``/``allOf``/``oneOf``/``not``, ``nullable``, ``format`` (int32/int64 as bounds, date-time),
``x-kubernetes-int-or-string``, ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-list-type``
(set/map uniqueness). Defaults are not applied: the plugins read an absent field as the same default.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.quoting import quote

Schema = Mapping[str, Any]

# The shipped CRDs, installed with the package (pip, the image): copies of deploy/crds that
# deploy/render.py keeps identical (`python deploy/render.py --check` fails when they drift).
CRD_DIRECTORY: Final = Path(__file__).resolve().parent / "crds"

_INT_BOUNDS: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DATE_TIME: Final = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TYPE_NAMES: Final = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
}

_STRING_MAP: Final[Schema] = {"type": "object", "additionalProperties": {"type": "string"}}
_TIME: Final[Schema] = {"type": "string", "format": "date-time", "nullable": True}
# metav1.ObjectMeta as the apiserver decodes it (every field it knows; strict validation refuses others).
OBJECT_META: Final[Schema] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "selfLink": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": _TIME,
        "deletionTimestamp": _TIME,
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["apiVersion", "kind", "name", "uid"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "name": {"type": "string"},
                    "uid": {"type": "string"},
                    "controller": {"type": "boolean"},
                    "blockOwnerDeletion": {"type": "boolean"},
                },
            },
        },
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "managedFields": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One schema violation: the field path (``spec.total.requestz``) and what is wrong with it."""

    path: str
    message: str

    def render(self, ref: str) -> str:
        return f"{ref}: {self.path or '(root)'}: {self.message}"


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        # JSON has one number type: 2.0 decodes as an integer, as the apiserver's validator accepts it.
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float)
    return True  # an unknown type name: the CRD would not have been accepted; nothing to check


def _bad(path: str, value: Any, expected: str) -> Problem:
    return Problem(path, f"invalid value {quote(value)}: expected {expected}")


def validate(schema: Schema, value: Any, path: str = "") -> list[Problem]:
    """Every problem of ``value`` against the structural ``schema`` (empty when it is valid)."""
    return list(_validate(schema, value, path))


def _validate(schema: Schema, value: Any, path: str) -> Iterator[Problem]:
    if value is None:
        if not schema.get("nullable", False):
            yield _bad(path, value, _TYPE_NAMES.get(str(schema.get("type")), "a value") + " (not null)")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            yield _bad(path, value, "an integer or a string")
            return
    elif "type" in schema and not _type_ok(str(schema["type"]), value):
        yield _bad(path, value, _TYPE_NAMES.get(str(schema["type"]), str(schema["type"])))
        return
    yield from _values(schema, value, path)
    if isinstance(value, Mapping):
        yield from _object(schema, value, path)
    elif isinstance(value, list):
        yield from _array(schema, value, path)


def _values(schema: Schema, value: Any, path: str) -> Iterator[Problem]:
    """The value validations (enum, bounds, lengths, pattern, format, combinators)."""
    if "enum" in schema and value not in schema["enum"]:
        yield _bad(path, value, "one of " + ", ".join(str(v) for v in schema["enum"]))
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric:
        yield from _bounds(schema, value, path)
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            yield _bad(path, value, f"at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield _bad(path, value, f"at most {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            yield _bad(path, value, f"a string matching {schema['pattern']}")
        if schema.get("format") == "date-time" and _DATE_TIME.match(value) is None:
            yield _bad(path, value, "an RFC 3339 date-time such as 2024-01-01T00:00:00Z")
    for branch_key, needed in (("anyOf", "any"), ("oneOf", "one")):
        branches: Sequence[Schema] = schema.get(branch_key) or ()
        if not branches:
            continue
        passing = sum(1 for branch in branches if not validate(branch, value, path))
        if (needed == "any" and passing == 0) or (needed == "one" and passing != 1):
            word = "any" if needed == "any" else "exactly one"
            yield _bad(path, value, f"a value matching {word} of: {_describe(branches)}")
    for branch in schema.get("allOf") or ():
        yield from _validate(branch, value, path)
    if "not" in schema and not validate(schema["not"], value, path):
        yield _bad(path, value, f"a value not matching {_describe([schema['not']])}")


def _describe(branches: Sequence[Schema]) -> str:
    return ", ".join(
        _TYPE_NAMES.get(str(b.get("type")), "a value")
        + (f" matching {b['pattern']}" if "pattern" in b else "")
        for b in branches
    )


def _bounds(schema: Schema, value: float, path: str) -> Iterator[Problem]:
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") is True:
            if value <= low:
                yield _bad(path, value, f"a number greater than {low}")
        elif value < low:
            yield _bad(path, value, f"a number at least {low}")
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") is True:
            if value >= high:
                yield _bad(path, value, f"a number less than {high}")
        elif value > high:
            yield _bad(path, value, f"a number at most {high}")
    fmt = schema.get("format")
    if fmt in _INT_BOUNDS:
        low, high = _INT_BOUNDS[fmt]
        if not low <= value <= high:
            yield _bad(path, value, f"an integer from {low} to {high} ({fmt})")


def _object(schema: Schema, value: Mapping[str, Any], path: str) -> Iterator[Problem]:
    properties: Mapping[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    for key in schema.get("required") or ():
        # A null in a field that is not nullable is pruned by the apiserver: as good as absent.
        if value.get(key) is None and not (key in value and properties.get(key, {}).get("nullable")):
            yield Problem(_child(path, key), "missing: required by the CRD schema")
    for raw_key, item in value.items():
        key = str(raw_key)
        if key in properties:
            if item is None and not properties[key].get("nullable", False):
                continue  # pruned, as above
            yield from _validate(properties[key], item, _child(path, key))
        elif isinstance(additional, Mapping):
            if item is None and not additional.get("nullable", False):
                continue  # pruned, as above
            yield from _validate(additional, item, f"{path}[{key}]")
        elif additional is True or preserve:
            continue
        else:
            yield Problem(_child(path, key), "unknown field")
    count = len(value)
    if "minProperties" in schema and count < schema["minProperties"]:
        yield Problem(path, f"has {count} fields: expected at least {schema['minProperties']}")
    if "maxProperties" in schema and count > schema["maxProperties"]:
        yield Problem(path, f"has {count} fields: expected at most {schema['maxProperties']}")


def _array(schema: Schema, value: list[Any], path: str) -> Iterator[Problem]:
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            yield from _validate(items, item, f"{path}[{index}]")
    if "minItems" in schema and len(value) < schema["minItems"]:
        yield Problem(path, f"has {len(value)} items: expected at least {schema['minItems']}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        yield Problem(path, f"has {len(value)} items: expected at most {schema['maxItems']}")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type in ("set", "map"):
        keys: list[str] = list(schema.get("x-kubernetes-list-map-keys") or ())
        seen: set[str] = set()
        for index, item in enumerate(value):
            if list_type == "map" and isinstance(item, Mapping):
                identity = repr(tuple(item.get(k) for k in keys))
            else:
                identity = repr(item)
            if identity in seen:
                what = f"keys {', '.join(keys)}" if list_type == "map" else "value"
                yield Problem(f"{path}[{index}]", f"duplicate entry: expected a unique {what}")
            seen.add(identity)


# -- CRDs -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CustomResourceDefinition:
    """What the apiserver needs of one CRD to validate its objects."""

    kind: str
    namespaced: bool
    schemas: Mapping[str, Schema]  # served ``group/version`` -> openAPIV3Schema


@cache
def load_crds(directory: Path = CRD_DIRECTORY) -> Mapping[str, CustomResourceDefinition]:
    """The CRDs of ``directory`` (``*.yaml``) by kind; raises :class:`GpuqError` naming the file."""
    if not directory.is_dir():
        raise GpuqError(f"{directory}: no such directory: the CRDs simulate validates custom resources with")
    crds: dict[str, CustomResourceDefinition] = {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise GpuqError(f"{path}: cannot read the CRD: {str(err).splitlines()[0]}") from None
        for doc in documents:
            if isinstance(doc, Mapping) and doc.get("kind") == "CustomResourceDefinition":
                crd = _crd(doc, path)
                crds[crd.kind] = crd
    return crds


def custom_resource_definition(doc: Mapping[str, Any], where: str) -> CustomResourceDefinition:
    """One CRD object (a document of ``gpuq simulate``'s input); raises :class:`GpuqError` naming
    ``where`` when it has no schema to validate with."""
    return _crd(doc, where)


def _crd(doc: Mapping[str, Any], path: Path | str) -> CustomResourceDefinition:
    try:
        spec = doc["spec"]
        group = spec["group"]
        schemas = {
            f"{group}/{version['name']}": version["schema"]["openAPIV3Schema"]
            for version in spec["versions"]
            if version.get("served", True)
        }
        return CustomResourceDefinition(spec["names"]["kind"], spec.get("scope") != "Cluster", schemas)
    except (KeyError, TypeError) as err:
        raise GpuqError(f"{path}: not a CustomResourceDefinition with a schema (missing {err})") from None


def check_custom_resource(crd: CustomResourceDefinition, obj: Mapping[str, Any]) -> list[Problem]:
    """What the apiserver would refuse in ``obj``: its apiVersion, its metadata, its schema."""
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or api_version not in crd.schemas:
        expected = " or ".join(sorted(crd.schemas))
        if api_version is None:
            return [Problem("apiVersion", f"missing: expected {expected}")]
        return [_bad("apiVersion", api_version, f"{expected} (the versions the CRD serves)")]
    schema = crd.schemas[api_version]
    problems = [p for p in validate(schema, obj) if p.path.partition(".")[0].partition("[")[0] != "metadata"]
    problems += _metadata(obj.get("metadata"), crd.namespaced)
    return problems


def _metadata(meta: Any, namespaced: bool) -> list[Problem]:
    problems = validate(OBJECT_META, meta, "metadata")
    if problems or not isinstance(meta, Mapping):
        return problems
    name = meta.get("name")
    if isinstance(name, str) and (len(name) > 253 or _DNS_SUBDOMAIN.match(name) is None):
        problems.append(_bad("metadata.name", name, "a DNS subdomain name (lower case a-z, 0-9, '-', '.')"))
    namespace = meta.get("namespace")
    if namespaced and namespace and (len(namespace) > 63 or _DNS_LABEL.match(namespace) is None):
        problems.append(_bad("metadata.namespace", namespace, "a DNS label (lower case a-z, 0-9, '-')"))
    for key, value in (meta.get("labels") or {}).items():
        if not isinstance(key, str) or not _qualified(key):
            problems.append(_bad("metadata.labels", key, "a label key such as example.com/name"))
        elif not isinstance(value, str) or len(value) > 63 or _LABEL_VALUE.match(value) is None:
            problems.append(_bad(f"metadata.labels[{key}]", value, "a label value (63 characters or less)"))
    for key in meta.get("annotations") or {}:
        if not isinstance(key, str) or not _qualified(key):
            problems.append(_bad("metadata.annotations", key, "an annotation key such as example.com/name"))
    return problems


def _qualified(key: str) -> bool:
    """A Kubernetes qualified name: ``[prefix/]name``, prefix a DNS subdomain, name 63 characters or less."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or _DNS_SUBDOMAIN.match(prefix) is None):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.match(name) is not None
