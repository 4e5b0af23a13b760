"""deploy/ as the e2e tests read it: deploy/render.py loaded as a module (the Helm chart rendered), the
kustomize trees built by kubectl, and documents applied for real (server-side)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.e2e.controlplane.harness import Kubectl
from tests.testing.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
NAMESPACE = "gpuq-system"


def load_render() -> ModuleType:
    """deploy/render.py (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("gpuq_deploy_render", DEPLOY / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = load_render()


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(kubectl: Kubectl, target: Path) -> list[dict[str, Any]]:
    return documents(kubectl("kustomize", str(target)).stdout)


def apply_for_real(kubectl: Kubectl, docs: Sequence[dict[str, Any]]) -> None:
    kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
