"""Pod admission (CREATE): the checks a Pod is denied or warned by, and the defaults filled into it.

Validation (:func:`validate_pod`): the scoring annotations of enabled plugins; capacity-card's
``card.name`` alternatives (one Kubernetes resource) and task mode against the queue's whole quota
(a card type no node offers yet is admitted with a warning while the quota holds the request, with
``autoscaledCardTypes``);
gpu-quota's tensor-fusion annotations and per-workload (``single``) limits; capacity-scheduling's
denial of a request over an ElasticQuota's ``max`` itself and warning when ``max - used`` leaves no
room. Mutation (:func:`mutate_pod`):
``card.name`` normalised, the queue annotation defaulted, tensor-fusion annotations filled from the
namespace's GPUResourceQuota defaults, and optionally ``spec.schedulerName``. Routing by kind and
operation is :mod:`webhook.admission`'s; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model.capacity_card.demand import pod_card_demand
from gpuq_k8s.common.model.capacity_card.task import task_quota_refusal
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT
from gpuq_k8s.common.model.cards.catalog import CardCatalog, card_names_share_resource, pod_card_resources
from gpuq_k8s.common.model.cards.names import normalise_card_names, parse_card_names
from gpuq_k8s.common.model.crd import PodGroup
from gpuq_k8s.common.model.elastic.quota import ElasticQuota, ElasticQuotaInfo
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.gpu_quota.request import GPURequest, request_from_annotations
from gpuq_k8s.common.model.gpu_share.admission import never_placed
from gpuq_k8s.common.model.gpu_share.request import share_request
from gpuq_k8s.common.model.pods import DEFAULT_SCHEDULER, PodInfo
from gpuq_k8s.common.model.quantity import format_units
from gpuq_k8s.common.model.queues import queue_of
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.webhook import jsonpatch
from gpuq_k8s.webhook.options import AdmissionOptions, card_args, check_scoring_annotations
from gpuq_k8s.webhook.parsed import CACHE, namespace_gpu_limits, namespace_gpu_quota, parsed_queue_quota
from gpuq_k8s.webhook.review import Decision, PatchOp, deny
from gpuq_k8s.webhook.view import ClusterView

ANNOTATIONS_PATH: Final = ("metadata", "annotations")


def validate_pod(obj: Mapping[str, Any], view: ClusterView, options: AdmissionOptions) -> Decision:
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
                f"{pod.ref}: {ann.CARD_NAME}: invalid value {quote(annotations[ann.CARD_NAME])}: expected "
                f"alternatives that all map to one Kubernetes resource ({per_name})"
            )

    problem = _gpu_single_problem(pod, catalog, view) if options.gpu_quota else None
    if problem:
        return deny(problem)
    if options.gpu_quota and pod.scheduler_name == options.scheduler_name:
        problem = _gpu_share_problem(pod, view)
        if problem:
            return deny(problem)

    if options.capacity_card and pod.scheduler_name == options.scheduler_name:
        problem = _pod_queue_problem(pod, catalog, view, options, warnings)
        if problem:
            return deny(problem, tuple(warnings))

    if options.capacity_scheduling:
        problem = _elastic_problem(pod, view, warnings)
        if problem:
            return deny(problem, tuple(warnings))
    return Decision(warnings=tuple(warnings))


def _gpu_single_problem(pod: PodInfo, catalog: CardCatalog, view: ClusterView) -> str | None:
    """gpu-quota: the tensor-fusion annotations' syntax, the namespace's per-workload limits, and its
    totals (``total.requests``/``limits`` TFLOPS and VRAM, ``maxWorkers``) against the request alone:
    a pod asking more than the namespace's whole quota can never be scheduled (its usage, which comes
    and goes, is the scheduler's to judge)."""
    limits = namespace_gpu_limits(view, pod.namespace)
    gpu_quota = limits.quota(pod.namespace) if limits is not None else None
    request = request_from_annotations(pod, gpu_quota)  # annotation syntax, with or without a quota
    if limits is None:
        return None
    cards = pod_card_resources(pod.requests, catalog) if request is None else None
    if cards:
        # No tensor-fusion annotations: before a node is chosen only the GPU count is known.
        request = GPURequest.count_only(_whole_cards(cards))
    # The limits store holds no usage: its total check is whether the quota could ever hold the pod.
    refusal = limits.check(pod.namespace, request) if request is not None else None
    if refusal is None:
        return None
    field = refusal.error.resource if isinstance(refusal.error, QuotaExceeded) else ""
    return f"{pod.ref}: {refusal.message}{_asked_by(pod, field)}"


def _gpu_share_problem(pod: PodInfo, view: ClusterView) -> str | None:
    """gpu-quota's GPUShare: a shared-GPU pod (tensor-fusion's requests, no GPU resource) asking more
    per GPU, or more GPUs, than any node's shareable GPUs could ever hold (Semantics 19)."""
    quota = namespace_gpu_quota(view, pod.namespace)
    request = share_request(pod, quota)
    if request is None:
        return None
    never = never_placed(request, view.shared_gpus())
    if never is None:
        return None
    named = (ann.TF_TFLOPS_REQUEST, ann.TF_VRAM_REQUEST, ann.TF_GPU_COUNT)
    stated = ", ".join(f"{key}={quote(pod.annotations[key])}" for key in named if key in pod.annotations)
    return f"{pod.ref}: {stated}: {never}"


def _asked_by(pod: PodInfo, field: str) -> str:
    """The tensor-fusion annotations behind a refusal of quota ``field`` (``total.requests.tflops``,
    ``single.maxGPUCount``, ...), as the pod states them."""
    leaf = field.rsplit(".", 1)[-1]
    kind = "limit" if ".maxLimits." in field or ".limits." in field else "request"
    named = [f"tensor-fusion.ai/{leaf}-{kind}"] if leaf in ("tflops", "vram") else []
    if named or leaf == "maxGPUCount" or field.endswith("single.max.workers"):  # the design layout's name
        named.append(ann.TF_GPU_COUNT)
    stated = [f"{key}={quote(pod.annotations[key])}" for key in named if key in pod.annotations]
    return f"; asked by {', '.join(stated)}" if stated else ""


def _whole_cards(cards: Resources) -> int:
    return max(1, -(-sum(cards.values()) // CARD_UNIT))


def _pod_queue_problem(
    pod: PodInfo, catalog: CardCatalog, view: ClusterView, options: AdmissionOptions, warnings: list[str]
) -> str | None:
    """Task mode (capacity-card.md "Task Allocatable Check") against the queue's whole quota: some
    card type among the pod's candidates must hold the request, or no node can ever take it. With
    ``autoscaledCardTypes`` a card type no node offers yet is a candidate (a node autoscaler may add
    one): admitted with a warning when its quota holds the request (design.md Semantics 16)."""
    args = card_args(options)
    demand = pod_card_demand(pod, catalog, autoscaled=args.autoscaled_card_types)
    unoffered = ["|".join(names) for names in demand.groups if all(name not in catalog for name in names)]
    groups: dict[str, PodGroup] = {}
    group_name = pod.annotations.get(ann.GROUP_NAME)
    raw_group = view.pod_group(pod.namespace, group_name) if group_name else None
    if raw_group is not None:
        group = CACHE.get(raw_group, "podgroup", PodGroup.from_dict)
        groups[group.key] = group
    raw_queue = view.queue(queue_of(pod, groups))
    if raw_queue is None:
        return None  # Semantics 7: no such Queue, no queue quota
    quota = parsed_queue_quota(raw_queue)
    warnings.extend(event.message for event in quota.events)
    # Against the queue's whole quota: usage is the scheduler's business (nothing allocated).
    refusal = task_quota_refusal(quota, demand, catalog, args)
    if refusal is not None:
        return f"{pod.ref}: {refusal.message}"
    for offering in unoffered:
        warnings.append(
            f"{pod.ref}: no node offers {offering} yet: the pod waits for a node offering it "
            "(a node autoscaler adds one for a pending pod)"
        )
    return None


def _elastic_problem(pod: PodInfo, view: ClusterView, warnings: list[str]) -> str | None:
    """capacity-scheduling.md: a request over ``max`` itself can never fit (denied, design.md Semantics
    14); one within ``max`` but over ``max - used`` waits (or preempts) in the scheduler: a warning."""
    for raw in view.elastic_quotas(pod.namespace):
        try:
            quota = ElasticQuota.from_dict(raw)
        except InvalidValue:
            continue
        info = ElasticQuotaInfo(quota.namespace, quota.name, quota.min, quota.max, quota.status_used)
        for key in info.over_max_with(pod.requests):
            asked, limit = pod.requests[key], quota.max[key]
            if asked > limit:
                error = QuotaExceeded(
                    key,
                    format_units(key, asked),
                    format_units(key, limit),
                    format_units(key, limit),
                    scope=f"{quota.ref} (max)",
                    unresolvable=True,
                )
                return f"{pod.ref}: {error}"
            left = max(limit - quota.status_used.amount(key), 0)
            warnings.append(
                f"{pod.ref}: {key}: requested {format_units(key, asked)}, {quota.ref} has "
                f"{format_units(key, left)} left of max {format_units(key, limit)}; "
                "the pod waits until usage drops"
            )
    return None


def mutate_pod(
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
