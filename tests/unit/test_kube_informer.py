"""common.kube: the re-list diff (pure) and how watch events update the informer cache."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.kube.diff import Change, diff, object_key, strip_managed_fields
from common.kube.informer import ApiError, Gone, Informer
from common.kube.resources import NODES, PODS, QUEUES


def obj(name: str, rv: str, ns: str = "", uid: str = "u") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "uid": uid}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta}


def by_key(*objects: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {object_key(o): o for o in objects}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ([], [], []),
        ([], [obj("a", "1")], [("add", "a")]),
        ([obj("a", "1")], [], [("delete", "a")]),
        ([obj("a", "1")], [obj("a", "1")], []),
        ([obj("a", "1")], [obj("a", "2")], [("update", "a")]),
        ([obj("a", "1", uid="x")], [obj("a", "1", uid="y")], [("update", "a")]),
        (
            [obj("b", "1"), obj("c", "1")],
            [obj("a", "1"), obj("c", "2")],
            [("delete", "b"), ("add", "a"), ("update", "c")],
        ),
    ],
    ids=["empty", "add", "delete", "same", "update", "recreated", "mixed-deletes-first"],
)
def test_relist_diff(
    old: list[dict[str, Any]], new: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    changes = diff(by_key(*old), by_key(*new))
    assert [(c.type, c.key[1]) for c in changes] == expected


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("123")),
    st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("123")),
)
def test_diff_replayed_on_the_old_cache_gives_the_new_one(old: dict[str, str], new: dict[str, str]) -> None:
    before = by_key(*(obj(k, v) for k, v in old.items()))
    after = by_key(*(obj(k, v) for k, v in new.items()))
    cache = dict(before)
    for change in diff(before, after):
        if change.type == "delete":
            del cache[change.key]
        else:
            assert (change.type == "add") == (change.key not in cache)
            cache[change.key] = change.obj
    assert cache == after


def informer(kind: Any = PODS) -> tuple[Informer, list[Change]]:
    seen: list[Change] = []
    return Informer(None, kind, handlers=[seen.append]), seen


def test_watch_events_update_cache_and_resource_version() -> None:
    inf, seen = informer()
    inf._event({"type": "ADDED", "object": obj("p", "5", ns="ns")})
    inf._event({"type": "MODIFIED", "object": obj("p", "6", ns="ns")})
    assert inf.get("ns", "p") is not None and inf.resource_version == "6"
    inf._event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert inf.resource_version == "9"
    inf._event({"type": "DELETED", "object": obj("p", "10", ns="ns")})
    assert inf.get("ns", "p") is None
    assert [c.type for c in seen] == ["add", "update", "delete"]
    assert seen[1].old is not None and seen[1].old["metadata"]["resourceVersion"] == "5"
    assert seen[0].obj["kind"] == "Pod" and seen[0].obj["apiVersion"] == "v1"


def test_410_in_the_watch_means_relist() -> None:
    inf, _ = informer()
    with pytest.raises(Gone):
        inf._event({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    with pytest.raises(ApiError):
        inf._event({"type": "ERROR", "object": {"kind": "Status", "code": 500}})
    with pytest.raises(ApiError):
        inf._event({"type": "WHAT", "object": obj("p", "1")})


def test_handler_failure_does_not_stop_delivery() -> None:
    seen: list[str] = []

    def broken(_: Change) -> None:
        raise RuntimeError("boom")

    inf = Informer(None, QUEUES, handlers=[broken, lambda c: seen.append(c.key[1])])
    inf._event({"type": "ADDED", "object": obj("q", "1")})
    assert seen == ["q"]


def test_cluster_scoped_get_ignores_namespace_and_managed_fields_are_dropped() -> None:
    inf, _ = informer(NODES)
    node = obj("n1", "1")
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    inf._event({"type": "ADDED", "object": node})
    cached = inf.get("whatever", "n1")
    assert cached is not None and "managedFields" not in cached["metadata"]
    assert strip_managed_fields({"metadata": "odd"}) == {"metadata": "odd"}


def test_paths() -> None:
    assert PODS.path == "/api/v1/pods"
    assert QUEUES.path == "/apis/scheduling.volcano.sh/v1beta1/queues"
    assert QUEUES.ref("x", "q") == "Queue/q"
