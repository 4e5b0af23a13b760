"""The pod informer's decoder: each pod straight from the bytes into what the scheduler reads of it.

A list page, a streaming list's event or a watch event is decoded by msgspec against typed
declarations of the pod's read fields (:class:`Pod`): every other field (managedFields, a
container's env and probes, the kubelet's statuses...) is skipped in the bytes, never built. The
result is the same plain dict the cache held before (``feed.pod_cache``'s trimmed pod), so every
reader of a cached pod (``PodInfo.from_dict``, the feed's update rules, ``settled``, the re-list's
diff) reads it as before, with what is read of a pod unchanged: tests/unit/scheduler/kube/
test_pod_decode.py compares the two decodings' PodInfo and update rules.

msgspec (a maintained library doing exactly this) because its decoding skips the unread fields
where orjson builds them all and the trimming then removes them: 6 us a pod instead of 14.5 us
(issue 29's in-process measurement, README).

The declarations type only the containers a reader walks into (an object, a list of objects); the
values are ``Any``, as decoded from JSON. What does not match them (a ``spec`` that is not an
object, a ``null`` container list: unusual, valid or not) is decoded as before, orjson and the
cache's trimming, for that object alone: a malformed pod still gets ``PodInfo.from_dict``'s error
naming its field, in the feed, and never stops the informer; a watch's ERROR event (a Status) is
decoded so too.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict

import msgspec
import orjson

from gpuq_k8s.scheduler.kube.feed import pod_trim

# What is read of a pod (PodInfo.from_dict with common/model/pod_spec.py and pod_volumes.py,
# pod_update_matters, the feed's settled and replay order, the event recorder's involvedObject).
# A field a rule comes to read must be added here: test_pod_decode.py's full pod carries every one.


class Resources(TypedDict, total=False):
    requests: Any
    limits: Any


class Container(TypedDict, total=False):
    name: Any
    image: Any
    ports: Any
    resources: Resources
    restartPolicy: Any


class Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    labels: Any
    annotations: Any
    ownerReferences: Any


class Spec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    nodeName: Any
    nodeSelector: Any
    affinity: Any
    tolerations: Any
    schedulerName: Any
    priority: Any
    priorityClassName: Any
    preemptionPolicy: Any
    schedulingGates: Any
    volumes: Any
    topologySpreadConstraints: Any
    resourceClaims: Any
    overhead: Any
    resources: Any


class Status(TypedDict, total=False):
    phase: Any
    startTime: Any
    nominatedNodeName: Any
    conditions: Any
    resourceClaimStatuses: Any


class Pod(TypedDict, total=False):
    kind: Any
    apiVersion: Any
    metadata: Metadata
    spec: Spec
    status: Status


class _Event(TypedDict):
    type: Any
    object: Pod


class _Page(TypedDict, total=False):
    metadata: Any
    items: list[Pod]


class _RawPage(TypedDict, total=False):
    metadata: Any
    items: list[msgspec.Raw]


_DECODE_FAILED: Final = (msgspec.ValidationError, msgspec.DecodeError)
_pod: Final = msgspec.json.Decoder(Pod)
_event: Final = msgspec.json.Decoder(_Event)
_page: Final = msgspec.json.Decoder(_Page)
_raw_page: Final = msgspec.json.Decoder(_RawPage)


def decode_pod(raw: bytes | msgspec.Raw) -> Any:
    """One pod's JSON: the read fields (typed), else the whole object trimmed as before."""
    try:
        return _pod.decode(raw)
    except _DECODE_FAILED:
        return _fallback(orjson.loads(bytes(raw)))


def _fallback(obj: Any) -> Any:
    return pod_trim(obj) if type(obj) is dict else obj


class PodDecoder:
    """The pod informer's ``decoder`` (common/kube/informer.py ``Decoder``)."""

    def page(self, body: bytes) -> Any:
        """A list page: ``metadata`` and ``items``, each item decoded by :func:`decode_pod`."""
        try:
            return _page.decode(body)
        except _DECODE_FAILED:
            pass
        try:
            page = _raw_page.decode(body)
        except _DECODE_FAILED:
            return orjson.loads(body)  # not a list: the informer says so
        page["items"] = [decode_pod(item) for item in page.get("items") or ()]
        return page

    def event(self, line: bytes) -> Any:
        """A watch event: ``type`` and ``object`` (a pod by :func:`decode_pod`; a Status, a bookmark
        as they are)."""
        try:
            event: Any = _event.decode(line)
        except _DECODE_FAILED:
            event = None
        if event is not None and event["type"] != "ERROR":  # an ERROR's Status is read whole
            return event
        event = orjson.loads(line)
        if type(event) is dict and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            event["object"] = _fallback(event.get("object"))
        return event
