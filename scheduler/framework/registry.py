"""Plugins by name, and building the plugin chain from the Volcano-format configuration.

A configuration entry builds its plugin and then the entry's *members* (kube-scheduler's filter and
score plugins a Volcano plugin runs: ``predicates`` runs NodePorts, InterPodAffinity, ...). A member
factory reads the entry's settings (its parsed arguments, which may switch the member off: it then
returns None) and its plugin carries the entry's name as ``config_name``, so the framework places it
in the entry's tier and applies the entry's switches (:class:`~scheduler.framework.interfaces.Plugin`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from gpuq_k8s.common.model.errors import ConfigError
from gpuq_k8s.scheduler.framework.interfaces import Handle, Plugin


class PluginSettings(Protocol):
    """What the registry reads of :class:`common.model.config.PluginConfig`."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Mapping[str, Any]: ...

    @property
    def args(self) -> BaseModel | None: ...

    @property
    def switches(self) -> Mapping[str, bool]:
        """Volcano's switches set on the plugin (the framework honours them, never the plugin)."""
        ...


M = TypeVar("M", bound=BaseModel)


def plugin_args(settings: PluginSettings | None, model: type[M]) -> M | None:
    """The plugin's parsed argument model from the configuration (``None``: use the defaults).

    The configuration loader parses every plugin's arguments with its engine; raw ``arguments``
    without a parsed model mean a caller skipped that step, which is refused rather than guessed.
    """
    if settings is None:
        return None
    args = settings.args
    if args is None:
        if settings.arguments:
            key = next(iter(settings.arguments))
            raise ConfigError(
                f"{settings.name}.arguments.{key}", settings.arguments[key], "arguments parsed by the config"
            )
        return None
    if not isinstance(args, model):
        raise ConfigError(f"{settings.name}.arguments", type(args).__name__, f"a {model.__name__}")
    return args


# A factory gets the plugin's configuration: ``args`` (the engine's parsed model) when the config
# loader parsed it, else the raw ``arguments`` for the plugin to parse with its engine.
PluginFactory = Callable[[Handle, PluginSettings], Plugin]
# A member factory gets its entry's configuration; None: the entry's arguments switch the member off.
MemberFactory = Callable[[Handle, PluginSettings], Plugin | None]


class Registry:
    def __init__(self, factories: Mapping[str, PluginFactory] | None = None) -> None:
        self._factories: dict[str, PluginFactory] = dict(factories or {})
        self._members: dict[str, list[MemberFactory]] = {}
        self._leading: dict[str, list[MemberFactory]] = {}

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} registered twice")
        self._factories[name] = factory

    def register_member(self, entry: str, factory: MemberFactory, *, leading: bool = False) -> None:
        """``factory`` builds a member plugin for every configuration entry named ``entry`` (after the
        entry's own plugin and the members registered before it, in registration order; ``leading``:
        before the entry's own plugin, as kube-scheduler's default profile runs NodeName and NodePorts
        before NodeResourcesFit, so a node is reported under the check kube-scheduler reports it under)."""
        if entry not in self._factories:
            raise ValueError(f"member of {entry!r}, which is not registered")
        (self._leading if leading else self._members).setdefault(entry, []).append(factory)

    def __contains__(self, name: str) -> bool:
        return name in self._factories

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def build(self, handle: Handle, tiers: Iterable[Iterable[PluginSettings]]) -> list[Plugin]:
        """Instantiate every configured plugin, in tier order; an unknown name is a ConfigError."""
        plugins: list[Plugin] = []
        for t, tier in enumerate(tiers):
            for p, settings in enumerate(tier):
                factory = self._factories.get(settings.name)
                if factory is None:
                    raise ConfigError(
                        f"tiers[{t}].plugins[{p}].name",
                        settings.name,
                        f"a plugin this scheduler provides ({', '.join(self.names)})",
                    )
                plugin = factory(handle, settings)
                plugin.config_name = settings.name
                leading = self._built(self._leading.get(settings.name, ()), handle, settings)
                trailing = self._built(self._members.get(settings.name, ()), handle, settings)
                plugins.extend((*leading, plugin, *trailing))
        return plugins

    @staticmethod
    def _built(factories: Iterable[MemberFactory], handle: Handle, settings: PluginSettings) -> list[Plugin]:
        """The members ``factories`` build for the entry ``settings`` (those its arguments switch on)."""
        out: list[Plugin] = []
        for member_factory in factories:
            member = member_factory(handle, settings)
            if member is not None:
                member.config_name = settings.name
                out.append(member)
        return out
