"""Read Kubernetes manifests (multi-document YAML or JSON files, or directories of them) for a simulation.

Every problem is collected, not just the first: a platform engineer fixing a 300-line input wants
the whole list at once. Each problem is one line naming the file, the object and the field.

A problem is what the apiserver would refuse (design.md "gpuq simulate"): custom resources are held
to their CRD schemas (:mod:`scheduler.simulate.schema`), Pods and Nodes to the core API's checks. gpuq's
own annotation rules are not applied here: an object that breaks them is simulated as the scheduler
meets it in a cluster (a Warning event and the Semantics-3 fallback).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.disruption_budget import parse_disruption_budget
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER, PodInfo
from gpuq_k8s.common.model.wire import object_ref
from gpuq_k8s.scheduler.cluster.objects import KINDS
from gpuq_k8s.scheduler.plugins.node_selection import compile_selection
from gpuq_k8s.scheduler.simulate.schema import CustomResourceDefinition, check_custom_resource, load_crds
from gpuq_k8s.scheduler.simulate.workloads import WORKLOADS, expand, is_workload

NODE: Final = kinds.NODE.kind
POD: Final = kinds.POD.kind
SUPPORTED_KINDS: Final = (NODE, POD, *(kind.kind for kind in KINDS), *WORKLOADS)
# The kinds read as themselves (workloads are namespaced: they are named Kind/namespace/name).
_READ: Final = {kind.kind: kind for kind in (kinds.NODE, kinds.POD, *KINDS)}
_SUFFIXES: Final = (".yaml", ".yml", ".json")


@dataclass(slots=True)
class Manifests:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    objects: list[Mapping[str, Any]] = field(default_factory=list)  # everything else, in input order
    errors: list[str] = field(default_factory=list)


def _files(paths: Sequence[str]) -> tuple[list[Path], list[str]]:
    files: list[Path] = []
    errors: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _SUFFIXES)
            if not found:
                errors.append(f"{raw}: no .yaml, .yml or .json files in this directory")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            errors.append(f"{raw}: no such file or directory")
    return files, errors


def _documents(path: Path) -> Iterable[tuple[int, Any]]:
    text = path.read_text(encoding="utf-8")
    for index, doc in enumerate(yaml.safe_load_all(text)):
        if doc is None:
            continue
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            for item in doc.get("items") or ():
                yield index, item
        else:
            yield index, doc


@dataclass(frozen=True, slots=True)
class Document:
    """One object read from the input, with where it came from (for one-line error messages)."""

    where: str
    body: Any


def read(paths: Sequence[str]) -> tuple[list[Document], list[str]]:
    """Every document of the input, in file order, and the problems met reading them."""
    files, errors = _files(paths)
    docs: list[Document] = []
    for path in files:
        try:
            documents = list(_documents(path))
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            errors.append(f"{path}{at}: invalid YAML: {problem}")
            continue
        except (OSError, UnicodeDecodeError) as err:
            errors.append(f"{path}: cannot read: {err}")
            continue
        docs.extend(Document(f"{path} (document {index + 1})", doc) for index, doc in documents)
    return docs, errors


def ingest(
    docs: Iterable[Document],
    errors: Sequence[str] = (),
    crds: Mapping[str, CustomResourceDefinition] | None = None,
) -> Manifests:
    """Parse documents into a simulation's input, collecting every problem.

    Custom resources are held to their CRD schemas (``crds``, by kind; the shipped ``deploy/crds``
    when not given), as the apiserver holds them: what it would refuse is a problem here too.
    """
    out = Manifests(errors=list(errors))
    if crds is None:
        try:
            crds = load_crds()
        except GpuqError as err:
            out.errors.append(str(err))
            return out
    seen: dict[str, str] = {}
    for doc in _expanded(docs, out.errors):
        problems = _take(doc.body, out, crds)
        if problems:
            out.errors.extend(f"{doc.where}: {problem}" for problem in problems)
            continue
        ref = _ref(doc.body)
        if ref in seen:
            out.errors.append(f"{doc.where}: {ref} is defined twice (first in {seen[ref]})")
            _drop_last(doc.body, out)
        else:
            seen[ref] = doc.where
    return out


def _expanded(docs: Iterable[Document], errors: list[str]) -> Iterable[Document]:
    """``docs`` with each workload replaced by the objects its controller would create
    (:mod:`scheduler.simulate.workloads`); a workload that cannot be expanded is an error."""
    for doc in docs:
        body = doc.body
        if not isinstance(body, Mapping) or not is_workload(body):
            yield doc
            continue
        meta = body.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            errors.append(
                f"{doc.where}: {body.get('kind')}: metadata.name: missing: expected a non-empty name"
            )
            continue
        try:
            made = expand(body)
        except GpuqError as err:
            errors.append(f"{doc.where}: {err}")
            continue
        yield from (Document(f"{doc.where}, made from {_ref(body)}", obj) for obj in made)


def load(paths: Sequence[str]) -> Manifests:
    docs, errors = read(paths)
    return ingest(docs, errors)


def object_reference(doc: Mapping[str, Any]) -> str:
    """``Kind/namespace/name`` of a document (``Kind/name`` for cluster-scoped kinds)."""
    return _ref(doc)


def _ref(doc: Mapping[str, Any]) -> str:
    kind = str(doc.get("kind"))
    meta = doc.get("metadata") or {}
    record = _READ.get(kind)
    namespace = (
        "" if record is not None and not record.namespaced else str(meta.get("namespace") or "default")
    )
    return object_ref(kind, namespace, str(meta.get("name") or ""))


def _drop_last(doc: Mapping[str, Any], out: Manifests) -> None:
    kind = doc.get("kind")
    if kind == NODE:
        out.nodes.pop()
    elif kind == POD:
        out.pods.pop()
    else:
        out.objects.pop()


def _take(doc: Any, out: Manifests, crds: Mapping[str, CustomResourceDefinition]) -> list[str]:
    """Parse one document into ``out``; returns its problems (none when it was taken)."""
    if not isinstance(doc, Mapping):
        return [f"expected a Kubernetes object (a mapping with kind and metadata), got {type(doc).__name__}"]
    kind = doc.get("kind")
    if kind not in SUPPORTED_KINDS:
        return [f"kind: invalid value {kind!r}: expected one of {', '.join(SUPPORTED_KINDS)}"]
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        return [f"{kind}: metadata.name: missing: expected a non-empty name"]
    if kind in crds:
        ref = _ref(doc)
        problems = check_custom_resource(crds[kind], doc)
        if problems:
            return [problem.render(ref) for problem in problems]
        out.objects.append(doc)
        return []
    try:
        if kind == NODE:
            out.nodes.append(NodeInfo.from_dict(doc))
        elif kind == POD:
            pod = PodInfo.from_dict(doc)
            if not (doc.get("spec") or {}).get("schedulerName"):
                # design.md "gpuq simulate": an unset schedulerName is scheduled by gpuq here (in a
                # cluster the apiserver would have defaulted it to default-scheduler).
                pod = replace(pod, scheduler_name=GPUQ_SCHEDULER)
            compile_selection(pod)
            out.pods.append(pod)
        else:
            if kind == kinds.POD_DISRUPTION_BUDGET.kind:
                parse_disruption_budget(doc)  # what the apiserver would refuse (both bounds, a bad selector)
            out.objects.append(doc)
    except GpuqError as err:
        return [str(err)]
    return []
