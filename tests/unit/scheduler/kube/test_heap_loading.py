"""scheduler.kube.heap: no cyclic collection while the caches load; on the way out everything alive
is frozen out of later collections, without a collection first (it would walk the loaded caches once
more): a reference cycle made meanwhile is frozen with them."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest

from gpuq_k8s.scheduler.kube import heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the frozen objects go back to the collector: the rest of the suite is unchanged
    gc.enable()


def test_loading_turns_the_collector_off_then_freezes_without_collecting(thawed: None) -> None:
    assert gc.isenabled()
    kept: list[dict[str, object]] = []
    with heap.loading():
        assert not gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle nothing refers to once the names go
        dead = weakref.ref(a)
        del a, b
        kept.extend({"item": i} for i in range(1000))
        for _ in range(50_000):  # far past every generation's threshold: still no collection
            Node()
        assert dead() is not None
    assert gc.isenabled()
    assert dead() is not None  # frozen, not collected: no walk of everything before the freeze
    assert gc.get_freeze_count() >= len(kept)  # what stayed alive is out of the collector's walks


def test_loading_leaves_a_disabled_collector_disabled(thawed: None) -> None:
    gc.disable()
    with heap.loading():
        pass
    assert not gc.isenabled()


def test_loading_restores_the_collector_when_the_load_fails(thawed: None) -> None:
    with pytest.raises(RuntimeError), heap.loading():
        raise RuntimeError("list failed")
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_command_lines_modules_load_without_a_collection_then_are_frozen() -> None:
    """gpuq_k8s/cli.py: every gpuq process (the scheduler's start among them) imports its modules with
    the collector off, then freezes what they made and turns the collector back on."""
    probe = (
        "import gc, sys\n"
        "sys.modules.pop('gpuq_k8s.cli', None)\n"
        "import gpuq_k8s.cli\n"
        "print(gc.isenabled(), gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    enabled, frozen = out.split()
    assert enabled == "True" and int(frozen) > 100_000  # the modules' objects, out of the walks
