"""DeviceClass (``resource.k8s.io/v1``): the selectors every request for it adds, the configuration
every allocation from it carries, and the extended resource name that lets a plain container
request (``example.com/gpu: 2``) be served by it (:mod:`.extended`).

Selectors are compiled (once per expression, :mod:`.cel_env`) when the class is parsed, so a class
whose selector cannot compile is an error naming ``DeviceClass/<name>`` and the field before any
device is looked at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.cel_env import CompiledSelector, compile_selector
from gpuq_k8s.common.model.devices.device import _str
from gpuq_k8s.common.model.errors import InvalidValue

KIND: Final = "DeviceClass"
# resourceapi.ResourceDeviceClassPrefix: every class also serves this implicit extended resource.
IMPLICIT_PREFIX: Final = "deviceclass.resource.kubernetes.io/"


def parse_selectors(raw: Any, field: str, where: str) -> tuple[CompiledSelector, ...]:
    """A ``selectors`` list (each ``{cel: {expression}}``), compiled."""
    compiled = []
    for i, selector in enumerate(wire.items(raw, field, where)):
        cel = selector.get("cel")
        if not isinstance(cel, Mapping):
            raise InvalidValue(f"{field}[{i}]", dict(selector), "a selector with cel.expression", where)
        expression = cel.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidValue(f"{field}[{i}].cel.expression", expression, "a CEL expression", where)
        compiled.append(compile_selector(expression, f"{field}[{i}].cel.expression", where))
    return tuple(compiled)


def parse_configs(raw: Any, field: str, where: str) -> tuple[Mapping[str, Any], ...]:
    """Configuration entries, kept as given (``opaque: {driver, parameters}``) for the result."""
    configs = []
    for i, config in enumerate(wire.items(raw, field, where)):
        if not isinstance(config.get("opaque"), Mapping):
            raise InvalidValue(f"{field}[{i}].opaque", config.get("opaque"), "an opaque configuration", where)
        configs.append(config)
    return tuple(configs)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[CompiledSelector, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    extended_resource_name: str = ""
    creation_timestamp: str = ""

    @property
    def ref(self) -> str:
        return wire.object_ref(KIND, "", self.name)

    @property
    def implicit_resource_name(self) -> str:
        return IMPLICIT_PREFIX + self.name

    @classmethod
    def from_dict(cls, obj: Any) -> DeviceClass:
        meta, spec, _, _, name, where = wire.object_parts(obj, KIND, namespaced=False)
        return cls(
            name=name,
            selectors=parse_selectors(spec.get("selectors"), "spec.selectors", where),
            config=tuple(
                {k: v for k, v in c.items() if k != "requests"}
                for c in parse_configs(spec.get("config"), "spec.config", where)
            ),
            extended_resource_name=_str(spec, "extendedResourceName", "spec", where),
            creation_timestamp=str(meta.get("creationTimestamp") or ""),
        )
