"""``gpuq simulate --admission``: the webhook's mutators and validators, offline, before scheduling.

This composition lives in the CLI package because it is the one place that may use both the webhook
(the admission rules) and the scheduler (the simulation); those two never import each other.

The apiserver admits objects one at a time against what already exists. Simulate input has no
creation order beyond file order, so the cluster objects (Queues, PodGroups, ElasticQuotas,
GPUResourceQuotas) are admitted first, in file order, each against those admitted before it; then the
Pods, against every admitted object. Nodes are not subject to the webhook (as in a cluster), and
neither are Pods that already run (``spec.nodeName`` set): they predate what is being simulated.
A mutated object is simulated as mutated, exactly as the apiserver would store it. The rules that
apply are those the simulated configuration switches on (:func:`webhook.options.admission_options`,
design.md Semantics 10), the same derivation ``gpuq webhook --config`` makes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.outlook import NEVER, outlook_of
from gpuq_k8s.scheduler.cluster.objects import stored_kind
from gpuq_k8s.scheduler.simulate.loader import NODE, POD, Document, object_reference
from gpuq_k8s.scheduler.simulate.run import REJECTED
from gpuq_k8s.webhook.admission import review
from gpuq_k8s.webhook.options import admission_options
from gpuq_k8s.webhook.review import deny
from gpuq_k8s.webhook.view import StaticView

_CREATE: Final = "CREATE"


@dataclass(slots=True)
class AdmissionOutcome:
    """What admission let through (possibly mutated), and what it refused or warned about."""

    admitted: list[Document] = field(default_factory=list)
    rejected_pods: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)


def _kind(doc: Document) -> str | None:
    body = doc.body
    if not isinstance(body, Mapping) or not isinstance(body.get("metadata"), Mapping):
        return None  # not an object: the loader reports it
    kind = body.get("kind")
    return kind if isinstance(kind, str) else None


def _with_namespace(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The object as the apiserver hands it to a webhook: namespaced objects carry their namespace."""
    obj = dict(body)
    stored = stored_kind(kind)
    cluster_scoped = kind == NODE or (stored is not None and not stored.namespaced)
    if not cluster_scoped and not obj["metadata"].get("namespace"):
        obj["metadata"] = {**obj["metadata"], "namespace": "default"}
    return obj


def admit(docs: Sequence[Document], config: SchedulerConfig | None = None) -> AdmissionOutcome:
    """Run every admissible document through the webhook's rules (see the module doc for the order),
    those ``config`` switches on, as ``gpuq webhook --config`` does (default: the default configuration)."""
    settings = admission_options(config or SchedulerConfig.default())
    outcome = AdmissionOutcome()
    view = StaticView(d.body for d in docs if _kind(d) == NODE)
    cluster_objects = [d for d in docs if _kind(d) not in (None, NODE, POD)]
    pods = [d for d in docs if _kind(d) == POD]
    passed_through = [d for d in docs if _kind(d) in (None, NODE)]
    outcome.admitted.extend(passed_through)

    for doc in [*cluster_objects, *pods]:
        kind = _kind(doc)
        assert kind is not None  # filtered above
        obj = _with_namespace(doc.body, kind)
        spec = obj.get("spec")
        if kind == POD and spec is not None and not isinstance(spec, Mapping):
            # The apiserver's schema refuses it before any webhook: the loader reports it (exit 2).
            outcome.admitted.append(doc)
            continue
        if kind == POD and spec and spec.get("nodeName"):
            outcome.admitted.append(replace(doc, body=obj))
            continue
        ref = object_reference(obj)
        try:
            decision = review(obj, _CREATE, view, options=settings)
        except GpuqError as err:
            # A rule met input it cannot read: the webhook answers that as a denial, so does this.
            decision = deny(str(err))
        outcome.warnings.extend({"object": ref, "message": w} for w in decision.warnings)
        if not decision.allowed:
            if kind == POD:
                meta = obj["metadata"]
                outcome.rejected_pods.append(
                    {
                        "namespace": meta["namespace"],
                        "name": meta.get("name", ""),
                        "node": None,
                        "phase": REJECTED,
                        "reason": decision.message,
                        # The webhook admits what the scheduler could ever place (design.md
                        # Semantics 10): a denied pod can never fit as it stands.
                        "outlook": outlook_of(decision.message) or NEVER,
                        "cardType": None,
                    }
                )
            else:
                outcome.rejected.append({"object": ref, "message": decision.message})
            continue
        admitted = decision.patched if decision.patched is not None else obj
        outcome.admitted.append(replace(doc, body=admitted))
        if kind != POD:
            view.add(admitted)
    return outcome
