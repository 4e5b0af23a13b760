"""The one way plugin arguments are declared and read (design.md "Scheduler configuration"; the style of
kube-scheduler's typed plugin args, whose validation reports every problem with its field path).

Each plugin's arguments are one pydantic model, a :class:`PluginArgs`: each field aliased by its Volcano
argument key, ``extra="forbid"`` (a misspelt key is refused, never ignored), strict types (YAML's
``"true"`` is no boolean, ``1`` no boolean either), bounds in ``Field``, and the expectation a refused
value is told (:func:`expect`). Volcano's flat keys with a variable part (crossquota's
``quota.<resource>``, binpack's ``binpack.resources.<resource>``) are regrouped by a
``model_validator(mode="before")`` into one map field whose alias is the key's pattern, so every error
maps back to the key the user wrote (``quota.cpu``).

``Args.parse(arguments)`` is the one entry point: it reads Volcano's argument map (by alias only) and
raises :class:`~common.model.errors.ConfigErrors` with every problem, each naming the key, the value and
what was expected; the configuration prefixes the plugin's path (``tiers[1].plugins[3].arguments.``).
Constructing a model by field name (``CapacityCardArgs(node_order_weight=2.0)``) is for code and tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from gpuq_k8s.common.model.errors import ConfigError, ConfigErrors, InvalidValue
from gpuq_k8s.common.model.wire import MAX_WEIGHT

__all__ = [
    "PLACEHOLDER",
    "PluginArgs",
    "PositiveWeight",
    "ZeroWeight",
    "each",
    "expect",
    "parsed",
    "refuse",
]

# The variable part of a regrouped key's pattern (``quota.<resource>``), as docs/configuration.md shows it.
PLACEHOLDER: Final = "<resource>"
_VOLCANO: Final = "volcano-arguments"  # validation context: reading Volcano's argument map
_ERROR: Final = "gpuq"  # the pydantic error type of every refusal worded here
_KEY: Final = "[key]"  # pydantic's location marker of a map key
_NO_VALUE: Final = object()
_INTEGER_TEXT: Final = re.compile(r"\s*[+]?[0-9]{1,18}\s*")


def refuse(expected: str, value: Any = _NO_VALUE) -> PydanticCustomError:
    """The error a validator raises: ``expected`` is what would have been accepted; ``value`` the
    offending value when it is a part of the input (one pattern of a comma-separated list)."""
    context: dict[str, Any] = {"expected": expected}
    if value is not _NO_VALUE:
        context["value"] = value
    return PydanticCustomError(_ERROR, "{expected}", context)


def expect(expected: str) -> WrapValidator:
    """Field metadata: any refusal of the field's type and ``Field`` bounds says ``expected`` (pydantic's
    own wording, "Input should be greater than or equal to 0", names no range)."""

    def check(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise refuse(expected) from None

    return WrapValidator(check)


def parsed(parse: Callable[[Any], Any]) -> BeforeValidator:
    """Field metadata: ``parse`` (one of gpuq's readers, raising :class:`InvalidValue`) turns the raw value
    into the field's; its error's expectation and value become the field's refusal."""

    def check(value: Any) -> Any:
        try:
            return parse(value)
        except InvalidValue as err:
            raise refuse(err.expected, err.value) from None

    return BeforeValidator(check)


def each(entries: Mapping[str, Any], convert: Callable[[str, Any], Any]) -> dict[str, Any]:
    """``convert(key, value)`` for every entry of a map (for a value whose meaning depends on its key:
    ``quota.cpu`` is millicores, ``quota.memory`` bytes). Every entry's refusal is reported at its key,
    all of them together, not only the first."""
    out: dict[str, Any] = {}
    errors: list[InitErrorDetails] = []
    for key, value in entries.items():
        try:
            out[key] = convert(key, value)
        except PydanticCustomError as err:
            errors.append(InitErrorDetails(type=err, loc=(key,), input=value))
    if errors:
        raise ValidationError.from_exception_data("entries", errors)
    return out


def _integral(value: Any) -> Any:
    """Volcano's weights are Go ints read from YAML or text: ``3``, ``3.0`` and ``"3"`` are 3; ``2.5``,
    ``True`` and ``"ten"`` stay as they are for the strict ``int`` to refuse (never truncated)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)
    return value


# A weight gpuq multiplies into float64 scores: bounded so a score never overflows (wire.MAX_WEIGHT).
ZeroWeight = Annotated[
    int,
    Field(ge=0, le=MAX_WEIGHT),
    expect(f"an integer from 0 to {MAX_WEIGHT}"),
    BeforeValidator(_integral),
]
PositiveWeight = Annotated[
    int,
    Field(ge=1, le=MAX_WEIGHT),
    expect(f"an integer from 1 to {MAX_WEIGHT}"),
    BeforeValidator(_integral),
]


class PluginArgs(BaseModel):
    """Base of every plugin's argument model (see the module doc)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        validate_by_alias=True,
        validate_by_name=True,
        arbitrary_types_allowed=True,
    )

    # The plugin's configuration name (common.model.plugin_names), for the unknown-key message.
    PLUGIN: ClassVar[str] = ""
    # Prefixes of Volcano's flat keys regrouped into the map field aliased ``<prefix><resource>``.
    GROUPED: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _regroup(cls, data: Any, info: ValidationInfo) -> Any:
        """``quota.cpu: 32`` -> ``{"quota.<resource>": {"cpu": 32}}`` (only when reading Volcano's map)."""
        if not (info.context and info.context.get(_VOLCANO)) or not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        for key, value in data.items():
            prefix = next((p for p in cls.GROUPED if key.startswith(p)), None)
            if prefix is None:
                out[key] = value
            else:
                out.setdefault(prefix + PLACEHOLDER, {})[key[len(prefix) :]] = value
        return out

    @classmethod
    def parse(cls, arguments: Mapping[str, Any] | None) -> Self:
        """Read Volcano's argument map; raises :class:`ConfigErrors` with every problem, each naming the
        argument key (``quota.cpu``, ``resources.nvidia.com/gpu.weight``), the value and the expectation."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ConfigErrors(
                [ConfigError(f"{cls.PLUGIN}.arguments", arguments, "a mapping of argument name to value")]
            )
        problems = [
            ConfigError(str(key), value, "an argument name (a string)")
            for key, value in arguments.items()
            if not isinstance(key, str)
        ]
        raw = {key: value for key, value in arguments.items() if isinstance(key, str)}
        try:
            model = cls.model_validate(raw, by_alias=True, by_name=False, context={_VOLCANO: True})
        except ValidationError as err:
            problems += [cls._problem(error, raw) for error in err.errors(include_url=False)]
        if problems:
            raise ConfigErrors(problems)
        return model

    # -- what a refusal says ------------------------------------------------------------------------

    @classmethod
    def keys(cls) -> list[str]:
        """The argument keys, in field order (a regrouped map by its pattern: ``quota.<resource>``)."""
        return [field.alias or name for name, field in cls.model_fields.items()]

    @classmethod
    def unknown_key(cls, location: Sequence[str]) -> str:
        """What a key not among the model's (at ``location``, the user's key path) should have been."""
        return f"one of the {cls.PLUGIN} arguments {', '.join(cls.keys())}"

    @classmethod
    def missing(cls, key: str) -> str:
        """What a required argument that is absent should be."""
        return "a value (required)"

    @classmethod
    def _problem(cls, error: Mapping[str, Any], raw: Mapping[str, Any]) -> ConfigError:
        location = _user_location(error["loc"])
        field = ".".join(location)
        context = error.get("ctx") or {}
        found = _raw_value(raw, location)
        value = context.get("value", found if found is not _NO_VALUE else error["input"])
        if error["type"] == _ERROR:
            expected = str(context["expected"])
        elif error["type"] == "extra_forbidden":
            expected = cls.unknown_key(location)
        elif error["type"] == "missing":
            expected, value = cls.missing(field), None
        else:  # a type the field declares no expectation for: pydantic's words, without its preamble
            expected = str(error["msg"]).removeprefix("Input should be ").removeprefix("Input ")
        return ConfigError(field, value, expected)


def _user_location(loc: Sequence[int | str]) -> list[str]:
    """A pydantic location as the user's key path: the map-key marker dropped, a regrouped field's
    pattern filled in (``("quota.<resource>", "cpu")`` -> ``["quota.cpu"]``)."""
    parts = [str(p) for p in loc if p != _KEY]
    if len(parts) >= 2 and PLACEHOLDER in parts[0]:
        parts = [parts[0].replace(PLACEHOLDER, parts[1]), *parts[2:]]
    return parts


def _raw_value(raw: Mapping[str, Any], location: Sequence[str]) -> Any:
    """The value the user wrote at ``location`` (before any conversion), or ``_NO_VALUE``."""
    value: Any = raw
    for part in location:
        if not isinstance(value, Mapping):
            return _NO_VALUE
        found = next((v for k, v in value.items() if str(k) == part), _NO_VALUE)
        if found is _NO_VALUE:
            return _NO_VALUE
        value = found
    return value
