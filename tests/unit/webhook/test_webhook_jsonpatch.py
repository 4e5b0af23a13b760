"""webhook.jsonpatch and webhook.review: patch building, applying, and the AdmissionReview envelope."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq_k8s.webhook import jsonpatch
from gpuq_k8s.webhook.review import Decision, MalformedReview, parse_review, response_body


@pytest.mark.parametrize(
    ("doc", "entries", "ops"),
    [
        ({}, {"a/b": "1"}, [{"op": "add", "path": "/metadata", "value": {"annotations": {"a/b": "1"}}}]),
        ({"metadata": {}}, {"k": "v"}, [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]),
        (
            {"metadata": {"annotations": {"k": "old", "x~y": "1"}}},
            {"k": "new", "x~y": "1"},
            [{"op": "replace", "path": "/metadata/annotations/k", "value": "new"}],
        ),
        (
            {"metadata": {"annotations": {}}},
            {"volcano.sh/card.name": "A"},
            [{"op": "add", "path": "/metadata/annotations/volcano.sh~1card.name", "value": "A"}],
        ),
        ({"metadata": {"annotations": {"k": "v"}}}, {"k": "v"}, []),
    ],
)
def test_set_entries(doc: dict[str, Any], entries: dict[str, str], ops: list[dict[str, Any]]) -> None:
    built = jsonpatch.set_entries(doc, ("metadata", "annotations"), entries)
    assert built == ops
    applied = jsonpatch.apply(doc, built)
    assert applied.get("metadata", {}).get("annotations", {}) | entries == applied["metadata"]["annotations"]
    assert jsonpatch.set_entries(applied, ("metadata", "annotations"), entries) == []


@given(
    st.dictionaries(st.text(max_size=5), st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=3), max_size=3),
)
def test_set_entries_then_apply_is_idempotent(existing: dict[str, str], entries: dict[str, str]) -> None:
    doc = {"metadata": {"annotations": existing}}
    applied = jsonpatch.apply(doc, jsonpatch.set_entries(doc, ("metadata", "annotations"), entries))
    assert applied["metadata"]["annotations"] == {**existing, **entries}
    assert jsonpatch.set_entries(applied, ("metadata", "annotations"), entries) == []


def test_apply_lists_and_errors() -> None:
    doc = {"a": [1, 2]}
    assert jsonpatch.apply(doc, [{"op": "add", "path": "/a/-", "value": 3}]) == {"a": [1, 2, 3]}
    assert jsonpatch.apply(doc, [{"op": "remove", "path": "/a/0"}]) == {"a": [2]}
    assert doc == {"a": [1, 2]}
    for bad in (
        {"op": "replace", "path": "/b", "value": 1},
        {"op": "move", "path": "/a"},
        {"op": "add", "path": "a"},
    ):
        with pytest.raises(jsonpatch.PatchError):
            jsonpatch.apply(doc, [bad])


def test_response_echoes_and_encodes_patch() -> None:
    review = parse_review(
        json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": {}},
            }
        ).encode()
    )
    patch = ({"op": "add", "path": "/x", "value": 1},)
    answer = json.loads(response_body(review, Decision(patch=patch, warnings=("w",))))
    assert answer["response"]["uid"] == "u"
    assert answer["response"]["warnings"] == ["w"]
    assert json.loads(base64.b64decode(answer["response"]["patch"])) == list(patch)
    denied = json.loads(response_body(review, Decision(allowed=False, message="m")))
    assert denied["response"]["status"] == {"code": 403, "reason": "Forbidden", "message": "m"}


@pytest.mark.parametrize(
    "body", [b"", b"null", b"{}", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}']
)
def test_parse_review_rejects(body: bytes) -> None:
    with pytest.raises(MalformedReview) as err:
        parse_review(body)
    assert "\n" not in str(err.value)
