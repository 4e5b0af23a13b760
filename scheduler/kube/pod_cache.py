"""The pod informer's cache: what it holds of a pod, decoded straight from the bytes.

A list page, a streaming list's event or a watch event is decoded by msgspec against typed
declarations of the pod's read fields (:class:`Pod`): every other field (managedFields, a
container's env and probes, the kubelet's statuses...) is skipped in the bytes, never built. The
result is the same plain dict the cache held before (:func:`pod_cache`'s trimmed pod), so every
reader of a cached pod (``PodInfo.from_dict``, the feed's update rules, ``settled``, the re-list's
diff) reads it as before, with what is read of a pod unchanged: tests/unit/scheduler/kube/
test_feed_pod_cache.py compares the two decodings' PodInfo and update rules.

msgspec (a maintained library doing exactly this) because its decoding skips the unread fields
where orjson builds them all and the trimming then removes them: 6 us a pod instead of 14.5 us
(issue 29's in-process measurement, README).

The declarations type only the containers a reader walks into (an object, a list of objects); the
values are ``Any``, as decoded from JSON, but for the parts most pods share (tolerations, the node
selector, a container's resources): those are kept as their bytes (``msgspec.Raw``), and each distinct
one is decoded once and shared by every pod carrying it (:func:`_shared_typed`). What does not match
them (a ``spec`` that is not an object, a ``null`` container list: unusual, valid or not) is decoded
as before, orjson and the cache's trimming, for that object alone: a malformed pod still gets
``PodInfo.from_dict``'s error naming its field, in the feed, and never stops the informer; a watch's
ERROR event (a Status) is decoded so too.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict

import msgspec
import orjson

from gpuq_k8s.common.kube.diff import strip_managed_fields

# What is read of a pod (PodInfo.from_dict with common/model/pod_spec.py and pod_volumes.py,
# pod_update_matters, the feed's settled and replay order, the event recorder's involvedObject).
# A field a rule comes to read must be added here: test_feed_pod_cache.py's full pod carries every
# one.


class Resources(TypedDict, total=False):
    requests: Any
    limits: Any


class Container(TypedDict, total=False):
    name: Any
    image: Any
    ports: Any
    resources: msgspec.Raw  # decoded as Resources once per distinct bytes (_shared_raw)
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
    nodeSelector: msgspec.Raw  # these two decoded once per distinct bytes (_shared_raw)
    affinity: Any
    tolerations: msgspec.Raw
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


_resources: Final = msgspec.json.Decoder(Resources)


def decode_pod(raw: bytes | msgspec.Raw) -> Any:
    """One pod's JSON: the read fields (typed), else the whole object trimmed as before; the parts
    most pods share kept once either way (:func:`pod_cache`)."""
    try:
        return _shared_typed(_pod.decode(raw))
    except _DECODE_FAILED:
        return _fallback(orjson.loads(bytes(raw)))


def _fallback(obj: Any) -> Any:
    return pod_cache(obj) if type(obj) is dict else obj


# The shared parts of a typed pod, by their bytes: each distinct one decoded once (a workload's pods
# carry the same tolerations, node selector and container resources), no key made of the decoded
# value as pod_shared_parts makes. At most _SHARED_MAX distinct ones; past that, decoded each time.
_raw_parts: dict[bytes, Any] = {}


def _shared_raw(raw: msgspec.Raw, decode: Any) -> Any:
    key = bytes(raw)
    kept = _raw_parts.get(key)
    if kept is None:
        kept = decode(key)
        if len(_raw_parts) < _SHARED_MAX:
            _raw_parts[key] = kept
    return kept


def _shared_typed(pod: Pod) -> Pod:
    """A typed pod with its raw parts (the declarations' ``msgspec.Raw``) decoded and shared; raises
    msgspec's ValidationError for a container's resources that are no object (decoded as before)."""
    spec = pod.get("spec")
    if spec is None:
        return pod
    for container in (*spec.get("containers", ()), *spec.get("initContainers", ())):
        if "resources" in container:
            container["resources"] = _shared_raw(container["resources"], _resources.decode)
    if "tolerations" in spec:
        spec["tolerations"] = _shared_raw(spec["tolerations"], orjson.loads)
    if "nodeSelector" in spec:
        spec["nodeSelector"] = _shared_raw(spec["nodeSelector"], orjson.loads)
    return pod


class PodDecoder:
    """The pod informer's ``decoder`` (common/kube/informer.py ``Decoder``)."""

    def page(self, body: bytes) -> Any:
        """A list page: ``metadata`` and ``items``, each item decoded by :func:`decode_pod`."""
        try:
            page = _page.decode(body)
            for pod in page.get("items") or ():
                _shared_typed(pod)
            return page
        except _DECODE_FAILED:
            pass
        try:
            raw_page = _raw_page.decode(body)
        except _DECODE_FAILED:
            return orjson.loads(body)  # not a list: the informer says so
        raw_page["items"] = [decode_pod(item) for item in raw_page.get("items") or ()]
        return raw_page

    def event(self, line: bytes) -> Any:
        """A watch event: ``type`` and ``object`` (a pod by :func:`decode_pod`; a Status, a bookmark
        as they are)."""
        try:
            event: Any = _event.decode(line)
            _shared_typed(event["object"])
        except _DECODE_FAILED:
            event = None
        if event is not None and event["type"] != "ERROR":  # an ERROR's Status is read whole
            return event
        event = orjson.loads(line)
        if type(event) is dict and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            event["object"] = _fallback(event.get("object"))
        return event


# What the pod informer's cache leaves out (:func:`pod_cache`): fields no reader of a cached pod reads
# (PodInfo.from_dict with common/model/pod_spec.py and pod_volumes.py, pod_update_matters, the
# backend's settled and lookups), named one by one so that a field a rule comes to read is kept
# unless it is listed here.
_POD_SPEC_UNREAD: Final = (
    "automountServiceAccountToken",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostname",
    "imagePullSecrets",
    "readinessGates",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
)
_CONTAINER_UNREAD: Final = (
    "args",
    "command",
    "env",
    "envFrom",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "securityContext",
    "startupProbe",
    "stdin",
    "stdinOnce",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
)
_POD_STATUS_UNREAD: Final = (
    "containerStatuses",
    "ephemeralContainerStatuses",
    "hostIP",
    "hostIPs",
    "initContainerStatuses",
    "podIP",
    "podIPs",
    "qosClass",
)
_CONTAINER_LISTS: Final = ("containers", "initContainers", "ephemeralContainers")
# Parts most pods of a cluster share, kept once (:func:`_shared`): the tolerations admission adds to
# every pod, a workload's node selector, its containers' resources. At most this many distinct ones.
_SHARED_MAX: Final = 4096
_shared_parts: dict[bytes, Any] = {}


def _shared(value: Any) -> Any:
    """``value``, or an equal one kept before: the pod cache holds each such part once. Shared parts
    are read-only like the rest of the cache (Informer.items)."""
    if not value:
        return value
    # Exact: 1, 1.0 and true stay apart; an equal part in another key order is merely kept twice.
    key = orjson.dumps(value)
    kept = _shared_parts.get(key)
    if kept is not None:
        return kept
    if len(_shared_parts) < _SHARED_MAX:
        _shared_parts[key] = value
    return value


def pod_cache(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod without its managedFields and the fields listed above (a container's env and probes,
    the kubelet's container statuses, ...), the parts most pods share kept once: what the pod cache
    holds of a pod decoded whole. 150,000 pods are most of the scheduler's memory (issue 29); none of
    what goes is read, so the cached pod's PodInfo and every comparison of two cached pods are what
    they were (tests/unit/scheduler/kube/test_feed_pod_cache.py). The pod informer decodes only the
    read fields in the first place (:func:`decode_pod`, the parts shared by their bytes), and this
    for what its declarations do not fit."""
    return pod_shared_parts(pod_trim(obj))


def pod_trim(obj: dict[str, Any]) -> dict[str, Any]:
    """:func:`pod_cache` without the sharing: the unread fields removed."""
    strip_managed_fields(obj)
    spec = obj.get("spec")
    if type(spec) is dict:
        for key in _POD_SPEC_UNREAD:
            spec.pop(key, None)
        for list_key in _CONTAINER_LISTS:
            containers = spec.get(list_key)
            if type(containers) is not list:
                continue
            for container in containers:
                if type(container) is not dict:
                    continue
                for key in _CONTAINER_UNREAD:
                    container.pop(key, None)
    status = obj.get("status")
    if type(status) is dict:
        for key in _POD_STATUS_UNREAD:
            status.pop(key, None)
    return obj


def pod_shared_parts(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod with the parts most pods share (tolerations, node selector, a container's resources)
    replaced by an equal one kept before (:func:`pod_cache`'s second half)."""
    spec = obj.get("spec")
    if type(spec) is dict:
        for list_key in _CONTAINER_LISTS:
            containers = spec.get(list_key)
            if type(containers) is not list:
                continue
            for container in containers:
                if type(container) is dict and "resources" in container:
                    container["resources"] = _shared(container["resources"])
        for key in ("tolerations", "nodeSelector"):
            if key in spec:
                spec[key] = _shared(spec[key])
    return obj
