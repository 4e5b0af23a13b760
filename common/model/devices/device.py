"""One device of a ResourceSlice (``resource.k8s.io/v1`` ``Device``), parsed once.

Attributes keep their names as published (``productName`` or ``gpu.nvidia.com/productName``) and
their typed value: ``bool``, ``int``, ``str`` or a :class:`~.cel_env.VersionText` (a valid
semantic version). Capacity values, request policies and counter consumptions are exact nano-unit
amounts (:mod:`.amounts`). A field of the wrong type or an attribute with no (or two) values is an
:class:`~common.model.errors.InvalidValue` naming the slice and the field path, as the apiserver's
validation would have refused it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.amounts import amount_fraction, parse_amount
from gpuq_k8s.common.model.devices.cel_env import VersionText, device_data
from gpuq_k8s.common.model.devices.semver import SemverError, parse_semver
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.node_selector import NodeSelector, parse_node_selector

AttributeValue = bool | int | str
TAINT_EFFECTS: Final = ("NoSchedule", "NoExecute", "None")


@dataclass(frozen=True, slots=True)
class ValidRange:
    min: int
    max: int | None = None
    step: int | None = None


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """``capacity.<name>.requestPolicy``: ``default`` and one of ``valid_values`` or ``valid_range``."""

    default: int | None = None
    valid_values: tuple[int, ...] = ()
    valid_range: ValidRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: int
    policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(slots=True, eq=False)
class Device:
    """A device as the allocator reads it; ``driver`` is its slice's."""

    name: str
    driver: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    allow_multiple: bool = False
    node_name: str = ""
    all_nodes: bool = False
    node_selector: NodeSelector | None = None
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    _cel: dict[str, Any] | None = field(default=None, repr=False)

    def cel_data(self) -> dict[str, Any]:
        """The value of ``device`` in CEL, built once."""
        if self._cel is None:
            capacity = {name: amount_fraction(cap.value) for name, cap in self.capacity.items()}
            self._cel = device_data(self.driver, self.allow_multiple, self.attributes, capacity)
        return self._cel

    def attribute(self, qualified: str) -> AttributeValue | None:
        """A fully qualified attribute (``domain/id``), also found under its short name when the
        domain is the driver's (structured allocator ``lookupAttribute``)."""
        found = self.attributes.get(qualified)
        if found is not None:
            return found
        domain, slash, ident = qualified.partition("/")
        if not slash or domain != self.driver:
            return None
        return self.attributes.get(ident)


def _str(raw: Mapping[str, Any], key: str, at: str, where: str, required: bool = False) -> str:
    value = raw.get(key)
    if value is None or value == "":
        if required:
            raise InvalidValue(f"{at}.{key}" if at else key, value, "a non-empty string", where)
        return ""
    if not isinstance(value, str):
        raise InvalidValue(f"{at}.{key}" if at else key, value, "a string", where)
    return value


def _bool(raw: Mapping[str, Any], key: str, at: str, where: str) -> bool:
    value = raw.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidValue(f"{at}.{key}", value, "true or false", where)
    return value


def _strings(raw: Mapping[str, Any], key: str, at: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidValue(f"{at}.{key}", value, "a list of strings", where)
    return tuple(value)


def _attribute(raw: Any, at: str, where: str) -> AttributeValue:
    item = wire.mapping(raw, at, where)
    present = [k for k in ("int", "bool", "string", "version") if item.get(k) is not None]
    if len(present) != 1:
        raise InvalidValue(at, dict(item), "exactly one of int, bool, string or version", where)
    kind = present[0]
    value = item[kind]
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidValue(f"{at}.int", value, "an integer", where)
    if kind == "bool" and not isinstance(value, bool):
        raise InvalidValue(f"{at}.bool", value, "true or false", where)
    if kind in ("string", "version") and not isinstance(value, str):
        raise InvalidValue(f"{at}.{kind}", value, "a string", where)
    if kind == "version":
        try:
            parse_semver(value)
        except SemverError as err:
            raise InvalidValue(f"{at}.version", value, f"a semantic version ({err})", where) from None
        return VersionText(value)
    return value  # type: ignore[no-any-return]  # checked just above


def _policy(raw: Any, at: str, where: str) -> RequestPolicy:
    item = wire.mapping(raw, at, where)
    default = (
        parse_amount(item["default"], f"{at}.default", where) if item.get("default") is not None else None
    )
    values_raw = item.get("validValues")
    if values_raw is not None and not isinstance(values_raw, list):
        raise InvalidValue(f"{at}.validValues", values_raw, "a list of quantities", where)
    values = tuple(parse_amount(v, f"{at}.validValues[{i}]", where) for i, v in enumerate(values_raw or []))
    if list(values) != sorted(set(values)):
        raise InvalidValue(f"{at}.validValues", values_raw, "distinct quantities in ascending order", where)
    valid_range = None
    if item.get("validRange") is not None:
        rng = wire.mapping(item["validRange"], f"{at}.validRange", where)
        if rng.get("min") is None:
            raise InvalidValue(f"{at}.validRange.min", None, "a quantity (min is required)", where)

        def opt(key: str) -> int | None:
            got = rng.get(key)
            return None if got is None else parse_amount(got, f"{at}.validRange.{key}", where)

        step = opt("step")
        if step == 0:
            raise InvalidValue(f"{at}.validRange.step", rng.get("step"), "a positive quantity", where)
        valid_range = ValidRange(parse_amount(rng["min"], f"{at}.validRange.min", where), opt("max"), step)
    if values and valid_range is not None:
        raise InvalidValue(at, dict(item), "at most one of validValues and validRange", where)
    return RequestPolicy(default, values, valid_range)


def _counters(raw: Any, at: str, where: str) -> dict[str, int]:
    counters: dict[str, int] = {}
    for name, counter in wire.mapping(raw, at, where).items():
        value = wire.mapping(counter, f"{at}.{name}", where).get("value")
        counters[str(name)] = parse_amount(value, f"{at}.{name}.value", where)
    return counters


def parse_device(raw: Any, driver: str, at: str, where: str) -> Device:
    """One entry of ``spec.devices``; ``at`` is its field path (``spec.devices[3]``)."""
    item = wire.mapping(raw, at, where)
    name = _str(item, "name", at, where, required=True)
    attributes = {
        str(k): _attribute(v, f"{at}.attributes.{k}", where)
        for k, v in wire.mapping(item.get("attributes"), f"{at}.attributes", where).items()
    }
    capacity: dict[str, DeviceCapacity] = {}
    for key, cap in wire.mapping(item.get("capacity"), f"{at}.capacity", where).items():
        cap_at = f"{at}.capacity.{key}"
        entry = wire.mapping(cap, cap_at, where)
        if entry.get("value") is None:
            raise InvalidValue(f"{cap_at}.value", None, "a quantity (value is required)", where)
        policy = (
            _policy(entry["requestPolicy"], f"{cap_at}.requestPolicy", where)
            if entry.get("requestPolicy")
            else None
        )
        capacity[str(key)] = DeviceCapacity(parse_amount(entry["value"], f"{cap_at}.value", where), policy)
    consumes = []
    for i, consumption in enumerate(
        wire.items(item.get("consumesCounters"), f"{at}.consumesCounters", where)
    ):
        c_at = f"{at}.consumesCounters[{i}]"
        consumes.append(
            CounterConsumption(
                _str(consumption, "counterSet", c_at, where, required=True),
                _counters(consumption.get("counters"), f"{c_at}.counters", where),
            )
        )
    taints = []
    for i, taint in enumerate(wire.items(item.get("taints"), f"{at}.taints", where)):
        t_at = f"{at}.taints[{i}]"
        effect = _str(taint, "effect", t_at, where, required=True)
        if effect not in TAINT_EFFECTS:
            raise InvalidValue(f"{t_at}.effect", effect, f"one of {', '.join(TAINT_EFFECTS)}", where)
        taints.append(
            DeviceTaint(
                _str(taint, "key", t_at, where, required=True), _str(taint, "value", t_at, where), effect
            )
        )
    selector = item.get("nodeSelector")
    return Device(
        name=name,
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        consumes=tuple(consumes),
        taints=tuple(taints),
        allow_multiple=_bool(item, "allowMultipleAllocations", at, where),
        node_name=_str(item, "nodeName", at, where),
        all_nodes=_bool(item, "allNodes", at, where),
        node_selector=parse_node_selector(selector, f"{at}.nodeSelector", where)
        if selector is not None
        else None,
        binds_to_node=_bool(item, "bindsToNode", at, where),
        binding_conditions=_strings(item, "bindingConditions", at, where),
        binding_failure_conditions=_strings(item, "bindingFailureConditions", at, where),
    )
