"""The ``capacity-scheduling`` plugin arguments: ``deviceClassMappings``, how ElasticQuota counts DRA
devices (:mod:`common.model.devices.class_mapping`)."""

from __future__ import annotations

from typing import ClassVar

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.devices.class_mapping import DeviceClassArgs


class CapacitySchedulingArgs(DeviceClassArgs):
    """``deviceClassMappings``: the resource each DeviceClass's devices count as in ElasticQuota
    ``min``/``max`` (Kueue's ``deviceClassMappings``)."""

    PLUGIN: ClassVar[str] = plugin_names.CAPACITY_SCHEDULING


class ProportionArgs(DeviceClassArgs):
    """``deviceClassMappings``: the resource each DeviceClass's devices count as in a Queue's
    ``capability``/``deserved`` (Kueue's ``deviceClassMappings``)."""

    PLUGIN: ClassVar[str] = plugin_names.PROPORTION
