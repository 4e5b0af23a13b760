"""The ElasticQuota object, its admission validation, and one namespace's quota with its usage
(capacity-scheduling.md; design.md Semantics 4).

The wire layout is :class:`~common.model.crd.ElasticQuotaWire`; here amounts become gpuq's integer
units. Where gpuq deliberately differs from scheduler-plugins:

* **Absent keys** (design.md Semantics 4, the KEP's "Max is infinite ... min is 0 by default"): a
  resource absent from ``max`` is unlimited and absent from ``min`` is 0, for every resource. Upstream
  applies those defaults only when the whole list is missing; a ``max`` without ``memory`` caps memory
  at 0 there. The maps keep exactly the keys the object lists; :class:`ElasticQuotaInfo`'s checks
  apply the meaning of an absent key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.crd import ElasticQuotaWire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.quantity import format_units
from gpuq_k8s.common.model.resources import EMPTY, Resources
from gpuq_k8s.common.model.wire import namespaced_object

KIND: Final = kinds.ELASTIC_QUOTA.kind


class ElasticQuota(BaseModel):
    """An ElasticQuota (``scheduling.x-k8s.io/v1alpha1``) with amounts in gpuq's integer units.

    ``min``/``max`` keep exactly the keys the object lists (explicit zeros included); the meaning of
    an absent key (Semantics 4) is applied by the checks, not by filling the maps.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    namespace: str
    name: str
    min: Resources = EMPTY
    max: Resources = EMPTY
    status_used: Resources = EMPTY

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ElasticQuota:
        """Parse an API object; raises :class:`InvalidValue` naming the object and the field."""
        wire, namespace, name, where = namespaced_object(ElasticQuotaWire, obj, KIND)
        try:
            return cls(
                namespace=namespace,
                name=name,
                min=Resources.parse(wire.spec.min, "spec.min"),
                max=Resources.parse(wire.spec.max, "spec.max"),
                status_used=Resources.parse(wire.status.used, "status.used"),
            )
        except InvalidValue as err:
            raise err.located(where) from None

    def validate_spec(self) -> None:
        """The webhook's semantic checks: amounts non-negative and ``min <= max`` where both are set.

        Raises the first :class:`InvalidValue`, naming the object, ``spec.min[<res>]`` or
        ``spec.max[<res>]``, the value and what was expected.
        """
        for field, limits in (("spec.min", self.min), ("spec.max", self.max)):
            for key in sorted(limits):
                if limits[key] < 0:
                    raise InvalidValue(
                        f"{field}[{key}]", format_units(key, limits[key]), "a non-negative quantity", self.ref
                    )
        for key in sorted(self.min):
            if key in self.max and self.min[key] > self.max[key]:
                raise InvalidValue(
                    f"spec.min[{key}]",
                    format_units(key, self.min[key]),
                    f"at most spec.max[{key}] = {format_units(key, self.max[key])}",
                    self.ref,
                )


def validate_elastic_quota(obj: Mapping[str, Any]) -> ElasticQuota:
    """Parse and semantically validate an ElasticQuota for admission (CREATE/UPDATE)."""
    quota = ElasticQuota.from_dict(obj)
    quota.validate_spec()
    return quota


@dataclass(frozen=True, slots=True)
class ElasticQuotaInfo:
    """One namespace's quota and usage. Immutable: the owner replaces it on every change."""

    namespace: str
    name: str
    min: Resources
    max: Resources
    used: Resources = EMPTY

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

    def over_max_with(self, request: Mapping[str, int]) -> list[str]:
        """Requested resources for which ``used + request > max`` (absent ``max`` = unlimited)."""
        over = []
        for key, amount in request.items():
            if amount > 0 and key in self.max and self.used.amount(key) + amount > self.max[key]:
                over.append(key)
        return sorted(over)

    def over_min_with(self, request: Mapping[str, int], guaranteed: Iterable[str]) -> bool:
        """``used + request > min`` on any guaranteed resource (absent ``min`` = 0)."""
        return any(self.used.amount(key) + request.get(key, 0) > self.min.get(key, 0) for key in guaranteed)

    def over_min(self, guaranteed: Iterable[str]) -> bool:
        """The quota is borrowing: ``used > min`` on some guaranteed resource."""
        return self.over_min_with(EMPTY, guaranteed)
