"""Device taints and the tolerations of a request (DRADeviceTaints, on by default in 1.36).

As the structured allocator: only ``NoSchedule`` and ``NoExecute`` taints keep a device from being
allocated (``None`` and unknown effects are informational), and a taint is tolerated when one of the
request's tolerations matches it (``resourceclaim.ToleratesTaint``: an empty effect or key matches
any; ``Exists`` matches any value; ``Equal``, the default, the same value). The allocation result
carries the request's tolerations, so the kubelet and the eviction controller see them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.device import DeviceTaint
from gpuq_k8s.common.model.errors import InvalidValue

BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_OPERATORS: Final = ("Exists", "Equal")


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        for key, value in (("key", self.key), ("value", self.value), ("effect", self.effect)):
            if value:
                out[key] = value
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


def untolerated(taints: Iterable[DeviceTaint], tolerations: tuple[Toleration, ...]) -> DeviceTaint | None:
    """The first taint that keeps the device from a request with ``tolerations``, or None."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def parse_tolerations(raw: Any, field: str, where: str) -> tuple[Toleration, ...]:
    tolerations = []
    for i, item in enumerate(wire.items(raw, field, where)):
        at = f"{field}[{i}]"
        values: dict[str, str] = {}
        for key in ("key", "operator", "value", "effect"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                raise InvalidValue(f"{at}.{key}", value, "a string", where)
            values[key] = value or ""
        operator = values["operator"] or "Equal"
        if operator not in _OPERATORS:
            raise InvalidValue(f"{at}.operator", operator, "Exists or Equal", where)
        if operator == "Exists" and values["value"]:
            raise InvalidValue(f"{at}.value", values["value"], "no value with operator Exists", where)
        seconds = item.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise InvalidValue(f"{at}.tolerationSeconds", seconds, "an integer", where)
        tolerations.append(Toleration(values["key"], operator, values["value"], values["effect"], seconds))
    return tuple(tolerations)


def toleration_from(raw: Mapping[str, Any]) -> Toleration:
    """A toleration read back from an allocation result (already validated by the apiserver)."""
    return parse_tolerations([raw], "toleration", "")[0]
