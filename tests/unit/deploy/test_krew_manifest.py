"""deploy/krew/gpuq.yaml is a krew plugin manifest krew accepts: the rules of krew's
``internal/index/validation/validate.go`` (ValidatePlugin, validatePlatform, validateFiles,
validateSelector), ported, plus what gpuq's release needs of it (its version is the package's, every
archive follows the release URL pattern). Each rule is shown to refuse a manifest that breaks it."""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.testing.paths import REPO_ROOT

MANIFEST = REPO_ROOT / "deploy" / "krew" / "gpuq.yaml"
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
SAFE_NAME = re.compile(r"^[\w-]+$")
SHA256 = re.compile(r"^[a-f0-9]{64}$")
# krew's semver: "v" then MAJOR.MINOR.PATCH with optional pre-release and build parts.
SEMVER = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
RELEASE = "https://github.com/gpuq/gpuq/releases/download/{version}/kubectl-gpuq_{version}_{os}_{arch}.tar.gz"
WINDOWS_FORBIDDEN = {
    "CON",
    "PRN",
    "AUX",
    "NUL",
    *(f"COM{i}" for i in range(1, 10)),
    *(f"LPT{i}" for i in range(1, 10)),
}


def problems(name: str, plugin: dict[str, Any]) -> list[str]:
    """What krew (and gpuq's release) refuses in ``plugin`` named ``name``; empty when it is valid."""
    found: list[str] = []
    if plugin.get("apiVersion") != API_VERSION:
        found.append("apiVersion")
    if plugin.get("kind") != "Plugin":
        found.append("kind")
    if not SAFE_NAME.match(name) or name.upper() in WINDOWS_FORBIDDEN:
        found.append("unsafe name")
    if (plugin.get("metadata") or {}).get("name") != name:
        found.append("metadata.name")
    spec = plugin.get("spec") or {}
    short = spec.get("shortDescription") or ""
    if not short or "\n" in short or "\r" in short:
        found.append("shortDescription")
    platforms = spec.get("platforms") or []
    if not platforms:
        found.append("platforms")
    version = str(spec.get("version") or "")
    if not SEMVER.match(version):
        found.append("version")
    for index, platform in enumerate(platforms):
        found += [f"platforms[{index}].{problem}" for problem in _platform(platform, version)]
    return found


def _platform(platform: dict[str, Any], version: str) -> list[str]:
    found: list[str] = []
    if not platform.get("uri"):
        found.append("uri")
    if not SHA256.match(str(platform.get("sha256") or "")):
        found.append("sha256")
    if not platform.get("bin"):
        found.append("bin")
    files = platform.get("files")
    if files is not None and (not files or any(not f.get("from") or not f.get("to") for f in files)):
        found.append("files")
    selector = platform.get("selector")
    labels = (selector or {}).get("matchLabels")
    expressions = (selector or {}).get("matchExpressions")
    keys = set(labels or {}) | {e.get("key") for e in expressions or ()}
    if not selector or (labels is None and not expressions) or labels == {} or expressions == []:
        found.append("selector")
    elif keys - {"os", "arch"}:
        found.append("selector keys")
    elif platform.get("uri") != RELEASE.format(
        version=version, os=(labels or {}).get("os"), arch=(labels or {}).get("arch")
    ):
        found.append("uri pattern")
    return found


def _manifest() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return data


def test_the_manifest_is_valid_for_krew() -> None:
    assert problems(MANIFEST.stem, _manifest()) == []


def test_its_version_is_the_packages() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert _manifest()["spec"]["version"] == f"v{project['version']}"
    platforms = {
        (p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"])
        for p in _manifest()["spec"]["platforms"]
    }
    assert ("linux", "amd64") in platforms


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(plugin: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = plugin
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_set("apiVersion", "krew.googlecontainertools.github.com/v1alpha1"), "apiVersion"),
        (_set("kind", "Plugins"), "kind"),
        (_set("metadata.name", "kubectl-gpuq"), "metadata.name"),
        (_set("spec.shortDescription", "two\nlines"), "shortDescription"),
        (_set("spec.version", "0.1.0"), "version"),
        (_set("spec.platforms", []), "platforms"),
        (_set("spec.platforms.0.sha256", "ABC"), "platforms[0].sha256"),
        (_set("spec.platforms.0.bin", ""), "platforms[0].bin"),
        (_set("spec.platforms.0.files", []), "platforms[0].files"),
        (_set("spec.platforms.0.selector", {"matchLabels": {}}), "platforms[0].selector"),
        (
            _set("spec.platforms.0.selector", {"matchLabels": {"os": "linux", "cpu": "x"}}),
            "platforms[0].selector keys",
        ),
        (_set("spec.platforms.0.uri", "https://example.com/kubectl-gpuq.tar.gz"), "platforms[0].uri pattern"),
    ],
)
def test_each_rule_refuses_what_breaks_it(change: Callable[[dict[str, Any]], None], problem: str) -> None:
    broken = copy.deepcopy(_manifest())
    change(broken)
    assert problem in problems(MANIFEST.stem, broken)
