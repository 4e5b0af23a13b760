"""Admission decisions: which checks and defaults apply to which object, as pure functions.

Every rule comes from :mod:`common.model` (card annotations and the card catalog from ``cards``, queue
membership from ``queues``, the job- and task-mode quota checks from ``capacity_card``, ElasticQuota and
GPUResourceQuota validation from ``elastic`` and ``gpu_quota``); this module routes by kind and
operation and composes the rules of Queues, PodGroups and namespace quotas, :mod:`webhook.pods` those of
Pods:

* **denials** for what can never fit: malformed annotations or specs, a pod whose card alternatives map
  to different resources, a request larger than the whole quota of its queue, a per-workload
  GPUResourceQuota limit, a second quota in a namespace;
* **warnings** for what depends on usage right now (an ElasticQuota whose ``status.used`` leaves no
  room): the scheduler is the authority and usage may drop before the pod is scheduled; and for an
  ElasticQuota whose min takes the sum of all min past what the nodes have allocatable;
* **mutations** (idempotent JSONPatch): ``card.name`` normalised, the queue annotation defaulted,
  tensor-fusion annotations filled from the namespace's GPUResourceQuota defaults, and optionally
  ``spec.schedulerName`` set for pods that request card resources.

Which of these rules apply is the scheduler configuration's business (:mod:`webhook.options`,
design.md Semantics 10): a plugin's rules only when that plugin is enabled, with its arguments.

No I/O: :func:`review` is what ``gpuq simulate --admission`` calls with a :class:`~webhook.view.StaticView`,
and :class:`Admission` is what the HTTPS server calls with the informer-backed view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.capacity_card.enqueue import check_enqueue
from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger
from gpuq_k8s.common.model.cards.amounts import parse_card_quota, parse_card_request
from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.devices.admission import check_claim_spec
from gpuq_k8s.common.model.devices.claims import ResourceClaim, ResourceClaimTemplate
from gpuq_k8s.common.model.devices.quota import DEFAULT_NAMING
from gpuq_k8s.common.model.elastic import guarantee
from gpuq_k8s.common.model.elastic.quota import ElasticQuota, validate_elastic_quota
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota, validate_gpu_resource_quota
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.common.model.wire import Obj, section
from gpuq_k8s.webhook import jsonpatch, ratchet
from gpuq_k8s.webhook.options import AdmissionOptions, card_args
from gpuq_k8s.webhook.parsed import parsed_queue_quota
from gpuq_k8s.webhook.pods import mutate_pod, validate_pod
from gpuq_k8s.webhook.review import ALLOW, AdmissionRequest, Decision, deny
from gpuq_k8s.webhook.shape import check_shape
from gpuq_k8s.webhook.view import ClusterView, LiveLookups, name_of

# The kinds admission reviews (design.md "Webhook endpoints"); any other object is allowed untouched.
_REVIEWED: Final = frozenset(
    {
        kinds.POD,
        kinds.QUEUE,
        kinds.POD_GROUP,
        kinds.ELASTIC_QUOTA,
        kinds.GPU_RESOURCE_QUOTA,
        kinds.RESOURCE_CLAIM,
        kinds.RESOURCE_CLAIM_TEMPLATE,
    }
)


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
        if not misses or (decision.allowed and all(kind != kinds.POD_GROUP.kind for kind, _, _ in misses)):
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
            kinds.lookup(request.kind.group, request.kind.kind),
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
            kinds.lookup(request.kind.group, request.kind.kind),
            request.operation,
            obj,
            self.view,
            self.options,
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
    kind = kinds.of(obj)
    mutation = mutate(kind, operation, obj, view, options)
    patched = jsonpatch.apply(obj, mutation.patch) if mutation.patch else dict(obj)
    verdict = validate(kind, operation, patched, view, old=old, options=options)
    return replace(
        verdict, patch=mutation.patch, patched=patched, warnings=mutation.warnings + verdict.warnings
    )


def validate(
    kind: Kind | None,
    operation: str,
    obj: Mapping[str, Any],
    view: ClusterView,
    *,
    old: Mapping[str, Any] | None = None,
    options: AdmissionOptions = DEFAULT_OPTIONS,
) -> Decision:
    """The validating webhook's verdict on one object of ``kind`` (None: a kind gpuq does not know, allowed
    untouched; design.md, "Webhook endpoints")."""
    if operation == "UPDATE" and ratchet.settled(obj, old):
        return ALLOW  # Semantics 13: deletion and metadata-only changes never wait on gpuq's rules
    old = old if operation == "UPDATE" else None
    try:
        if kind is None:
            return ALLOW
        if kind in _REVIEWED and operation in ("CREATE", "UPDATE"):
            check_shape(obj, kind.kind)
        if kind == kinds.POD and operation == "CREATE":
            return validate_pod(obj, view, options)
        if kind in (kinds.RESOURCE_CLAIM, kinds.RESOURCE_CLAIM_TEMPLATE):
            # The spec is immutable: only a CREATE is judged (DynamicResources' rules, Semantics 10).
            if operation == "CREATE" and options.dynamic_resources:
                return _validate_claim(kind, obj, view, options)
            return ALLOW
        if operation not in ("CREATE", "UPDATE"):
            return ALLOW
        # Semantics 10: a plugin's rules apply only when the configuration enables it.
        if kind == kinds.QUEUE and options.capacity_card:
            return _validate_queue(obj, old)
        if kind == kinds.POD_GROUP and options.capacity_card:
            return _validate_pod_group(obj, view, old, options)
        update = operation == "UPDATE"
        if kind == kinds.ELASTIC_QUOTA and options.capacity_scheduling:
            existing = view.elastic_quotas
            decision = _validate_namespace_quota(
                kind.kind, validate_elastic_quota, existing, obj, old=old, update=update
            )
            warnings = _guarantee_warnings(obj, old, view) if decision.allowed else ()
            return replace(decision, warnings=decision.warnings + warnings) if warnings else decision
        if kind == kinds.GPU_RESOURCE_QUOTA and options.gpu_quota:
            parse, existing = validate_gpu_resource_quota, view.gpu_resource_quotas
            return _validate_namespace_quota(kind.kind, parse, existing, obj, old=old, update=update)
    except GpuqError as err:
        return deny(str(err))
    return ALLOW


def mutate(
    kind: Kind | None,
    operation: str,
    obj: Mapping[str, Any],
    view: ClusterView,
    options: AdmissionOptions = DEFAULT_OPTIONS,
) -> Decision:
    """The mutating webhook's patch for one object; empty when nothing is to change.

    A mutation never denies: an object it cannot read is left as is for validation to judge.
    """
    if kind != kinds.POD or operation != "CREATE":
        return ALLOW
    try:
        check_shape(obj, kinds.POD.kind)
        ops, warnings = mutate_pod(obj, view, options)
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
        queue = quote(group.queue)
        return deny(f"{group.ref}: spec.queue: invalid value {queue}: expected the name of an existing Queue")
    quota = parsed_queue_quota(raw_queue)
    warnings = tuple(event.message for event in quota.events)
    if not quota.open:
        state = section(raw_queue, "status").get("state")
        return deny(
            f"{group.ref}: spec.queue: invalid value {quote(group.queue)}: expected an Open Queue "
            f"(Queue/{quota.name} is {state})",
            warnings,
        )
    # Job mode against the queue's whole quota: usage is the scheduler's business (an empty ledger).
    refusal = check_enqueue(quota, QueueLedger(quota.name), request, card_args(options))
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


# --------------------------------------------------------------------------------------------------
# ResourceClaim and ResourceClaimTemplate (docs/design.md "Quota over devices")


def _validate_claim(
    kind: Kind, obj: Mapping[str, Any], view: ClusterView, options: AdmissionOptions
) -> Decision:
    """Parsed as the scheduler parses it (CEL selectors compiled in the same environment), then the
    requests that can never fit the quotas (:func:`~common.model.devices.admission.check_claim_spec`)."""
    if kind == kinds.RESOURCE_CLAIM:
        claim = ResourceClaim.from_dict(obj)
        spec, spec_field, ref, namespace = claim.spec, "spec", claim.ref, claim.namespace
    else:
        template = ResourceClaimTemplate.from_dict(obj)
        spec, spec_field, namespace = template.spec, "spec.spec", template.namespace
        ref = kinds.RESOURCE_CLAIM_TEMPLATE.ref(namespace, template.name)
    queue_quotas = [parsed_queue_quota(q) for q in view.all_queues()] if options.capacity_card else None
    max_gpu_count = None
    if options.gpu_quota:
        for raw in view.gpu_resource_quotas(namespace):
            try:
                quota = GPUResourceQuota.from_dict(raw)
            except GpuqError:
                continue  # one that predates the webhook: the scheduler warns about it
            if quota.max_gpu_count is not None:
                max_gpu_count = (quota.max_gpu_count, quota.ref)
    elastic_max = None
    if options.capacity_scheduling and options.device_class_map:
        for raw in view.elastic_quotas(namespace):
            try:
                elastic = ElasticQuota.from_dict(raw)
            except GpuqError:
                continue  # one that predates the webhook: the scheduler warns about it
            elastic_max = (elastic.max, elastic.ref)
    verdict = check_claim_spec(
        spec,
        ref,
        spec_field,
        view.devices(),
        queue_quotas=queue_quotas,
        max_gpu_count=max_gpu_count,
        elastic_max=elastic_max,
        class_map=dict(options.device_class_map),
        naming={**DEFAULT_NAMING, **dict(options.device_naming)},
    )
    if verdict.denials:
        return deny("; ".join(verdict.denials), verdict.warnings)
    return Decision(warnings=verdict.warnings) if verdict.warnings else ALLOW


# --------------------------------------------------------------------------------------------------
# ElasticQuota and GPUResourceQuota


def _guarantee_warnings(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, view: ClusterView
) -> tuple[str, ...]:
    """capacity-scheduling.md: the sum of min must fit the cluster. An ElasticQuota whose CREATE or
    UPDATE raises a min past what the nodes have allocatable is admitted with a warning
    (:mod:`common.model.elastic.guarantee`; the scheduler also sets its condition and an event)."""
    try:
        quota = ElasticQuota.from_dict(obj)
    except GpuqError:
        return ()  # admitted with a problem its old version had (the ratchet): no sum to check
    old_min: Mapping[str, int] = {}
    if old is not None:
        try:
            old_min = ElasticQuota.from_dict(old).min
        except GpuqError:
            old_min = {}  # an unreadable old object: every min counts as raised
    others = []
    for item in view.all_elastic_quotas():
        namespace, name = name_of(item)
        if (namespace, name) == (quota.namespace, quota.name):
            continue
        try:
            others.append(ElasticQuota.from_dict(item).min)
        except GpuqError:
            continue  # one that predates the webhook: the scheduler warns about it (Semantics 3)
    return tuple(guarantee.admission_warnings(quota.ref, quota.min, old_min, others, view.node_capacity()))


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
                f"{quota.ref}: metadata.name: namespace {quota.namespace} already has {kind} {quote(other)}: "
                f"expected at most one {kind} per namespace"
            )
    return ALLOW
