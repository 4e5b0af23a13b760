"""docs/configuration.md is generated from the argument models and the annotation constants."""

from __future__ import annotations

import pytest

from gpuq_k8s import docs


def test_committed_configuration_reference_is_current() -> None:
    """Issue 7, done when: the configuration reference is generated and a test fails if it is stale."""
    assert docs.TARGET.read_text(encoding="utf-8") == docs.render(), "run `python -m gpuq_k8s.docs`"


def test_every_annotation_constant_is_documented() -> None:
    assert set(docs.annotation_constants()) == set(docs.ANNOTATIONS)
    text = docs.render()
    for value in docs.annotation_constants().values():
        assert f"`{value}`" in text


@pytest.mark.parametrize("plugin", docs.PLUGINS, ids=lambda p: p.name)
def test_every_documented_argument_is_accepted_and_every_model_field_documented(plugin: docs.Plugin) -> None:
    docs._check(plugin)
    for arg in plugin.arguments:
        assert f"`{arg.key}`" in docs.render()


def test_a_misspelt_argument_fails_the_generation() -> None:
    plugin = docs.PLUGINS[0]
    wrong = docs.Plugin(
        plugin.name,
        plugin.spec,
        plugin.model,
        plugin.parse,
        plugin.required,
        (*plugin.arguments, docs.Argument("nodeOrderWieght", ("node_order_weight",), 1.0, "x", "1")),
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
