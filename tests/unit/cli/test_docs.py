"""docs/configuration.md is generated from the argument models and the annotation constants."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from gpuq_k8s import docs
from gpuq_k8s import docs_plugins as plugin_docs
from gpuq_k8s import docs_volcano_plugins as volcano_docs
from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.config import ARGUMENTS
from gpuq_k8s.scheduler import plugins as docs_plugins
from gpuq_k8s.scheduler.plugins import PLUGINS, default_registry
from gpuq_k8s.scheduler.plugins.binpack import Binpack


def test_committed_configuration_reference_is_current() -> None:
    """Issue 7, done when: the configuration reference is generated and a test fails if it is stale."""
    assert docs.TARGET.read_text(encoding="utf-8") == docs.render(), "run `python -m gpuq_k8s.docs`"


def test_every_annotation_constant_is_documented() -> None:
    assert set(docs.annotation_constants()) == set(docs.ANNOTATIONS)
    text = docs.render()
    for value in docs.annotation_constants().values():
        assert f"`{value}`" in text


@pytest.mark.parametrize("plugin", plugin_docs.PLUGINS, ids=lambda p: p.name)
def test_every_documented_argument_is_accepted_and_every_model_field_documented(
    plugin: plugin_docs.Plugin,
) -> None:
    docs._check(plugin)
    for arg in plugin.arguments:
        assert f"`{arg.key}`" in docs.render()


def test_a_misspelt_argument_fails_the_generation() -> None:
    plugin = plugin_docs.PLUGINS[0]
    wrong = plugin_docs.Plugin(
        plugin.name,
        plugin.spec,
        plugin.model,
        plugin.parse,
        plugin.required,
        (*plugin.arguments, plugin_docs.Argument("nodeOrderWieght", ("node_order_weight",), 1.0, "x", "1")),
    )
    with pytest.raises(docs.DocsError, match="nodeOrderWieght"):
        docs._check(wrong)


def test_check_mode_reports_a_stale_file(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "configuration.md"  # type: ignore[operator]
    stale.write_text("old\n")
    monkeypatch.setattr(docs, "TARGET", stale)
    assert docs.main(["--check"]) == 1
    assert docs.main([]) == 0
    assert docs.main(["--check"]) == 0


def test_every_registered_plugin_is_documented_under_its_registered_name() -> None:
    """One spelling per plugin (common/model/plugin_names.py): the configuration accepts it, the
    scheduler registers the plugin class whose ``name`` it is, docs/configuration.md documents it, with
    the argument model the configuration reads (or as taking none)."""
    registry = default_registry()
    assert [plugin.name for plugin in PLUGINS] == [*dict.fromkeys(plugin.name for plugin in PLUGINS)]
    assert set(registry.names) == {plugin.name for plugin in PLUGINS} == set(plugin_names.ALL)
    with_arguments = {
        plugin.name: plugin.model for plugin in (*plugin_docs.PLUGINS, *volcano_docs.VOLCANO_PLUGINS)
    }
    assert set(with_arguments) | set(volcano_docs.PLAIN_PLUGINS) == set(registry.names)
    assert with_arguments == dict(ARGUMENTS)
    text = docs.render()
    for name in registry.names:
        assert f"### {name}\n" in text or f"| `{name}` |" in text, name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda: {**volcano_docs.PLAIN_PLUGINS, "gangg": "a misspelt plugin"}, "not name: ['gangg']"),
        (
            lambda: {k: v for k, v in volcano_docs.PLAIN_PLUGINS.items() if k != "drf"},
            "without documentation",
        ),
        (
            lambda: {**volcano_docs.PLAIN_PLUGINS, "binpack": "documented twice"},
            "documented twice: ['binpack']",
        ),
        (lambda: {**volcano_docs.PLAIN_PLUGINS, "priority": "x", "nodeorder": "x"}, "documented twice"),
    ],
    ids=["unknown", "missing", "twice", "twice-with-arguments"],
)
def test_a_plugin_name_drifting_from_the_registry_fails_the_generation(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[], dict[str, str]], message: str
) -> None:
    monkeypatch.setattr(docs, "PLAIN_PLUGINS", change())
    with pytest.raises(docs.DocsError, match=re.escape(message)):
        docs.render()


def test_a_plugin_documented_with_another_model_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = volcano_docs.VOLCANO_PLUGINS[0]
    wrong = plugin_docs.Plugin(plugin.name, plugin.spec, CapacityCardArgs, plugin.parse, {}, ())
    monkeypatch.setattr(docs, "VOLCANO_PLUGINS", (wrong, *volcano_docs.VOLCANO_PLUGINS[1:]))
    with pytest.raises(docs.DocsError, match=f"{plugin.name}: documented with CapacityCardArgs"):
        docs.render()


def test_a_plugin_registered_under_another_name_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    renamed = type("Renamed", (Binpack,), {"name": "bin-pack"})
    monkeypatch.setattr(docs_plugins, "PLUGINS", (*docs_plugins.PLUGINS[:-1], renamed))
    with pytest.raises(docs.DocsError, match=re.escape("['bin-pack', 'binpack']")):
        docs.render()
