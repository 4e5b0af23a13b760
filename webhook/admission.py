"""Admission decisions: which checks and defaults apply to which object, as pure functions.

Every rule comes from :mod:`common.model` (card annotations and the card catalog from ``cards``, queue
membership from ``queues``, the job- and task-mode quota checks from ``capacity_card``, ElasticQuota and
GPUResourceQuota validation from ``elastic`` and ``gpu_quota``); this module only composes them:

* **denials** for what can never fit: malformed annotations or specs, a pod whose card alternatives map
  to different resources, a request larger than the whole quota of its queue, a per-workload
  GPUResourceQuota limit, a second quota in a namespace;
* **warnings** for what depends on usage right now (an ElasticQuota whose ``status.used`` leaves no
  room): the scheduler is the authority and usage may drop before the pod is scheduled;
* **mutations** (idempotent JSONPatch): ``card.name`` normalised, the queue annotation defaulted,
  tensor-fusion annotations filled from the namespace's GPUResourceQuota defaults, and optionally
  ``spec.schedulerName`` set for pods that request card resources.

Which of these rules apply is the scheduler configuration's business (:mod:`webhook.options`,
design.md Semantics 10): a plugin's rules only when that plugin is enabled, with its arguments.

No I/O: :func:`review` is what ``gpuq simulate --admission`` calls with a :class:`~webhook.view.StaticView`,
and :class:`Admission` is what the HTTPS server calls with the informer-backed view.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from common.model import annotations as ann
from common.model.capacity_card.args import CapacityCardArgs
from common.model.capacity_card.demand import pod_card_demand
from common.model.capacity_card.enqueue import check_enqueue
from common.model.capacity_card.ledger import QueueLedger
from common.model.capacity_card.quota import QueueQuota, queue_quota
from common.model.capacity_card.task import task_quota_refusal
from common.model.cards.amounts import parse_card_quota, parse_card_request
from common.model.cards.card_type import CARD_UNIT
from common.model.cards.catalog import CardCatalog, card_names_share_resource, pod_card_resources
from common.model.cards.names import normalise_card_names, parse_card_names
from common.model.crd import PodGroup, Queue
from common.model.elastic.quota import ElasticQuota, ElasticQuotaInfo, validate_elastic_quota
from common.model.errors import GpuqError, InvalidValue
from common.model.gpu_quota.quota import GPUResourceQuota, validate_gpu_resource_quota
from common.model.gpu_quota.request import GPURequest, request_from_annotations
from common.model.pods import DEFAULT_SCHEDULER, PodInfo
from common.model.quantity import format_units
from common.model.queues import queue_of
from common.model.resources import Resources
from webhook import jsonpatch, ratchet
from webhook.options import AdmissionOptions, check_scoring_annotations
from webhook.parsed import CACHE, namespace_gpu_limits, namespace_gpu_quota
from webhook.review import ALLOW, AdmissionRequest, Decision, PatchOp, deny
from webhook.shape import check_shape
from webhook.view import (
    ELASTIC_QUOTA,
    GPU_RESOURCE_QUOTA,
    POD,
    POD_GROUP,
    QUEUE,
    ClusterView,
    LiveLookups,
    Obj,
    group_of,
)

GroupKind = tuple[str, str]


_REVIEWED: Final = frozenset({POD, QUEUE, POD_GROUP, ELASTIC_QUOTA, GPU_RESOURCE_QUOTA})
ANNOTATIONS_PATH: Final = ("metadata", "annotations")


DEFAULT_OPTIONS: Final = AdmissionOptions()


class Admission:
    """The server's admitter: routes an AdmissionRequest to :func:`validate` or :func:`mutate`.

    With ``live`` (the informer view), a decision that refuses, or that missed the PodGroup a Pod names,
    while the cache lacked an object it looked up (a Queue and its PodGroup applied in one
    ``kubectl apply -f``), is taken again once after a live GET of the missing objects.
    """

    def __init__(
        self,
        view: ClusterView,
        options: AdmissionOptions = DEFAULT_OPTIONS,
        live: LiveLookups | None = None,
    ) -> None:
        self.view = view
        self.options = options
        self.live = live

    async def review(self, request: AdmissionRequest, *, mutate: bool) -> Decision:
        decide = self.mutate if mutate else self.validate
        live = self.live
        if live is None:
            return decide(request)
        live.take_misses()  # no await between this, the decision and the next take: the misses are ours
        decision = decide(request)
        misses = live.take_misses()
        if not misses or (decision.allowed and all(kind != POD_GROUP[1] for kind, _, _ in misses)):
            return decision
        if await live.fetch(misses):
            live.take_misses()
            decision = decide(request)
            live.take_misses()
        return decision

    def validate(self, request: AdmissionRequest) -> Decision:
        obj = _with_namespace(request)
        if obj is None:
            return ALLOW
        return validate(
            (request.kind.group, request.kind.kind),
            request.operation,
            obj,
            self.view,
            old=request.old_object,
            options=self.options,
        )

    def mutate(self, request: AdmissionRequest) -> Decision:
        obj = _with_namespace(request)
        if obj is None:
            return ALLOW
        return mutate(
            (request.kind.group, request.kind.kind), request.operation, obj, self.view, self.options
        )


def _with_namespace(request: AdmissionRequest) -> dict[str, Any] | None:
    """The object, with the request's namespace filled in (a Pod from ``generateName`` has no name
    yet, and an object posted without ``metadata.namespace`` only gets it from the request)."""
    obj = request.object
    if obj is None or request.sub_resource:
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    if request.namespace and not meta.get("namespace"):
        obj = {**obj, "metadata": {**meta, "namespace": request.namespace}}
        meta = obj["metadata"]
    if not meta.get("name") and (request.name or meta.get("generateName")):
        obj = {**obj, "metadata": {**meta, "name": request.name or f"{meta['generateName']}<generated>"}}
    return obj


# --------------------------------------------------------------------------------------------------
# Entry points


def review(
    obj: Mapping[str, Any],
    operation: str,
    view: ClusterView,
    *,
    old: Mapping[str, Any] | None = None,
    options: AdmissionOptions = DEFAULT_OPTIONS,
) -> Decision:
    """Admit one object offline as the apiserver would: mutate, then validate the mutated object.

    The kind comes from the object's ``apiVersion`` and ``kind``. The result carries the mutation's
    ``patch`` and the ``patched`` object, and the validation's verdict and message; warnings of both
    steps are kept. Used by ``gpuq simulate --admission``.
    """
    kind = (group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or ""))
    mutation = mutate(kind, operation, obj, view, options)
    patched = jsonpatch.apply(obj, mutation.patch) if mutation.patch else dict(obj)
    verdict = validate(kind, operation, patched, view, old=old, options=options)
    return replace(
        verdict, patch=mutation.patch, patched=patched, warnings=mutation.warnings + verdict.warnings
    )


def validate(
    kind: GroupKind,
    operation: str,
    obj: Mapping[str, Any],
    view: ClusterView,
    *,
    old: Mapping[str, Any] | None = None,
    options: AdmissionOptions = DEFAULT_OPTIONS,
) -> Decision:
    """The validating webhook's verdict on one object (design.md, "Webhook endpoints")."""
    if operation == "UPDATE" and ratchet.settled(obj, old):
        return ALLOW  # Semantics 13: deletion and metadata-only changes never wait on gpuq's rules
    old = old if operation == "UPDATE" else None
    try:
        if kind in _REVIEWED and operation in ("CREATE", "UPDATE"):
            check_shape(obj, kind[1])
        if kind == POD and operation == "CREATE":
            return _validate_pod(obj, view, options)
        if operation not in ("CREATE", "UPDATE"):
            return ALLOW
        # Semantics 10: a plugin's rules apply only when the configuration enables it.
        if kind == QUEUE and options.capacity_card:
            return _validate_queue(obj, old)
        if kind == POD_GROUP and options.capacity_card:
            return _validate_pod_group(obj, view, old, options)
        update = operation == "UPDATE"
        if kind == ELASTIC_QUOTA and options.capacity_scheduling:
            existing = view.elastic_quotas
            return _validate_namespace_quota(
                kind[1], validate_elastic_quota, existing, obj, old=old, update=update
            )
        if kind == GPU_RESOURCE_QUOTA and options.gpu_quota:
            parse, existing = validate_gpu_resource_quota, view.gpu_resource_quotas
            return _validate_namespace_quota(kind[1], parse, existing, obj, old=old, update=update)
    except GpuqError as err:
        return deny(str(err))
    return ALLOW


def mutate(
    kind: GroupKind,
    operation: str,
    obj: Mapping[str, Any],
    view: ClusterView,
    options: AdmissionOptions = DEFAULT_OPTIONS,
) -> Decision:
    """The mutating webhook's patch for one object; empty when nothing is to change.

    A mutation never denies: an object it cannot read is left as is for validation to judge.
    """
    if kind != POD or operation != "CREATE":
        return ALLOW
    try:
        check_shape(obj, kind[1])
        ops, warnings = _mutate_pod(obj, view, options)
    except GpuqError:
        return ALLOW
    return Decision(patch=tuple(ops), warnings=tuple(warnings)) if ops or warnings else ALLOW


# --------------------------------------------------------------------------------------------------
# Queue and PodGroup (capacity-card.md "API Design")


def _validate_queue(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> Decision:
    if old is not None and ratchet.annotation(obj, ann.CARD_QUOTA) == ratchet.annotation(old, ann.CARD_QUOTA):
        return ALLOW  # the card quota is all gpuq checks on a Queue
    queue = Queue.from_dict(obj)
    if ann.CARD_QUOTA in queue.annotations:
        parse_card_quota(queue.annotations[ann.CARD_QUOTA], queue.ref)
    return ALLOW


def _validate_pod_group(
    obj: Mapping[str, Any], view: ClusterView, old: Mapping[str, Any] | None, options: AdmissionOptions
) -> Decision:
    group = PodGroup.from_dict(obj)
    text = group.annotations.get(ann.CARD_REQUEST)
    if old is not None and _same_queue_and_request(old, group, text):
        # A PodGroup whose queue has since closed, or whose card request was malformed before the
        # webhook existed, is not blocked: only a changed queue or card request is checked again.
        return ALLOW
    request = _card_request(group, text, old)
    raw_queue = view.queue(group.queue)
    if raw_queue is None:
        return deny(
            f"{group.ref}: spec.queue: invalid value {group.queue!r}: expected the name of an existing Queue"
        )
    quota = CACHE.get(raw_queue, "quota", _queue_quota)
    warnings = tuple(event.message for event in quota.events)
    if not quota.open:
        state = (raw_queue.get("status") or {}).get("state")
        return deny(
            f"{group.ref}: spec.queue: invalid value {group.queue!r}: expected an Open Queue "
            f"(Queue/{quota.name} is {state})",
            warnings,
        )
    # Job mode against the queue's whole quota: usage is the scheduler's business (an empty ledger).
    refusal = check_enqueue(quota, QueueLedger(quota.name), request, _card_args(options))
    if refusal is not None:
        return deny(f"{group.ref}: {ann.CARD_REQUEST}: {refusal.message}", warnings)
    return Decision(warnings=warnings)


def _card_request(group: PodGroup, text: str | None, old: Mapping[str, Any] | None) -> Resources:
    """The PodGroup's card request; on UPDATE, an unchanged malformed one is set aside (the ratchet: it
    must neither block nor hide a problem of the changed queue)."""
    if text is None:
        return Resources()
    try:
        return parse_card_request(text, group.ref)
    except GpuqError:
        if old is not None and ratchet.annotation(old, ann.CARD_REQUEST) == text:
            return Resources()
        raise


def _same_queue_and_request(old: Mapping[str, Any], group: PodGroup, text: str | None) -> bool:
    meta = old.get("metadata")
    before = (meta.get("annotations") or {}) if isinstance(meta, Mapping) else {}
    spec = old.get("spec")
    before_queue = (spec.get("queue") if isinstance(spec, Mapping) else None) or ann.DEFAULT_QUEUE
    return bool(before.get(ann.CARD_REQUEST) == text and before_queue == group.queue)


@functools.lru_cache(maxsize=16)
def _card_args(options: AdmissionOptions) -> CapacityCardArgs:
    return CapacityCardArgs(card_unlimited_cpu_memory=options.card_unlimited_cpu_memory)


# --------------------------------------------------------------------------------------------------
# Pods


def _validate_pod(obj: Mapping[str, Any], view: ClusterView, options: AdmissionOptions) -> Decision:
    pod = PodInfo.from_dict(obj)
    annotations = pod.annotations
    catalog = view.card_catalog()
    warnings: list[str] = []
    if pod.scheduler_name == options.scheduler_name:
        check_scoring_annotations(annotations, pod.ref, options)

    if options.capacity_card and ann.CARD_NAME in annotations:
        names = parse_card_names(annotations[ann.CARD_NAME], pod.ref)
        if not card_names_share_resource(names, catalog):
            per_name = ", ".join(f"{n} -> {catalog.resource_of(n)}" for n in names if n in catalog)
            return deny(
                f"{pod.ref}: {ann.CARD_NAME}: invalid value {annotations[ann.CARD_NAME]!r}: expected "
                f"alternatives that all map to one Kubernetes resource ({per_name})"
            )

    problem = _gpu_single_problem(pod, catalog, view) if options.gpu_quota else None
    if problem:
        return deny(problem)

    if options.capacity_card and pod.scheduler_name == options.scheduler_name:
        problem = _pod_queue_problem(pod, catalog, view, options, warnings)
        if problem:
            return deny(problem, tuple(warnings))

    if options.capacity_scheduling:
        warnings.extend(_elastic_warnings(pod, view))
    return Decision(warnings=tuple(warnings))


def _gpu_single_problem(pod: PodInfo, catalog: CardCatalog, view: ClusterView) -> str | None:
    """gpu-quota: the tensor-fusion annotations' syntax, and the namespace's per-workload limits."""
    limits = namespace_gpu_limits(view, pod.namespace)
    gpu_quota = limits.quota(pod.namespace) if limits is not None else None
    request = request_from_annotations(pod, gpu_quota)  # annotation syntax, with or without a quota
    if limits is None:
        return None
    cards = pod_card_resources(pod.requests, catalog) if request is None else None
    if cards:
        # No tensor-fusion annotations: before a node is chosen only the GPU count is known.
        request = GPURequest.count_only(_whole_cards(cards))
    refusal = limits.check_single(pod.namespace, request) if request is not None else None
    return None if refusal is None else f"{pod.ref}: {refusal.message}"


def _whole_cards(cards: Resources) -> int:
    return max(1, -(-sum(cards.values()) // CARD_UNIT))


def _pod_queue_problem(
    pod: PodInfo, catalog: CardCatalog, view: ClusterView, options: AdmissionOptions, warnings: list[str]
) -> str | None:
    """Task mode (capacity-card.md "Task Allocatable Check") against the queue's whole quota: some
    card type among the pod's candidates must hold the request, or no node can ever take it."""
    demand = pod_card_demand(pod, catalog)
    groups: dict[str, PodGroup] = {}
    group_name = pod.annotations.get(ann.GROUP_NAME)
    raw_group = view.pod_group(pod.namespace, group_name) if group_name else None
    if raw_group is not None:
        group = CACHE.get(raw_group, "podgroup", PodGroup.from_dict)
        groups[group.key] = group
    raw_queue = view.queue(queue_of(pod, groups))
    if raw_queue is None:
        return None  # Semantics 7: no such Queue, no queue quota
    quota = CACHE.get(raw_queue, "quota", _queue_quota)
    warnings.extend(event.message for event in quota.events)
    # Against the queue's whole quota: usage is the scheduler's business (nothing allocated).
    refusal = task_quota_refusal(quota, demand, catalog, _card_args(options))
    return None if refusal is None else f"{pod.ref}: {refusal.message}"


def _queue_quota(raw: Mapping[str, Any]) -> QueueQuota:
    return queue_quota(Queue.from_dict(raw))


def _elastic_warnings(pod: PodInfo, view: ClusterView) -> list[str]:
    """capacity-scheduling.md: a request over ``max - used`` waits (or preempts) in the scheduler."""
    warnings = []
    for raw in view.elastic_quotas(pod.namespace):
        try:
            quota = ElasticQuota.from_dict(raw)
        except InvalidValue:
            continue
        info = ElasticQuotaInfo(quota.namespace, quota.name, quota.min, quota.max, quota.status_used)
        for key in info.over_max_with(pod.requests):
            left = max(quota.max[key] - quota.status_used.amount(key), 0)
            warnings.append(
                f"{pod.ref}: {key}: requested {format_units(key, pod.requests[key])}, {quota.ref} has "
                f"{format_units(key, left)} left of max {format_units(key, quota.max[key])}; "
                "the pod waits until usage drops"
            )
    return warnings


def _mutate_pod(
    obj: Mapping[str, Any], view: ClusterView, options: AdmissionOptions
) -> tuple[list[PatchOp], list[str]]:
    pod = PodInfo.from_dict(obj)
    catalog = view.card_catalog()
    cards = pod_card_resources(pod.requests, catalog)
    ops: list[PatchOp] = []
    scheduler = pod.scheduler_name
    if options.set_scheduler_name and cards and scheduler in ("", DEFAULT_SCHEDULER):
        scheduler = options.scheduler_name
        ops += jsonpatch.set_entries(obj, ("spec",), {"schedulerName": scheduler})

    added: dict[str, str] = {}
    card_name = pod.annotations.get(ann.CARD_NAME) if options.capacity_card else None
    if isinstance(card_name, str):
        normal = normalise_card_names(card_name)
        if normal != card_name:
            added[ann.CARD_NAME] = normal
    if (
        options.capacity_card
        and scheduler == options.scheduler_name
        and not pod.annotations.get(ann.QUEUE_NAME)
    ):
        group_name = pod.annotations.get(ann.GROUP_NAME)
        raw_group = view.pod_group(pod.namespace, group_name) if group_name else None
        queue = str(((raw_group or {}).get("spec") or {}).get("queue") or ann.DEFAULT_QUEUE)
        added[ann.QUEUE_NAME] = queue

    quota = namespace_gpu_quota(view, pod.namespace) if options.gpu_quota else None
    has_tf = any(key in pod.annotations for key in ann.TENSOR_FUSION_ANNOTATIONS)
    if quota is not None and (cards or has_tf):
        defaults = quota.default_annotations(pod.annotations)
        if defaults and cards and ann.TF_GPU_COUNT not in pod.annotations:
            # Without it the request counts as one GPU (tensor-fusion's default) and a pod holding
            # several cards would be charged for one.
            count = _whole_cards(cards)
            if count > 1:
                defaults[ann.TF_GPU_COUNT] = str(count)
        added.update(defaults)
    if added:
        ops += jsonpatch.set_entries(obj, ANNOTATIONS_PATH, added)
    return ops, []


# --------------------------------------------------------------------------------------------------
# ElasticQuota and GPUResourceQuota


def _validate_namespace_quota(
    kind: str,
    parse: Callable[[Mapping[str, Any]], ElasticQuota | GPUResourceQuota],
    existing_in: Callable[[str], Sequence[Obj]],
    obj: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None,
    update: bool,
) -> Decision:
    """An ElasticQuota or GPUResourceQuota: valid at CREATE, and one per namespace (a second one is
    refused); an UPDATE is judged only on problems the old object did not have (the ratchet)."""
    if update:
        ratchet.check_update(parse, obj, old)
        return ALLOW
    quota = parse(obj)
    for item in existing_in(quota.namespace):
        other = str(((item.get("metadata") or {}).get("name")) or "")
        if other and other != quota.name:
            return deny(
                f"{quota.ref}: metadata.name: namespace {quota.namespace} already has {kind} {other!r}: "
                f"expected at most one {kind} per namespace"
            )
    return ALLOW
