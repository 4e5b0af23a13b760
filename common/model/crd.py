"""The wire models of the four custom resources gpuq reads, and the shape every API object has.

One place for the field layouts of ``scheduling.volcano.sh/v1beta1`` Queue and PodGroup (volcano-sh/apis
``pkg/apis/scheduling/v1beta1/types.go``), ``scheduling.x-k8s.io/v1alpha1`` ElasticQuota
(scheduler-plugins ``apis/scheduling/v1alpha1``) and ``tensor-fusion.ai/v1`` GPUResourceQuota
(tensor-fusion ``api/v1/gpuresourcequota_types.go``, and the gpu-resource-quota design's own layout:
design.md Semantics 12), with upstream's JSON names and Go zero-value defaults, so existing objects
load unchanged. The engines (:mod:`common.model.queues`,
:mod:`common.model.elastic`, :mod:`common.model.gpu_quota`) turn them into their own integer-unit
models; the webhook checks :class:`ObjectShape` before any rule reads an object.

Fields gpuq does not use (``extendClusters``, ``affinity``, ``networkTopology``, ...) and fields added
by later upstream releases are ignored, never an error. A field of the wrong type is an
:class:`~common.model.errors.InvalidValue` naming the object and the field path; no silent coercion
(``weight: "2"`` is refused, as the apiserver's CRD schema would).

Volcano's resource lists are parsed to :class:`~common.model.resources.Resources` (gpuq's integer
units); ElasticQuota and GPUResourceQuota amounts stay quantity text here and are parsed by their engine,
which names the field in its errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
)

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import DEFAULT_QUEUE
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.resources import EMPTY, Resources
from gpuq_k8s.common.model.wire import object_ref

# "" is Go's zero value: an object whose status no controller has written yet.
QueueState = Literal["Open", "Closed", "Closing", "Unknown", ""]
PodGroupPhase = Literal["Pending", "Running", "Unknown", "Inqueue", "Completed", ""]
# Semantics 7: these take nothing new; an absent state (a Queue the controller has not synced yet)
# and Unknown are open, as Volcano's controller treats them until it writes a state.
CLOSED_STATES: Final = frozenset({"Closed", "Closing"})


def _to_resources(value: Any) -> Resources:
    if value is None:
        return EMPTY
    if isinstance(value, Resources):
        return value
    if not isinstance(value, Mapping):
        raise ValueError("a resource list such as {cpu: '4', memory: 16Gi}")
    return Resources.parse(value)


def _from_resources(value: Resources) -> dict[str, str]:
    return value.to_quantities()


ResourceList = Annotated[
    Resources,
    BeforeValidator(_to_resources),
    PlainSerializer(_from_resources, return_type=dict[str, str]),
]


class _Model(BaseModel):
    # strict: the apiserver already typed these objects; anything else is a manifest typo to report.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, arbitrary_types_allowed=True)


def _none_is_empty(value: Any) -> Any:
    # ``labels: null`` in a manifest is what the apiserver stores as no labels.
    return {} if value is None else value


def _none_is_blank(value: Any) -> Any:
    # Go serialises an unset time as ``creationTimestamp: null`` (``kubectl get -o yaml``, CREATE reviews).
    return "" if value is None else value


StringMap = Annotated[dict[str, str], BeforeValidator(_none_is_empty)]
ServerText = Annotated[str, BeforeValidator(_none_is_blank)]


class MetadataShape(_Model):
    """The metadata every rule may read: string name and namespace, string-to-string labels and
    annotations."""

    name: str = ""
    namespace: str = ""
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)


class ObjectMeta(MetadataShape):
    uid: ServerText = ""
    resourceVersion: ServerText = ""
    creationTimestamp: ServerText = ""


class ObjectShape(_Model):
    """What the apiserver guarantees of every object it sends: metadata with string name, namespace,
    labels and annotations; mapping spec and status. The webhook checks it before any rule reads."""

    metadata: MetadataShape
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class Guarantee(_Model):
    resource: ResourceList = EMPTY


class QueueSpec(_Model):
    # CRD: minimum 1, default 1.
    weight: int = Field(default=1, ge=1, le=65535)
    capability: ResourceList = EMPTY
    deserved: ResourceList = EMPTY
    guarantee: Guarantee = Field(default_factory=Guarantee)
    reclaimable: bool | None = None
    parent: str = ""
    priority: int = 0
    type: str = ""


class QueueStatus(_Model):
    state: QueueState = ""
    allocated: ResourceList = EMPTY
    pending: int = 0
    running: int = 0
    inqueue: int = 0
    unknown: int = 0
    completed: int = 0


def _validate(cls: type[_Model], obj: Any, where: str) -> Any:
    """``cls.model_validate`` with the first problem as an :class:`InvalidValue` naming the object."""
    try:
        return cls.model_validate(obj)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        # Union branches and validator wrappers appear in loc as "function-before[...]": not fields.
        parts = [str(part) for part in first["loc"] if not (isinstance(part, str) and "[" in part)]
        path = ".".join(parts) or "(object)"
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, InvalidValue):
            # A quantity inside a resource list: keep its own expectation, name the full path.
            raise InvalidValue(f"{path}.{cause.field}", cause.value, cause.expected, where) from None
        expected = first["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
        if first["type"] == "missing":
            expected = "a value (the field is required)"
        raise InvalidValue(path, first.get("input"), expected, where) from None


def _location(obj: Any, kind: str, namespaced: bool) -> str:
    """How errors name a Volcano object about to be validated (``Queue/q``, ``PodGroup/ns/pg``); its
    name must be set."""
    if not isinstance(obj, Mapping):
        raise InvalidValue(kind, obj, f"a {kind} object (a JSON mapping)")
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = (meta.get("namespace") or "default") if isinstance(meta, Mapping) and namespaced else ""
    where = object_ref(kind, str(namespace), str(name or ""))
    if not isinstance(name, str) or not name:
        raise InvalidValue("metadata.name", name, f"a non-empty {kind} name", where)
    return where


class _VolcanoObject(_Model):
    """What a Queue and a PodGroup share: Volcano's apiVersion, full metadata, and the names gpuq
    reads from that metadata."""

    apiVersion: str = kinds.QUEUE.api_version
    kind: str
    metadata: ObjectMeta
    # A cluster-scoped kind (Queue) sets False: its ref and errors name it ``Kind/name``.
    _namespaced: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.metadata.annotations

    @property
    def ref(self) -> str:
        """``Kind/namespace/name``, or ``Kind/name`` for a cluster-scoped kind (``Queue/team-a``)."""
        namespace = self.metadata.namespace if self._namespaced else ""
        return object_ref(self.kind, namespace, self.metadata.name)

    @classmethod
    def from_dict(cls, obj: Any) -> Self:
        """Parse the API object; raises :class:`InvalidValue` naming the object (as :attr:`ref` does)
        and the field."""
        where = _location(obj, cls.model_fields["kind"].default, namespaced=cls._namespaced)
        parsed: Self = _validate(cls, obj, where)
        return parsed


class Queue(_VolcanoObject):
    """A Volcano Queue (cluster-scoped)."""

    kind: Literal["Queue"] = "Queue"
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus = Field(default_factory=QueueStatus)
    _namespaced: ClassVar[bool] = False

    @property
    def open(self) -> bool:
        """Takes new work: ``status.state`` is not Closed or Closing (Semantics 7)."""
        return self.status.state not in CLOSED_STATES


class PodGroupCondition(_Model):
    type: str = ""
    status: str = ""
    transitionID: str = ""
    lastTransitionTime: str | None = None
    reason: str = ""
    message: str = ""


_INT32_MAX: Final = 2**31 - 1


class PodGroupSpec(_Model):
    # int32 in the CRD (the apiserver refuses more).
    minMember: int = Field(default=0, ge=0, le=_INT32_MAX)
    minTaskMember: dict[str, Annotated[int, Field(ge=0, le=_INT32_MAX)]] = Field(default_factory=dict)
    # CRD default "default"; an empty string is what Go sees for an absent field.
    queue: str = DEFAULT_QUEUE
    priorityClassName: str = ""
    # None (absent) differs from {} upstream: Volcano only reserves for running jobs that set it.
    minResources: ResourceList | None = None


class PodGroupStatus(_Model):
    phase: PodGroupPhase = ""
    conditions: list[PodGroupCondition] = Field(default_factory=list)
    running: int = 0
    succeeded: int = 0
    failed: int = 0


class PodGroup(_VolcanoObject):
    """A Volcano PodGroup (namespaced): the gang and the unit of the enqueue check."""

    kind: Literal["PodGroup"] = "PodGroup"
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus = Field(default_factory=PodGroupStatus)

    @classmethod
    def from_dict(cls, obj: Any) -> Self:
        group = super().from_dict(obj)
        if not group.metadata.namespace:
            # A manifest without a namespace lands in "default", as kubectl would put it.
            meta = group.metadata.model_copy(update={"namespace": "default"})
            group = group.model_copy(update={"metadata": meta})
        return group

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """``<namespace>/<name>``: how pods refer to it (``scheduling.k8s.io/group-name`` + namespace)."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def queue(self) -> str:
        return self.spec.queue or DEFAULT_QUEUE

    @property
    def phase(self) -> str:
        """``status.phase``; an object the controller has not touched yet is Pending."""
        return self.status.phase or "Pending"


# --------------------------------------------------------------------------------------------------
# ElasticQuota (scheduling.x-k8s.io/v1alpha1)

Quantity = str | int | float


class _Lax(BaseModel):
    # Objects whose metadata is read for its name only: the rest is the engine's to judge.
    model_config = ConfigDict(extra="ignore")


class NameMeta(_Lax):
    name: str = ""
    namespace: str = ""


class _Strict(BaseModel):
    # strict: a YAML `cpu: true` is not 1 core (lax mode would coerce the bool).
    model_config = ConfigDict(extra="ignore", strict=True)


class ElasticQuotaSpec(_Strict):
    min: dict[str, Quantity] | None = None
    max: dict[str, Quantity] | None = None


class ElasticQuotaStatus(_Strict):
    used: dict[str, Quantity] | None = None


class ElasticQuotaWire(_Lax):
    metadata: NameMeta = NameMeta()
    spec: ElasticQuotaSpec = ElasticQuotaSpec()
    status: ElasticQuotaStatus = ElasticQuotaStatus()


# --------------------------------------------------------------------------------------------------
# GPUResourceQuota (tensor-fusion.ai/v1)


class TflopsVramWire(_Strict):
    tflops: Quantity | None = None
    vram: Quantity | None = None


class GPUTotalWire(_Strict):
    requests: TflopsVramWire | None = None
    limits: TflopsVramWire | None = None
    maxWorkers: int | None = None
    alertThresholdPercent: int | None = None
    # The gpu-resource-quota design's layout (design.md Semantics 12): flat keys with a dot.
    requests_tflops: Quantity | None = Field(default=None, alias="requests.tflops")
    requests_vram: Quantity | None = Field(default=None, alias="requests.vram")
    workers: int | None = None


class GPUSingleMaxWire(_Strict):
    """The design's ``single.max``: one workload's largest request and GPU count."""

    tflops: Quantity | None = None
    vram: Quantity | None = None
    workers: int | None = None


class GPUSingleWire(_Strict):
    maxRequests: TflopsVramWire | None = None
    maxLimits: TflopsVramWire | None = None
    maxGPUCount: int | None = None
    defaultRequests: TflopsVramWire | None = None
    defaultLimits: TflopsVramWire | None = None
    # The design's layout: per-workload maxima and minima.
    max: GPUSingleMaxWire | None = None
    min: TflopsVramWire | None = None


class GPUResourceQuotaSpec(_Strict):
    total: GPUTotalWire = GPUTotalWire()
    single: GPUSingleWire = GPUSingleWire()


class GPUResourceQuotaWire(_Lax):
    metadata: NameMeta = NameMeta()
    spec: GPUResourceQuotaSpec = GPUResourceQuotaSpec()
    status: dict[str, Any] | None = None
