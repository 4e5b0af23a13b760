"""Writes ``scheduler/simulate/core_schema.json``: the field tree of the built-in kinds ``gpuq simulate``
reads, compacted from the OpenAPI v3 documents the e2e control plane's kube-apiserver serves.

    python -m tests.e2e.core_schema           # start a control plane, fetch, write the file
    python -m tests.e2e.core_schema --check   # exit 1 when the committed file differs

``tests/e2e/test_core_schema.py`` runs the check against the session's control plane, so a version bump
of the harness (tests/e2e/controlplane/versions.env) shows as a failing test until the file is
regenerated. The compact form (read by :mod:`scheduler.simulate.core_schema`) keeps what kubectl's
strict field validation and the apiserver's JSON decoding check: which fields each type has and each
field's JSON type; descriptions, defaults, enums and patch strategies are left out.

A type expression is ``string``, ``integer``, ``int32``, ``number``, ``boolean``, ``quantity``
(resource.Quantity: a string or a number), ``int-or-string``, ``object`` (any JSON object: RawExtension,
FieldsV1), ``[T]`` (a list of T), ``{T}`` (a map of string to T) or ``@Name`` (an object type of
``types``, its fields by name). Names drop the ``io.k8s.`` prefix.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from tests.e2e.controlplane.harness import ControlPlane
from tests.testing.paths import REPO_ROOT

SCHEMA_FILE: Final = REPO_ROOT / "scheduler" / "simulate" / "core_schema.json"

# The built-in kinds whose fields simulate checks: the kinds it simulates (common/model/kinds.py
# SIMULATED) and those it is about to (volumes, disruption budgets, DRA), so adding one to SIMULATED
# needs no new file. (apiVersion, kind)
KINDS: Final = (
    ("v1", "Node"),
    ("v1", "Pod"),
    ("v1", "Namespace"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "PersistentVolume"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "CSINode"),
    ("policy/v1", "PodDisruptionBudget"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("resource.k8s.io/v1", "ResourceSlice"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
)
# Types that are one JSON value of their own, whatever their Go structure.
_SPECIAL: Final = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "int-or-string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "string",
}
_PREFIX: Final = "io.k8s."
_REF: Final = "#/components/schemas/"


def _path_of(api_version: str) -> str:
    """The OpenAPI v3 document of a group version: ``api/v1``, ``apis/apps/v1``."""
    return f"apis/{api_version}" if "/" in api_version else f"api/{api_version}"


def compact(documents: Mapping[str, Mapping[str, Any]], version: str) -> dict[str, Any]:
    """The compact schema of :data:`KINDS` from the OpenAPI v3 documents by path (``api/v1``, ...)."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for document in documents.values():
        schemas.update(document["components"]["schemas"])
    types: dict[str, dict[str, str]] = {}
    kinds: dict[str, str] = {}

    def expression(prop: Mapping[str, Any]) -> str:
        ref = prop.get("$ref")
        if ref is None and prop.get("allOf"):
            [only] = prop["allOf"]  # the generator wraps a single $ref to carry a default
            ref = only["$ref"]
        if ref is not None:
            return named(ref.removeprefix(_REF))
        kind = prop.get("type")
        if kind == "array":
            return f"[{expression(prop['items'])}]"
        if kind == "object":
            if "additionalProperties" in prop:
                return "{" + expression(prop["additionalProperties"]) + "}"
            if prop.get("properties"):
                raise ValueError(f"an inline object with properties: {prop}")
            return "object"
        if kind == "integer" and prop.get("format") == "int32":
            return "int32"
        if kind in ("string", "integer", "number", "boolean"):
            return str(kind)
        raise ValueError(f"an OpenAPI schema this compaction does not know: {prop}")

    def named(full: str) -> str:
        if full in _SPECIAL:
            return _SPECIAL[full]
        schema = schemas[full]
        if not schema.get("properties"):
            if schema.get("type") == "object":
                return "object"
            return expression(schema)
        name = full.removeprefix(_PREFIX)
        if name not in types:
            fields: dict[str, str] = {}
            types[name] = fields  # before the fields: a type may refer to itself (JSONSchemaProps)
            for field, prop in sorted(schema["properties"].items()):
                fields[field] = expression(prop)
        return "@" + name

    for api_version, kind in KINDS:
        group, _, ver = api_version.rpartition("/")
        wanted = {"group": group, "version": ver, "kind": kind}
        document = documents[_path_of(api_version)]["components"]["schemas"]
        [full] = [
            name
            for name, schema in document.items()
            if wanted in (schema.get("x-kubernetes-group-version-kind") or ())
        ]
        kinds[f"{api_version}/{kind}"] = named(full)
    return {"version": version, "kinds": kinds, "types": dict(sorted(types.items()))}


def render(schema: Mapping[str, Any]) -> str:
    """The file's text: one type per line, so a version bump reads as a short diff."""
    lines = ["{", f'"version": {json.dumps(schema["version"])},', '"kinds": {']
    kinds = list(schema["kinds"].items())
    lines += [
        f"  {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(kinds) - 1 else "")
        for i, (k, v) in enumerate(kinds)
    ]
    lines += ["},", '"types": {']
    types = list(schema["types"].items())
    lines += [
        f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" + ("," if i < len(types) - 1 else "")
        for i, (k, v) in enumerate(types)
    ]
    lines += ["}", "}", ""]
    return "\n".join(lines)


def fetch(get: Callable[[str], str], paths: Iterable[str]) -> dict[str, Any]:
    """The OpenAPI v3 documents of ``paths`` through ``get`` (``kubectl get --raw``)."""
    return {path: json.loads(get(f"/openapi/v3/{path}")) for path in paths}


def from_control_plane(kubectl: Callable[..., Any]) -> str:
    """The file's text from the apiserver ``kubectl`` talks to (the harness's :class:`Kubectl`)."""

    def get(path: str) -> str:
        return str(kubectl("get", "--raw", path, timeout=120).stdout)

    documents = fetch(get, sorted({_path_of(api_version) for api_version, _ in KINDS}))
    version = json.loads(get("/version"))["gitVersion"]
    return render(compact(documents, version))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.core_schema", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = parser.parse_args(argv)
    with ControlPlane() as plane:
        text = from_control_plane(plane.kubectl)
    if args.check:
        same = SCHEMA_FILE.read_text(encoding="utf-8") == text
        print(f"{SCHEMA_FILE}: {'up to date' if same else 'differs from the apiserver: regenerate it'}")
        return 0 if same else 1
    SCHEMA_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_FILE} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
