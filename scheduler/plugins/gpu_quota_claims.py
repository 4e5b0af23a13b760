"""The gpu-quota plugin's DRA part: a namespace's allocated claims count against its
GPUResourceQuota, TFLOPS and VRAM from the devices' capacity and the card's specs, once per claim
whatever number of pods share it; the claim has no worker of its own: each of its pods is one, charged
by the gpu-quota plugin under the pod's key (docs/design.md "Quota over devices"; the usage from
:mod:`common.model.devices.gpu_usage`).

* Filter: on the rows where DynamicResources' Filter found an allocation, the new claims and the
  pod's worker must fit (single and total limits), else the row is rejected with the refusal.
* Reserve charges the claims the pod's allocation on the chosen row makes, claim by claim, atomically
  (all or none); Unreserve refunds those the API does not show allocated.
* A claim's ``status.allocation`` (after a restart, the informers' replay) is charged unchecked: it
  holds its devices already; the allocation's removal refunds it.
"""

from __future__ import annotations

from gpuq_k8s.common.model.devices.charges import ClaimCharge, chosen_subrequests
from gpuq_k8s.common.model.devices.gpu_usage import claim_request, combined_request
from gpuq_k8s.common.model.devices.plan import PodPlan
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.gpu_quota.store import GPUQuotaStore
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, Handle, ReasonMasks
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.device_charges import (
    Committed,
    device_charges,
    refused_rows,
    with_fallback,
)
from gpuq_k8s.scheduler.plugins.dra_extended import uses_devices

_CLAIM = "claim:"  # the store key of a claim's charge (pod keys have no colon)


class NamespaceClaims:
    def __init__(self, handle: Handle, store: GPUQuotaStore) -> None:
        self.handle = handle
        self.store = store
        self.charges = device_charges(handle.objects)
        self._in_flight: dict[str, tuple[str, ...]] = {}  # pod key -> claims its Reserve charged
        self.charges.subscribe(self._committed)

    def _committed(self, key: str, committed: Committed | None) -> None:
        namespace = key.partition("/")[0]
        if committed is None:
            if not any(key in keys for keys in self._in_flight.values()):
                self.store.unreserve(namespace, _CLAIM + key)
            return
        for pod_key, keys in list(self._in_flight.items()):
            if key in keys:
                rest = tuple(k for k in keys if k != key)
                if rest:
                    self._in_flight[pod_key] = rest
                else:
                    del self._in_flight[pod_key]
        request = claim_request(committed.charge)
        if request is None:
            self.store.unreserve(namespace, _CLAIM + key)
        elif self.store.is_reserved(namespace, _CLAIM + key):
            return  # charged at Reserve with the same devices
        else:
            self.store.charge(namespace, request, _CLAIM + key)

    def recharge(self) -> None:
        """After the store was rebuilt from the pods: every committed claim again."""
        for key, committed in list(self.charges.committed.items()):
            request = claim_request(committed.charge)
            if request is not None:
                self.store.charge(key.partition("/")[0], request, _CLAIM + key)

    def refusal(
        self, state: CycleState, pod: PodInfo, row: int
    ) -> tuple[Refusal | None, dict[str, ClaimCharge]]:
        """Whether the devices the pod's claims get on ``row`` (with its worker) fit the namespace's
        GPUResourceQuota, and their charges. A refused allocation's ``firstAvailable``
        subrequests are passed over for the next ones on that row, as the allocator tries them."""

        def check(charges: dict[str, ClaimCharge]) -> Refusal | None:
            request = combined_request(list(charges.values()))
            return self.store.check(pod.namespace, request) if request is not None else None

        def passed_over(_refusal: Refusal, plan: PodPlan, allocation: Allocation) -> dict[str, set[str]]:
            return chosen_subrequests(plan, allocation)  # each adds to the total refused

        return with_fallback(state, self.handle, row, self.charges, check=check, passed_over=passed_over)

    def filter_rows(self, state: CycleState, pod: PodInfo, n: int) -> tuple[BoolArray, ReasonMasks] | None:
        if not self.store.has_quota(pod.namespace):
            return None

        def refusal_on(row: int) -> str | None:
            refusal, _ = self.refusal(state, pod, row)
            return refusal.message if refusal is not None else None

        return refused_rows(state, n, self.charges, refusal_on)

    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        if not uses_devices(self.handle, pod) or not self.store.has_quota(pod.namespace):
            return Status.success()  # without a quota, the claims are charged as the API shows them
        self.charges.refresh()
        self.unreserve(pod)
        refusal, charges = self.refusal(state, pod, row)
        if refusal is not None:
            return Status.unschedulable(refusal.message)
        done: list[str] = []
        for key, charge in charges.items():
            request = claim_request(charge)
            if request is None:
                continue
            try:
                self.store.reserve(pod.namespace, request, _CLAIM + key)
            except QuotaExceeded as err:
                for charged in done:
                    self.store.unreserve(pod.namespace, _CLAIM + charged)
                return Status.unschedulable(f"ResourceClaim {key}: {err}")
            done.append(key)
        if done:
            self._in_flight[pod.key] = tuple(done)
        return Status.success()

    def unreserve(self, pod: PodInfo) -> None:
        for key in self._in_flight.pop(pod.key, ()):
            if not self.charges.is_committed(key):
                self.store.unreserve(pod.namespace, _CLAIM + key)
