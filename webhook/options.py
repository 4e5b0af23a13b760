"""Which admission rules a scheduler configuration switches on (design.md, Semantics 10).

The webhook reads the scheduler's own configuration file (``gpuq webhook --config``, the same
Volcano-format file and ConfigMap as ``gpuq scheduler --config``) and applies a plugin's rules only
when that plugin is enabled, with that plugin's arguments: it admits what the scheduler could ever
place. :func:`admission_options` is the one derivation, used by ``gpuq webhook``,
``gpuq simulate --admission`` and the tests.

Per plugin, the rules it switches on:

* capacity-card: Queue ``card.quota``; PodGroup ``card.request`` and its Queue (exists, Open, whole
  quota); Pod ``card.name`` and its Queue's whole capability and card quota (honouring
  ``cardUnlimitedCpuMemory``); the mutations ``card.name`` normalised and the queue annotation defaulted;
* gpu-quota: GPUResourceQuota validation; Pod tensor-fusion annotations and per-workload (``single``)
  limits; the default-annotation mutation;
* capacity-scheduling: ElasticQuota validation; the Pod warning when ``max - used`` leaves no room;
* crossquota: Pod ``volcano.sh/crossquota-scoring-strategy``;
* resource-strategy-fit: Pod ``volcano.sh/resource-strategy-scoring-type`` and
  ``volcano.sh/resource-strategy-weight``.

The scoring annotations are checked on pods of the configured scheduler only (no other reads them).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.crossquota.pod import validate_pod_annotations
from gpuq_k8s.common.model.devices.charges import naming_from
from gpuq_k8s.common.model.devices.quota import DeviceNaming
from gpuq_k8s.common.model.elastic.args import CapacitySchedulingArgs
from gpuq_k8s.common.model.plugin_names import (
    CAPACITY_CARD,
    CAPACITY_SCHEDULING,
    CROSSQUOTA,
    GPU_QUOTA,
    PREDICATES,
    RESOURCE_STRATEGY_FIT,
)
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.common.model.strategy_fit import parse_pod_override


@dataclass(frozen=True, slots=True)
class AdmissionOptions:
    """``scheduler_name``: pods with this ``spec.schedulerName`` are subject to queue quotas.
    ``set_scheduler_name``: the mutation sets it on pods that request a card resource and name no
    other scheduler (``default-scheduler`` or unset). The other fields say which plugins' rules apply
    (see the module doc); the defaults are those of the default configuration, every plugin on.
    ``card_unlimited_cpu_memory``, ``autoscaled_card_types``: the capacity-card arguments of the same
    names."""

    scheduler_name: str = GPUQ_SCHEDULER
    set_scheduler_name: bool = False
    capacity_card: bool = True
    card_unlimited_cpu_memory: bool = False
    autoscaled_card_types: bool = True
    gpu_quota: bool = True
    capacity_scheduling: bool = True
    crossquota: bool = True
    resource_strategy_fit: bool = True
    dynamic_resources: bool = True
    # capacity-card's deviceNaming, per driver (hashable: the options key a cache)
    device_naming: tuple[tuple[str, DeviceNaming], ...] = ()
    # capacity-scheduling's deviceClassMappings: (DeviceClass, resource) pairs
    device_class_map: tuple[tuple[str, str], ...] = ()


def admission_options(
    config: SchedulerConfig, *, scheduler_name: str = GPUQ_SCHEDULER, set_scheduler_name: bool = False
) -> AdmissionOptions:
    """The admission rules ``config`` switches on (pure: the same answer for the same configuration)."""
    card = config.plugin(CAPACITY_CARD)
    card_args = card.args if card is not None else None
    unlimited = isinstance(card_args, CapacityCardArgs) and card_args.card_unlimited_cpu_memory
    autoscaled = not isinstance(card_args, CapacityCardArgs) or card_args.autoscaled_card_types
    return AdmissionOptions(
        scheduler_name=scheduler_name,
        set_scheduler_name=set_scheduler_name,
        capacity_card=card is not None,
        card_unlimited_cpu_memory=unlimited,
        autoscaled_card_types=autoscaled,
        gpu_quota=config.plugin(GPU_QUOTA) is not None,
        capacity_scheduling=config.plugin(CAPACITY_SCHEDULING) is not None,
        crossquota=config.plugin(CROSSQUOTA) is not None,
        resource_strategy_fit=config.plugin(RESOURCE_STRATEGY_FIT) is not None,
        dynamic_resources=_dynamic_resources(config),
        device_naming=_device_naming(card_args),
        device_class_map=_class_map(config),
    )


def _device_naming(card_args: object) -> tuple[tuple[str, DeviceNaming], ...]:
    """capacity-card's ``deviceNaming``: the drivers it lists only (the defaults need no entry)."""
    if not isinstance(card_args, CapacityCardArgs):
        return ()
    configured = card_args.device_naming
    return tuple(sorted((d, n) for d, n in naming_from(configured).items() if d in configured))


def _class_map(config: SchedulerConfig) -> tuple[tuple[str, str], ...]:
    entry = config.plugin(CAPACITY_SCHEDULING)
    args = entry.args if entry is not None else None
    return tuple(sorted(args.classes.items())) if isinstance(args, CapacitySchedulingArgs) else ()


def _dynamic_resources(config: SchedulerConfig) -> bool:
    """DynamicResources runs unless ``predicates`` switches it off (it runs without a ``predicates``
    entry too: scheduler/plugins/members.py ``with_safety_rules``)."""
    entry = config.plugin(PREDICATES)
    args = entry.args if entry is not None else None
    return not isinstance(args, PredicatesArgs) or bool(args.dynamic_resource_allocation)


def check_scoring_annotations(annotations: Mapping[str, str], ref: str, options: AdmissionOptions) -> None:
    """Raise :class:`~common.model.errors.InvalidAnnotation` for a malformed scoring annotation of an
    enabled plugin: crossquota's strategy, resource-strategy-fit's per-pod type and weights."""
    if options.crossquota:
        validate_pod_annotations(annotations, ref)
    if options.resource_strategy_fit:
        parse_pod_override(annotations, ref)


@functools.lru_cache(maxsize=16)
def card_args(options: AdmissionOptions) -> CapacityCardArgs:
    """The capacity-card arguments admission checks with (one object per options)."""
    return CapacityCardArgs(
        card_unlimited_cpu_memory=options.card_unlimited_cpu_memory,
        autoscaled_card_types=options.autoscaled_card_types,
    )
