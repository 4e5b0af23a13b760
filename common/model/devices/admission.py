"""What the webhook refuses of a ResourceClaim or ResourceClaimTemplate at ``kubectl create``: what can
never fit (docs/design.md "Quota over devices", "Webhook endpoints"). Pure: the webhook passes the
parsed spec, the devices it knows (DeviceClasses and ResourceSlices as an :class:`~.allocator.Allocator`)
and the quotas the enabled plugins read.

Per request (``exactly``, or each ``firstAvailable`` subrequest) asking ``ExactCount`` devices, not
for admin access (never charged):

* **card quota** (capacity-card on): the card types of the published devices the request could ever
  take (its class, selectors, tolerations and capacity); when every device it could take has one and
  every one of those types is named by some Queue's card quota, the request never fits when ``count``
  cards exceed, for each type, the largest quota any Queue has for it. A card type no Queue names
  leaves the verdict to the scheduler (a pod of no Queue is not subject to queue quotas, Semantics 7:
  only card types the cluster's quotas govern are judged). A ``firstAvailable`` request never fits
  when none of its subrequests does;
* **GPUResourceQuota** (gpu-quota on): ``count`` above the namespace's ``single.maxGPUCount``;
* **ElasticQuota** (capacity-scheduling on, with ``deviceClassMappings``): the claim's devices as
  mapped resources (:func:`~.class_mapping.mapped_requests`, what each pod using it is charged) above
  the namespace ElasticQuota's ``max`` for that resource.

A request whose DeviceClass does not exist, or that no published device matches, is admitted with a
warning: a DeviceClass and a driver's slices may come later (the scheduler keeps such a pod pending,
saying why). Where no device is published at all, card types cannot be told and the card quota is
not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuq_k8s.common.model.capacity_card.quota import QueueQuota
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.charges import candidate_card_types
from gpuq_k8s.common.model.devices.claims import EXACT_COUNT, ClaimSpec, Request, ResourceClaim
from gpuq_k8s.common.model.devices.class_mapping import mapped_requests
from gpuq_k8s.common.model.devices.plan import Alternative
from gpuq_k8s.common.model.devices.quota import DEFAULT_NAMING, DeviceNaming, card_type
from gpuq_k8s.common.model.quantity import format_units
from gpuq_k8s.common.model.quoting import quote


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    denials: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(slots=True)
class _Found:
    types: tuple[str, ...] = ()
    devices: int = 0  # devices the request could take
    typed: int = 0  # of which have a card type
    missing_class: bool = False
    problems: list[str] = field(default_factory=list)


def _field(spec_field: str, index: int, sub: int | None) -> str:
    at = f"{spec_field}.devices.requests[{index}]"
    return f"{at}.firstAvailable[{sub}]" if sub is not None else f"{at}.exactly"


def _look(request: Request, allocator: Allocator, naming: Mapping[str, DeviceNaming]) -> _Found:
    device_class = allocator.classes.get(request.class_name)
    if device_class is None:
        return _Found(missing_class=True)
    selectors = tuple((f"{device_class.ref} selector #{i}", s) for i, s in enumerate(device_class.selectors))
    selectors += tuple((f"request {request.name} selector #{i}", s) for i, s in enumerate(request.selectors))
    alternative = Alternative(request, device_class, selectors)
    found = _Found(types=candidate_card_types(alternative, allocator, naming))
    for pool in allocator.inventory.pools.values():
        if not pool.complete or pool.invalid:
            continue
        for s in pool.device_slices:
            usable = allocator.static_view(alternative, s).usable
            found.devices += len(usable)
            found.typed += sum(1 for i in usable if card_type(s.devices[i], naming) is not None)
    return found


def largest_card_quotas(quotas: Sequence[QueueQuota]) -> dict[str, tuple[int, str]]:
    """Per card type, the largest card quota of any Queue (milli-cards) and that Queue's name."""
    out: dict[str, tuple[int, str]] = {}
    for quota in sorted(quotas, key=lambda q: q.name):
        for name, amount in quota.cards.items():
            if name not in out or amount > out[name][0]:
                out[name] = (amount, quota.name)
    return out


def check_claim_spec(
    spec: ClaimSpec,
    ref: str,
    spec_field: str,
    allocator: Allocator | None,
    *,
    queue_quotas: Sequence[QueueQuota] | None = None,
    max_gpu_count: tuple[int, str] | None = None,
    elastic_max: tuple[Mapping[str, int], str] | None = None,
    class_map: Mapping[str, str] | None = None,
    naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING,
) -> ClaimVerdict:
    """See the module doc. ``queue_quotas``: every Queue's quota (None: capacity-card off);
    ``max_gpu_count``: the namespace GPUResourceQuota's ``single.maxGPUCount`` and its reference."""
    denials: list[str] = []
    warnings: list[str] = []
    published = allocator is not None and bool(allocator.inventory.pools)
    largest = largest_card_quotas(queue_quotas) if queue_quotas is not None else None
    for index, device_request in enumerate(spec.requests):
        subs = device_request.alternatives
        never: list[str] = []
        for j, request in enumerate(subs):
            sub = j if device_request.prioritized else None
            at = _field(spec_field, index, sub)
            if request.mode != EXACT_COUNT or request.admin_access:
                continue
            if max_gpu_count is not None and request.count > max_gpu_count[0]:
                never.append(
                    f"{at}.count: invalid value {request.count}: expected at most {max_gpu_count[0]} devices "
                    f"(single.maxGPUCount of {max_gpu_count[1]})"
                )
                continue
            if allocator is None or not published:
                continue
            found = _look(request, allocator, naming)
            if found.missing_class:
                warnings.append(
                    f"{ref}: {at}.deviceClassName: DeviceClass {quote(request.class_name)} does not exist "
                    "(yet): a pod using this claim stays pending until it does"
                )
                continue
            if not found.devices:
                warnings.append(
                    f"{ref}: {at}: no published device matches the request (yet): a pod using this claim "
                    "stays pending until a driver publishes one"
                )
                continue
            if largest is None or found.typed != found.devices or not all(t in largest for t in found.types):
                continue
            asked = request.count * CARD_UNIT
            if not any(largest.get(t, (0, ""))[0] >= asked for t in found.types):
                quotas = ", ".join(
                    f"{t}: {format_units('cards', largest[t][0])} (Queue/{largest[t][1]})"
                    for t in found.types
                )
                never.append(
                    f"{at}.count: invalid value {request.count}: expected at most the largest card quota of "
                    f"any Queue for the card types its devices are ({quotas})"
                )
        if never and len(never) == len(subs):  # no alternative can ever fit
            denials.append(f"{ref}: {'; '.join(never)}")
    if elastic_max is not None and class_map:
        limits, quota_ref = elastic_max
        for resource, amount in sorted(mapped_requests([ResourceClaim("", "", spec)], class_map).items()):
            if resource in limits and amount > limits[resource]:
                denials.append(
                    f"{ref}: {spec_field}.devices.requests: {format_units(resource, amount)} {resource} "
                    f"(deviceClassMappings) exceed the max of {quota_ref}: "
                    f"{format_units(resource, limits[resource])}"
                )
    return ClaimVerdict(tuple(denials), tuple(warnings))
