"""Read Kubernetes manifests (multi-document YAML or JSON files, or directories of them) for a simulation.

Every problem is collected, not just the first: a platform engineer fixing a 300-line input wants
the whole list at once. Each problem is one line naming the file, the object and the field.

The input may be a real repository folder: kinds gpuq does not simulate (Services, ConfigMaps,
Secrets, custom resources of other projects; :data:`kinds.SIMULATED` says which it does) are skipped
and counted (``skipped 12 objects: 4 Service, 3 ConfigMap, ...``), or each refused with ``strict``.

A problem is what the apiserver would refuse (design.md "gpuq simulate"): built-in kinds are held to
the apiserver's field tree (:mod:`scheduler.simulate.core_schema`: ``spec.schedulerNmae`` is an
unknown field), custom resources to their CRD schemas (:mod:`scheduler.simulate.schema`), Pods and
Nodes to the core API's checks, the storage objects (PersistentVolumeClaims,
PersistentVolumes, StorageClasses, CSINodes) also to the core API's checks of the fields the volume
rules read. gpuq's own annotation rules are not applied here: an object that
breaks them is simulated as the scheduler meets it in a cluster (a Warning event and the Semantics-3
fallback). A Pod's schedulerName is kept as the apiserver stores it (``default-scheduler`` when
unset): the simulation schedules the pods of the scheduler name it acts as, as a cluster would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.disruption_budget import parse_disruption_budget
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement import pod_affinity, topology_spread
from gpuq_k8s.common.model.placement.volumes.claims import parse_claim
from gpuq_k8s.common.model.placement.volumes.csi_nodes import parse_csi_node
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import parse_volume
from gpuq_k8s.common.model.placement.volumes.storage_classes import parse_storage_class
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.wire import object_ref
from gpuq_k8s.scheduler.plugins.node_selection import compile_selection
from gpuq_k8s.scheduler.simulate.core_schema import CoreSchema, load_core_schema
from gpuq_k8s.scheduler.simulate.schema import (
    CustomResourceDefinition,
    check_custom_resource,
    custom_resource_definition,
    load_crds,
)
from gpuq_k8s.scheduler.simulate.workloads import expand, is_workload

NODE: Final = kinds.NODE.kind
POD: Final = kinds.POD.kind
# The kind names simulate reads, for messages (a name may stand for two groups: Job).
SIMULATED_NAMES: Final = tuple(dict.fromkeys(kind.kind for kind in kinds.SIMULATED))
_SUFFIXES: Final = (".yaml", ".yml", ".json")
# The built-in kinds read as given, held to the core API's checks of the fields the rules read.
_CHECKS: Final[Mapping[str, Callable[[Any], object]]] = {
    kinds.PERSISTENT_VOLUME_CLAIM.kind: parse_claim,
    kinds.PERSISTENT_VOLUME.kind: parse_volume,
    kinds.STORAGE_CLASS.kind: parse_storage_class,
    kinds.CSI_NODE.kind: parse_csi_node,
    # what the apiserver would refuse of a budget (both bounds, a bad selector)
    kinds.POD_DISRUPTION_BUDGET.kind: parse_disruption_budget,
}

# The top-level keys of a scheduler configuration (Volcano's volcano-scheduler.conf): a document with
# them and no kind was meant for --config.
_CONFIG_KEYS: Final = ("actions", "tiers", "configurations")
_POD_TEMPLATE: Final = "@api.core.v1.PodTemplateSpec"


@dataclass(slots=True)
class Manifests:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    objects: list[Mapping[str, Any]] = field(default_factory=list)  # everything else, in input order
    errors: list[str] = field(default_factory=list)
    # Objects of kinds simulate does not read, by how the summary names their kind (Service, ...).
    skipped: dict[str, int] = field(default_factory=dict)


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


# libyaml's loader when PyYAML was built with it (its wheels are): the same documents as the pure-Python
# safe loader, parsed about ten times faster, which is most of a 5,000-pod input's load time.
_YAML_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _documents(path: Path) -> Iterable[tuple[int, Any]]:
    text = path.read_text(encoding="utf-8")
    for index, doc in enumerate(yaml.load_all(text, Loader=_YAML_LOADER)):
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
        except (ValueError, RecursionError) as err:
            # PyYAML's int() of more than 4,300 digits, or nesting past the recursion limit.
            reason = "nested too deeply" if isinstance(err, RecursionError) else str(err).split(";")[0]
            errors.append(f"{path}: invalid YAML: {reason}")
            continue
        docs.extend(Document(f"{path} (document {index + 1})", doc) for index, doc in documents)
    return docs, errors


def ingest(
    docs: Iterable[Document],
    errors: Sequence[str] = (),
    crds: Mapping[str, CustomResourceDefinition] | None = None,
    *,
    strict: bool = False,
) -> Manifests:
    """Parse documents into a simulation's input, collecting every problem.

    Kinds gpuq does not simulate are skipped and counted in ``Manifests.skipped``; with ``strict``
    each is a problem instead. Built-in kinds are held to the apiserver's field tree, custom resources
    to their CRD schemas (``crds``, by kind; the shipped ``deploy/crds`` when not given, replaced by a
    CRD of the same group and kind in the input, as the cluster's own CRD would be): what the apiserver
    would refuse is a problem here too.
    """
    out = Manifests(errors=list(errors))
    try:
        core = load_core_schema()
        shipped = load_crds() if crds is None else crds
    except GpuqError as err:
        out.errors.append(str(err))
        return out
    docs = list(docs)
    schemas = {**shipped, **_input_crds(docs, out)}
    seen: dict[str, str] = {}
    for doc in _expanded(_simulated(docs, out, core, strict=strict), core, out.errors):
        problems = _take(doc.body, out, schemas)
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


def skipped_summary(skipped: Mapping[str, int]) -> str:
    """``skipped 12 objects: 4 Service, 3 ConfigMap, ...`` (the most frequent first, then by name)."""
    total = sum(skipped.values())
    parts = [f"{count} {label}" for label, count in sorted(skipped.items(), key=lambda i: (-i[1], i[0]))]
    return f"skipped {total} {'object' if total == 1 else 'objects'}: {', '.join(parts)}"


def _input_crds(docs: Sequence[Document], out: Manifests) -> dict[str, CustomResourceDefinition]:
    """The input's CustomResourceDefinitions of kinds gpuq simulates, by kind (a problem when one
    cannot be read); the input's other CRDs are skipped with the other kinds."""
    found: dict[str, CustomResourceDefinition] = {}
    for doc in docs:
        body = doc.body
        if not isinstance(body, Mapping) or kinds.of(body) is not kinds.CUSTOM_RESOURCE_DEFINITION:
            continue
        record = _defined_kind(body)
        if record is None:
            continue
        try:
            found[record.kind] = custom_resource_definition(body, doc.where)
        except GpuqError as err:
            out.errors.append(str(err))
    return found


def _defined_kind(crd: Mapping[str, Any]) -> kinds.Kind | None:
    """The simulated kind a CustomResourceDefinition defines (spec.group, spec.names.kind), or None."""
    spec = crd.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    names = spec.get("names")
    names = names if isinstance(names, Mapping) else {}
    record = kinds.lookup(str(spec.get("group") or ""), str(names.get("kind") or ""))
    return record if record is not None and record in kinds.SIMULATED else None


def _label(body: Mapping[str, Any], record: kinds.Kind | None) -> str:
    """How the summary names a skipped object's kind: ``Service``; ``Queue.example.com`` when a kind
    of that name is simulated in another group."""
    kind = str(body["kind"])
    group = kinds.group_of(str(body.get("apiVersion") or ""))
    if record is None and group and kind in SIMULATED_NAMES:
        return f"{kind}.{group}"
    return kind


def _not_an_object(body: Any) -> str | None:
    """Why ``body`` is no Kubernetes object (with a hint when it is something else), or None."""
    if not isinstance(body, Mapping):
        return f"expected a Kubernetes object (a mapping with kind and metadata), got {type(body).__name__}"
    kind = body.get("kind")
    if kind is None or kind == "":
        if any(key in body for key in _CONFIG_KEYS):
            return (
                "kind: missing: this is a scheduler configuration (Volcano format), not a Kubernetes "
                "object: pass it with --config FILE"
            )
        return "kind: missing: expected a Kubernetes object with apiVersion and kind"
    if not isinstance(kind, str):
        return f"kind: invalid value {quote(kind)}: expected a kind name such as Pod"
    version = body.get("apiVersion")
    if version is not None and not isinstance(version, str):
        return (
            f"{kind}: apiVersion: invalid value {quote(version)}: expected the kind's API version such as v1"
        )
    return None


def _wrong_version(body: Mapping[str, Any], api_version: str) -> str:
    """The problem of a simulated kind's name in an apiVersion that has no such kind."""
    named = [k for k in kinds.SIMULATED if k.kind == body["kind"]]
    meta = body.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ref = named[0].ref(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    expected = " or ".join(k.api_version for k in named)
    if not api_version:
        return f"{ref}: apiVersion: missing: expected {expected}"
    return f"{ref}: apiVersion: invalid value {quote(api_version)}: expected {expected}"


def _builtin_group(group: str) -> bool:
    """Kubernetes' own API groups: the core group, ``apps``, ``batch``..., ``*.k8s.io``."""
    return "." not in group or group.endswith(".k8s.io")


def _simulated(
    docs: Iterable[Document], out: Manifests, core: CoreSchema, *, strict: bool
) -> Iterator[Document]:
    """The documents of kinds gpuq simulates, each built-in one checked against its kind's fields;
    the others are skipped and counted (a problem each with ``strict``); a non-object is a problem."""
    for doc in docs:
        body = doc.body
        problem = _not_an_object(body)
        if problem is not None:
            out.errors.append(f"{doc.where}: {problem}")
            continue
        record = kinds.of(body)
        if record is kinds.CUSTOM_RESOURCE_DEFINITION and _defined_kind(body) is not None:
            continue  # read by _input_crds
        api_version = str(body.get("apiVersion") or "")
        if record is None and body["kind"] in SIMULATED_NAMES and _builtin_group(kinds.group_of(api_version)):
            # A Deployment in extensions/v1beta1 (Kubernetes serves it no more: "no matches for kind"),
            # a Queue without its apiVersion (the core group has no Queue).
            out.errors.append(f"{doc.where}: {_wrong_version(body, api_version)}")
            continue
        if record is None or record not in kinds.SIMULATED:
            if strict:
                out.errors.append(
                    f"{doc.where}: kind: invalid value {quote(body['kind'])} ({api_version}): --strict "
                    f"takes only the kinds gpuq simulates: {', '.join(SIMULATED_NAMES)}"
                )
            else:
                label = _label(body, record)
                out.skipped[label] = out.skipped.get(label, 0) + 1
            continue
        problems = _core_problems(body, record, core)
        if problems:
            out.errors.extend(f"{doc.where}: {problem}" for problem in problems)
            continue
        yield doc


def _core_problems(body: Mapping[str, Any], record: kinds.Kind, core: CoreSchema) -> list[str]:
    """What the apiserver's decoding refuses in an object of a built-in kind (Pod, Deployment, ...);
    nothing for a custom resource (its CRD schema is checked when it is taken)."""
    if not core.versions(record.kind) or record is kinds.VOLCANO_JOB:
        return []  # not a built-in kind
    ref = _ref(body)
    api_version = str(body.get("apiVersion") or record.api_version)  # absent: the kind's own version
    problems = core.check(body, api_version)
    if problems is None:
        expected = " or ".join(core.versions(record.kind))
        return [f"{ref}: apiVersion: invalid value {quote(body['apiVersion'])}: expected {expected}"]
    return [problem.render(ref) for problem in problems]


def _expanded(docs: Iterable[Document], core: CoreSchema, errors: list[str]) -> Iterable[Document]:
    """``docs`` with each workload replaced by the objects its controller would create
    (:mod:`scheduler.simulate.workloads`); a workload that cannot be expanded is an error."""
    for doc in docs:
        body = doc.body
        if not is_workload(body):
            yield doc
            continue
        meta = body.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            errors.append(
                f"{doc.where}: {body.get('kind')}: metadata.name: missing: expected a non-empty name"
            )
            continue
        problems = _template_problems(body, core)
        if problems:
            errors.extend(f"{doc.where}: {problem}" for problem in problems)
            continue
        try:
            made = expand(body)
        except GpuqError as err:
            errors.append(f"{doc.where}: {err}")
            continue
        yield from (Document(f"{doc.where}, made from {_ref(body)}", obj) for obj in made)


def _template_problems(body: Mapping[str, Any], core: CoreSchema) -> list[str]:
    """A Volcano Job's task templates held to the Pod template's fields (a built-in workload's
    template is checked with its kind)."""
    if kinds.of(body) is not kinds.VOLCANO_JOB:
        return []
    spec = body.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
    ref = _ref(body)
    problems: list[str] = []
    for index, task in enumerate(tasks if isinstance(tasks, list) else ()):
        if isinstance(task, Mapping) and task.get("template") is not None:
            at = f"spec.tasks[{index}].template"
            problems += [p.render(ref) for p in core.check_value(_POD_TEMPLATE, task["template"], at)]
    return problems


def load(paths: Sequence[str], *, strict: bool = False) -> Manifests:
    docs, errors = read(paths)
    return ingest(docs, errors, strict=strict)


def object_reference(doc: Mapping[str, Any]) -> str:
    """``Kind/namespace/name`` of a document (``Kind/name`` for cluster-scoped kinds)."""
    return _ref(doc)


def _ref(doc: Mapping[str, Any]) -> str:
    kind = str(doc.get("kind"))
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    record = kinds.of(doc)
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


def created(pod: PodInfo) -> PodInfo:
    """``pod`` as kube-apiserver creates it, for the placement rules: its inter-pod affinity terms and
    topology spread constraints checked (a malformed one is refused, naming the field) and their
    ``matchLabelKeys`` / ``mismatchLabelKeys`` merged into their selectors from its labels
    (kube-apiserver's PrepareForCreate; a pod read from a cluster has been through it already)."""
    affinity = pod_affinity.apply_label_keys(pod.affinity, pod.labels)
    spread = tuple(topology_spread.apply_label_keys(pod.topology_spread_constraints, pod.labels))
    pod_affinity.parse_pod_affinity(pod.namespace, affinity, pod.ref)
    topology_spread.parse_constraints(list(spread), pod.labels, pod.ref, admission=True)
    if affinity is pod.affinity and spread == pod.topology_spread_constraints:
        return pod
    return replace(pod, affinity=dict(affinity), topology_spread_constraints=spread)


def _take(doc: Mapping[str, Any], out: Manifests, crds: Mapping[str, CustomResourceDefinition]) -> list[str]:
    """Parse one document of a simulated kind into ``out``; returns its problems (none when taken)."""
    kind = str(doc.get("kind"))
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
            compile_selection(pod)
            out.pods.append(created(pod))
        else:
            check = _CHECKS.get(str(kind))
            if check is not None:
                check(doc)
            out.objects.append(doc)
    except GpuqError as err:
        return [str(err)]
    return []
