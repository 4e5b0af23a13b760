"""The scheduler configuration file, read by both processes (``--config``; design.md Semantics 10).

``gpuq scheduler``, ``gpuq webhook``, ``gpuq simulate`` and ``gpuq explain`` read the same file the same
way: no file means the default configuration; an unreadable or invalid file is a one-line
:class:`~common.model.errors.GpuqError` (the commands exit 2 with it). A ConfigMap holding the
configuration (Volcano's ``volcano-scheduler-configmap``, gpuq's ``gpuq-scheduler-config``) is unwrapped,
with a note on stderr. Parsing is the model's (:class:`~common.model.config.SchedulerConfig`); this is
only the file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import GpuqError


def _stderr(note: str) -> None:
    print(note, file=sys.stderr)


def read_config(path: str | Path | None, note: Callable[[str], None] = _stderr) -> SchedulerConfig:
    """The configuration ``path`` holds; the default configuration when ``path`` is None. ``note``
    takes the one line said when the file is a ConfigMap (stderr by default)."""
    if path is None:
        return SchedulerConfig.default()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise GpuqError(f"cannot read: {err.strerror}") from None
    config, unwrapped = SchedulerConfig.read(text)
    if unwrapped is not None:
        note(f"note: --config {path} is a ConfigMap: {unwrapped}")
    return config
