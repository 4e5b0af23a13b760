"""The Kubernetes backend's PreBind (scheduler/kube/backend.py ``KubeBackend.pre_bind``) against a scripted
API client (no server) and a scripted informer cache: each write a conditional merge patch, the wait
on the caches only (first for the versions the writes produced, then the plan's condition), and what
a refused write, a failed or timed-out condition, a lost leadership and a deleted pod become, with
the rollback of the plans carried out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from gpuq_k8s.common.kube.events import EventRecorder
from gpuq_k8s.common.kube.status import StatusWriter
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.prebind import DONE, WAIT, ApiWrite, Lookup, PreBindPlan, Progress
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.backend import Outcome, Result
from gpuq_k8s.scheduler.kube.backend import KubeBackend
from tests.testing.builders import MakePod, MakePV
from tests.testing.scripted_api import Response, apply_merge_patch

PV_PATH = "/api/v1/persistentvolumes/pv-1"
POD = MakePod("p").uid("uid-p").node("n1").info()


class Api:
    """Keeps the objects it is sent merge patches for (a resourceVersion a patch names must be the
    object's, else 409); records (method, path, body)."""

    def __init__(self, objects: dict[str, Obj], refuse: Sequence[str] = ()) -> None:
        self.objects = objects
        self.refuse = set(refuse)
        self.requests: list[tuple[str, str, Any]] = []
        self.version = 10

    async def call_api(self, path: str, method: str, body: Any = None, **_: Any) -> Response:
        self.requests.append((method, path, body))
        current = self.objects.get(path)
        if path in self.refuse or current is None:
            return Response(403 if path in self.refuse else 404, {"message": f"{path} refused"})
        wanted = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"].get("resourceVersion"):
            return Response(409, {"message": "the object has been modified"})
        self.version += 1
        updated = apply_merge_patch(current, body)
        updated["metadata"]["resourceVersion"] = str(self.version)
        self.objects[path] = updated
        return Response(200, updated)


def backend(api: Api, cache: dict[tuple[Kind, str, str], Obj], **kw: Any) -> KubeBackend:
    return KubeBackend(
        api,
        events=EventRecorder(api, controller="test", instance="test"),
        statuses=StatusWriter(api, {}, lambda *a: None),
        lookup=lambda kind, namespace, name: cache.get((kind, namespace, name)),
        **kw,
    )


def claim_ref_write(version: str = "3") -> ApiWrite:
    patch = {
        "metadata": {"resourceVersion": version},
        "spec": {"claimRef": {"namespace": "ns", "name": "data"}},
    }
    return ApiWrite(kinds.PERSISTENT_VOLUME, "", "pv-1", patch)


def bound(lookup: Lookup) -> Progress:
    """Done once the cached volume says Bound; failed when it says Failed."""
    volume = lookup(kinds.PERSISTENT_VOLUME, "", "pv-1") or {}
    phase = (volume.get("status") or {}).get("phase")
    if phase == "Failed":
        return Progress.failed("binding volumes: the volume failed")
    return DONE if phase == "Bound" else WAIT


def run(
    kube: KubeBackend, plans: Sequence[PreBindPlan], meanwhile: Callable[[], None] | None = None
) -> Outcome:
    outcomes: list[Outcome] = []

    async def go() -> None:
        kube.pre_bind(POD, "n1", plans, outcomes.append)
        await asyncio.sleep(0.01)
        if meanwhile is not None:
            meanwhile()
            kube.objects_changed()
        while kube.in_flight:
            await asyncio.sleep(0.001)

    asyncio.run(asyncio.wait_for(go(), 10))
    (outcome,) = outcomes
    return outcome


def pv(version: str, phase: str = "Available") -> Obj:
    return MakePV("pv-1").resource_version(version).phase(phase).obj()


def test_the_write_is_a_conditional_merge_patch_and_the_wait_reads_the_caches() -> None:
    """The plan is ready only once the cache shows the version the write produced and the condition
    holds: a cache still at the old version is not read for the condition, however it looks."""
    api = Api({PV_PATH: pv("3")})
    cache = {(kinds.PERSISTENT_VOLUME, "", "pv-1"): pv("3", phase="Bound")}  # stale, and looks bound
    kube = backend(api, cache)
    plan = PreBindPlan("VolumeBinding", (claim_ref_write(),), bound, timeout=5)
    still_waiting: list[int] = []

    def controller_binds() -> None:
        still_waiting.append(kube.in_flight)  # the write is answered, the wait goes on
        cache[(kinds.PERSISTENT_VOLUME, "", "pv-1")] = {**api.objects[PV_PATH], "status": {"phase": "Bound"}}

    outcome = run(kube, [plan], controller_binds)
    assert outcome.ok
    ((method, path, body),) = api.requests
    assert (method, path) == ("PATCH", PV_PATH)
    assert body == claim_ref_write().patch
    assert still_waiting == [1], "the outcome came before the cache caught up"


def test_a_refused_write_fails_the_binding_and_rolls_back_the_plans_carried_out() -> None:
    """A Conflict (the volume changed since the decision) fails the plan with the apiserver's words;
    the earlier plan's rollback is written."""
    api = Api({PV_PATH: pv("4")})
    cache = {(kinds.PERSISTENT_VOLUME, "", "pv-1"): pv("99")}
    claim = ApiWrite(
        kinds.PERSISTENT_VOLUME, "", "pv-1", {"status": {"allocation": {"node": "n1"}}}
    )  # any first plan: ready at once
    undo = ApiWrite(kinds.PERSISTENT_VOLUME, "", "pv-1", {"status": {"allocation": None}})
    first = PreBindPlan("DynamicResources", (claim,), lambda lookup: DONE, rollback=(undo,))
    second = PreBindPlan("VolumeBinding", (claim_ref_write("3"),), bound)
    outcome = run(backend(api, cache), [first, second])
    assert outcome.result is Result.NOT_BOUND
    assert outcome.message.startswith('running PreBind plugin "VolumeBinding": PersistentVolume/pv-1: ')
    assert "the object has been modified" in outcome.message
    assert [body for _, _, body in api.requests] == [claim.patch, claim_ref_write("3").patch, undo.patch]


def test_a_condition_that_fails_or_never_holds_fails_the_binding() -> None:
    api = Api({PV_PATH: pv("3")})
    cache = {(kinds.PERSISTENT_VOLUME, "", "pv-1"): pv("99", phase="Failed")}
    failed = run(backend(api, cache), [PreBindPlan("VolumeBinding", (claim_ref_write(),), bound)])
    assert failed.result is Result.NOT_BOUND
    assert failed.message == 'running PreBind plugin "VolumeBinding": binding volumes: the volume failed'
    api = Api({PV_PATH: pv("3")})
    cache = {(kinds.PERSISTENT_VOLUME, "", "pv-1"): pv("99")}
    plan = PreBindPlan(
        "VolumeBinding", (claim_ref_write(),), bound, timeout=0.05, waiting_for="binding volumes"
    )
    timed_out = run(backend(api, cache), [plan])
    assert timed_out.result is Result.NOT_BOUND
    assert (
        timed_out.message == 'running PreBind plugin "VolumeBinding": binding volumes: timed out after 0.05s'
    )


def test_nothing_is_written_without_the_lease_and_a_deleted_pod_stops_the_wait() -> None:
    api = Api({PV_PATH: pv("3")})
    outcome = run(
        backend(api, {}, may_write=lambda: False), [PreBindPlan("VolumeBinding", (claim_ref_write(),), bound)]
    )
    assert outcome.result is Result.NOT_BOUND and "not the leader" in outcome.message
    assert api.requests == []
    api = Api({PV_PATH: pv("3")})
    answers = [None, Result.GONE]
    kube = backend(api, {}, settled=lambda pod, node: answers.pop(0) if len(answers) > 1 else answers[0])
    gone = run(kube, [PreBindPlan("VolumeBinding", (claim_ref_write(),), bound, timeout=5)])
    assert gone.result is Result.GONE and len(api.requests) == 1
