"""Workloads in ``gpuq simulate``'s input, expanded into the Pods (and PodGroup) their controllers
would create (design.md "gpuq simulate").

- ``apps/v1`` Deployment, ReplicaSet: ``spec.replicas`` (default 1) Pods ``<name>-<i>``;
  StatefulSet: Pods ``<name>-<ordinal>`` from ``spec.ordinals.start`` (default 0), as the
  StatefulSet controller names them.
- ``batch/v1`` Job: ``min(parallelism, completions)`` Pods ``<name>-<i>`` (parallelism defaults to 1,
  completions to parallelism).
- ``batch.volcano.sh/v1alpha1`` Job (Volcano's job controller, pkg/controllers/job, after its
  mutating webhook's defaults): per task, ``replicas`` Pods ``<job>-<task>-<i>`` (a task without a
  name is ``default<index>``), annotated with the PodGroup, job, queue, task and index, taking the
  job's schedulerName (``volcano`` when unset, as Volcano's job webhook defaults it) and
  priorityClassName where the template has none; and one
  PodGroup named ``<job>-<uid>`` (the job's name when it has no uid) carrying the job's annotations
  (so ``volcano.sh/card.request``) and labels, ``minMember`` (spec.minAvailable, default the sum of
  the tasks' minAvailable), ``minTaskMember``, ``queue`` (default ``default``), ``minResources`` (the
  requests of the first minMember tasks' pods, as ``calcPGMinResources`` sums them) and
  ``priorityClassName``.

Pods take the template's labels, annotations and spec, the workload's namespace and
creationTimestamp (the queue orders by it). Pods of a ReplicaSet or StatefulSet are owned by it
(``ownerReferences``, ``controller: true``), and it is kept in the simulation; a Deployment's by the
ReplicaSet its controller would make, ``<name>-<hash of the template>`` with the Deployment's
selector: topology spread's system defaults select pods by their controller's selector. Names are
deterministic: same input, same output.
Malformed workloads are refused with one line naming the object, the field, the value and what was
expected (a field the API does not have: ``<ref>: spec.replica: unknown field``, as kubectl's strict
field validation refuses it), and so is one that would make more than :data:`MAX_PODS` Pods; the Pods and
PodGroup made are then held to the same rules as any in the input.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import GROUP_NAME
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import pod_requests
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.common.model.wire import object_ref

APPS: Final = kinds.DEPLOYMENT.api_version
BATCH: Final = kinds.JOB.api_version
VOLCANO_BATCH: Final = kinds.VOLCANO_JOB.api_version
# Each workload kind's name and the apiVersions it is read in (a Job: batch/v1 or Volcano's).
WORKLOADS: Final = {
    kinds.DEPLOYMENT.kind: (APPS,),
    kinds.REPLICA_SET.kind: (kinds.REPLICA_SET.api_version,),
    kinds.STATEFUL_SET.kind: (kinds.STATEFUL_SET.api_version,),
    kinds.JOB.kind: (BATCH, VOLCANO_BATCH),
}
# Volcano's batch keys (pkg/apis/batch/v1alpha1) on the pods its job controller creates.
JOB_NAME: Final = "volcano.sh/job-name"
QUEUE_NAME: Final = "volcano.sh/queue-name"
TASK_SPEC: Final = "volcano.sh/task-spec"
TASK_INDEX: Final = "volcano.sh/task-index"
DEFAULT_QUEUE: Final = "default"
VOLCANO_SCHEDULER: Final = "volcano"
DEFAULT_TASK: Final = "default"
# The fields of a Volcano Job's spec and tasks (volcano.sh/apis batch/v1alpha1): anything else is
# refused, as kubectl's strict field validation refuses it. The built-in workloads (apps/v1, batch/v1)
# are checked against the apiserver's own field tree before they are expanded (loader.py,
# core_schema.py), and so are a Volcano Job's task templates.
_TOP: Final = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_SPEC_FIELDS: Final = {
    VOLCANO_BATCH: frozenset(
        {
            "schedulerName",
            "minAvailable",
            "volumes",
            "tasks",
            "policies",
            "plugins",
            "runningEstimate",
            "queue",
            "maxRetry",
            "ttlSecondsAfterFinished",
            "priorityClassName",
            "minSuccess",
            "networkTopology",
        }
    ),
}
_TASK_FIELDS: Final = frozenset(
    {
        "name",
        "replicas",
        "minAvailable",
        "template",
        "policies",
        "topologyPolicy",
        "maxRetry",
        "dependsOn",
        "partitionPolicy",
    }
)
_TEMPLATE_FIELDS: Final = frozenset({"metadata", "spec"})
# Pods one workload may expand into: ten times what simulate is measured with (README, 50,000 pods in
# all), so a typo such as ``replicas: 100000000`` is an input error and not an exhausted memory.
MAX_PODS: Final = 100_000


class InvalidWorkload(GpuqError):
    """A workload that cannot be expanded: ``<ref>: <field>: invalid value <v>: expected <what>``."""

    def __init__(self, ref: str, field: str, value: Any, expected: str) -> None:
        super().__init__(f"{ref}: {field}: invalid value {quote(value)}: expected {expected}")


class UnknownField(GpuqError):
    """A field the workload's API does not have: ``<ref>: <field>: unknown field``."""

    def __init__(self, ref: str, field: str) -> None:
        super().__init__(f"{ref}: {field}: unknown field")


def _known(obj: Mapping[str, Any], fields: frozenset[str], ref: str, at: str) -> None:
    for key in obj:
        if key not in fields:
            raise UnknownField(ref, f"{at}{key}")


def is_workload(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") in WORKLOADS


def expand(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects ``doc``'s controller would create; raises :class:`InvalidWorkload`."""
    kind = str(doc.get("kind"))
    meta = doc.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    ref = object_ref(kind, namespace, str(meta.get("name") or ""))
    version = doc.get("apiVersion")
    if version not in WORKLOADS[kind]:
        raise InvalidWorkload(ref, "apiVersion", version, " or ".join(WORKLOADS[kind]))
    spec = _mapping(doc.get("spec"), ref, "spec")
    if version == VOLCANO_BATCH:
        _known(doc, _TOP, ref, "")
        _known(spec, _SPEC_FIELDS[VOLCANO_BATCH], ref, "spec.")
        return _volcano_job(doc, spec, ref)
    template = _template(spec.get("template"), ref, "spec.template")
    if kind == "Job":
        parallelism = _count(spec, "parallelism", ref, default=1)
        completions = _count(spec, "completions", ref, default=parallelism)
        count = min(parallelism, completions)
    else:
        _selector_matches(spec, template, ref)
        count = _count(spec, "replicas", ref, default=1)
    _bounded(count, ref, "spec.parallelism" if kind == "Job" else "spec.replicas")
    name = str(meta["name"])
    first = 0
    if kind == "StatefulSet" and spec.get("ordinals") is not None:
        ordinals = _mapping(spec["ordinals"], ref, "spec.ordinals")
        first = _count(ordinals, "start", ref, default=0, field="spec.ordinals.start")
    owner: list[dict[str, Any]] = []
    made: list[dict[str, Any]] = []
    if kind != "Job":
        controller = _controller(doc, spec, template)
        made.append(controller)
        owner = [_owner_reference(controller)]
    made.extend(_pod(doc, template, f"{name}-{i}", owners=owner) for i in range(first, first + count))
    return made


def _mapping(value: Any, ref: str, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidWorkload(ref, field, value, "a mapping")
    return value


def _count(spec: Mapping[str, Any], key: str, ref: str, *, default: int, field: str = "") -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidWorkload(ref, field or f"spec.{key}", value, "a non-negative integer")
    return value


def _bounded(pods: int, ref: str, field: str) -> None:
    if pods > MAX_PODS:
        raise InvalidWorkload(ref, field, pods, f"at most {MAX_PODS} pods in one workload (simulate's bound)")


def _template(value: Any, ref: str, field: str) -> Mapping[str, Any]:
    template = _mapping(value, ref, field)
    _known(template, _TEMPLATE_FIELDS, ref, f"{field}.")
    spec = _mapping(template.get("spec"), ref, f"{field}.spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InvalidWorkload(ref, f"{field}.spec.containers", containers, "a non-empty list of containers")
    if "metadata" in template:
        meta = _mapping(template["metadata"], ref, f"{field}.metadata")
        for key in ("labels", "annotations"):
            if meta.get(key) is not None:
                _mapping(meta[key], ref, f"{field}.metadata.{key}")
    return template


def _selector_matches(spec: Mapping[str, Any], template: Mapping[str, Any], ref: str) -> None:
    """apps/v1 requires a selector that selects the template's labels (matchLabels; the apiserver
    refuses the object otherwise: "selector does not match template labels")."""
    selector = _mapping(spec.get("selector"), ref, "spec.selector")
    match = selector.get("matchLabels") or {}
    if not isinstance(match, Mapping) or (not match and not selector.get("matchExpressions")):
        raise InvalidWorkload(
            ref, "spec.selector", dict(selector), "matchLabels selecting the template's labels"
        )
    labels = (template.get("metadata") or {}).get("labels") or {}
    for key, value in match.items():
        if labels.get(key) != value:
            raise InvalidWorkload(
                ref, f"spec.selector.matchLabels.{key}", value, "to match spec.template.metadata.labels"
            )


def _pod(
    doc: Mapping[str, Any],
    template: Mapping[str, Any],
    name: str,
    *,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler_name: str = "",
    priority_class: str = "",
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta = doc.get("metadata") or {}
    tmeta = template.get("metadata") or {}
    pod_meta: dict[str, Any] = {"name": name, "namespace": str(meta.get("namespace") or "default")}
    if owners:
        pod_meta["ownerReferences"] = owners
    merged_labels = {**(tmeta.get("labels") or {}), **(labels or {})}
    merged_annotations = {**(tmeta.get("annotations") or {}), **(annotations or {})}
    if merged_labels:
        pod_meta["labels"] = merged_labels
    if merged_annotations:
        pod_meta["annotations"] = merged_annotations
    if meta.get("creationTimestamp"):
        pod_meta["creationTimestamp"] = meta["creationTimestamp"]
    spec = dict(template["spec"])
    if scheduler_name and not spec.get("schedulerName"):
        spec["schedulerName"] = scheduler_name
    if priority_class and not spec.get("priorityClassName"):
        spec["priorityClassName"] = priority_class
    return {"apiVersion": kinds.POD.api_version, "kind": kinds.POD.kind, "metadata": pod_meta, "spec": spec}


def _controller(
    doc: Mapping[str, Any], spec: Mapping[str, Any], template: Mapping[str, Any]
) -> dict[str, Any]:
    """The object that owns the pods: the ReplicaSet or StatefulSet itself, or for a Deployment the
    ReplicaSet its controller makes (``<name>-<hash of the template>``, the Deployment's selector).
    Kept in the simulation: topology spread's system defaults select pods by their controller."""
    meta = doc.get("metadata") or {}
    kind = str(doc.get("kind"))
    if kind != "Deployment":
        return {**doc, "metadata": dict(meta)}
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, default=str).encode()).hexdigest()[:10]
    rs_meta: dict[str, Any] = {
        "name": f"{meta['name']}-{digest}",
        "namespace": str(meta.get("namespace") or "default"),
    }
    for key in ("labels", "creationTimestamp"):
        if meta.get(key):
            rs_meta[key] = meta[key]
    rs_spec = {"replicas": spec.get("replicas", 1), "selector": spec.get("selector"), "template": template}
    return {"apiVersion": APPS, "kind": kinds.REPLICA_SET.kind, "metadata": rs_meta, "spec": rs_spec}


def _owner_reference(controller: Mapping[str, Any]) -> dict[str, Any]:
    meta = controller.get("metadata") or {}
    reference: dict[str, Any] = {
        "apiVersion": controller.get("apiVersion"),
        "kind": controller.get("kind"),
        "name": meta.get("name"),
        "controller": True,
    }
    if meta.get("uid"):
        reference["uid"] = meta["uid"]
    return reference


def _volcano_job(doc: Mapping[str, Any], spec: Mapping[str, Any], ref: str) -> list[dict[str, Any]]:
    meta = doc.get("metadata") or {}
    name = str(meta["name"])
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise InvalidWorkload(ref, "spec.tasks", tasks, "a non-empty list of tasks")
    queue = spec.get("queue") or DEFAULT_QUEUE
    if not isinstance(queue, str):
        raise InvalidWorkload(ref, "spec.queue", queue, "a Queue name")
    # Volcano's job admission webhook sets an unset spec.schedulerName to its scheduler's name.
    scheduler = spec.get("schedulerName") or VOLCANO_SCHEDULER
    if not isinstance(scheduler, str):
        raise InvalidWorkload(ref, "spec.schedulerName", scheduler, "a scheduler name")
    uid = meta.get("uid")
    group = f"{name}-{uid}" if uid else name
    seen: set[str] = set()
    parsed: list[tuple[str, int, int, Mapping[str, Any]]] = []
    for index, raw in enumerate(tasks):
        at = f"spec.tasks[{index}]"
        task = _mapping(raw, ref, at)
        _known(task, _TASK_FIELDS, ref, f"{at}.")
        task_name = task.get("name") or f"{DEFAULT_TASK}{index}"
        if not isinstance(task_name, str):
            raise InvalidWorkload(ref, f"{at}.name", task_name, "a task name")
        if task_name in seen:
            raise InvalidWorkload(ref, f"{at}.name", task_name, "a name no other task has")
        seen.add(task_name)
        replicas = _count(task, "replicas", ref, default=0, field=f"{at}.replicas")
        minimum = _count(task, "minAvailable", ref, default=replicas, field=f"{at}.minAvailable")
        if minimum > replicas:
            raise InvalidWorkload(ref, f"{at}.minAvailable", minimum, f"at most replicas ({replicas})")
        parsed.append((task_name, replicas, minimum, _template(task.get("template"), ref, f"{at}.template")))
    total_min = sum(minimum for _, _, minimum, _ in parsed)
    min_member = _count(spec, "minAvailable", ref, default=0) or total_min
    _bounded(sum(replicas for _, replicas, _, _ in parsed), ref, "spec.tasks[*].replicas")
    if min_member > sum(replicas for _, replicas, _, _ in parsed):
        raise InvalidWorkload(ref, "spec.minAvailable", min_member, "at most the sum of the tasks' replicas")
    out: list[dict[str, Any]] = [
        _podgroup(doc, group, queue=queue, min_member=min_member, tasks=parsed, ref=ref)
    ]
    for task_name, replicas, _, template in parsed:
        for i in range(replicas):
            annotations = {
                GROUP_NAME: group,
                JOB_NAME: name,
                QUEUE_NAME: queue,
                TASK_SPEC: task_name,
                TASK_INDEX: str(i),
            }
            labels = {JOB_NAME: name, QUEUE_NAME: queue, TASK_SPEC: task_name, TASK_INDEX: str(i)}
            out.append(
                _pod(
                    doc,
                    template,
                    f"{name}-{task_name}-{i}",
                    annotations=annotations,
                    labels=labels,
                    scheduler_name=scheduler,
                    priority_class=str(spec.get("priorityClassName") or ""),
                )
            )
    return out


def _podgroup(
    doc: Mapping[str, Any],
    group: str,
    *,
    queue: str,
    min_member: int,
    tasks: list[tuple[str, int, int, Mapping[str, Any]]],
    ref: str,
) -> dict[str, Any]:
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    pg_meta: dict[str, Any] = {"name": group, "namespace": str(meta.get("namespace") or "default")}
    for key in ("annotations", "labels", "creationTimestamp"):
        if meta.get(key):
            pg_meta[key] = meta[key]
    pg_spec: dict[str, Any] = {
        "minMember": min_member,
        "minTaskMember": {name: minimum for name, _, minimum, _ in tasks},
        "queue": queue,
    }
    minimum = _min_resources(tasks, min_member, ref)
    if minimum:
        pg_spec["minResources"] = minimum
    if spec.get("priorityClassName"):
        pg_spec["priorityClassName"] = spec["priorityClassName"]
    return {
        "apiVersion": kinds.POD_GROUP.api_version,
        "kind": kinds.POD_GROUP.kind,
        "metadata": pg_meta,
        "spec": pg_spec,
    }


def _min_resources(
    tasks: list[tuple[str, int, int, Mapping[str, Any]]], min_member: int, ref: str
) -> dict[str, str]:
    """Volcano's ``calcPGMinResources`` (tasks of equal priority, in order): with minMember below the
    sum of the tasks' minAvailable, the requests of the first minMember pods; else every task's
    minAvailable pods, filled up to minMember with the tasks' other replicas."""
    counts: list[tuple[Mapping[str, Any], int]] = []
    if min_member < sum(minimum for _, _, minimum, _ in tasks):
        left = min_member
        for _, replicas, _, template in tasks:
            take = min(left, replicas)
            counts.append((template, take))
            left -= take
    else:
        left = min_member - sum(minimum for _, _, minimum, _ in tasks)
        for _, replicas, minimum, template in tasks:
            extra = min(left, replicas - minimum)
            counts.append((template, minimum + extra))
            left -= extra
    total = Resources()
    for index, (template, count) in enumerate(counts):  # one entry per task, in the tasks' order
        if count:
            where = f"{ref}: spec.tasks[{index}].template.spec"
            total = total + pod_requests(template["spec"], where).scaled(count)
    return dict(total.to_quantities())
