"""The fields of a pod spec the placement rules read, parsed with the pod (``PodInfo``,
:mod:`common.model.pods`): its host ports, its scheduling gates and the images it runs. The rules over
them live in :mod:`common.model.placement` (NodePorts, SchedulingGates, ImageLocality); the parsing sits
here, beside ``pods.py``, because the placement rules read pods (``PodInfo``) and ``pods.py`` must not
import them back (the model's packages form no import cycle). A pod's volumes: :mod:`.pod_volumes`.

Host ports: the ``ports`` with a ``hostPort`` of the containers and of the sidecars (an empty ``hostIP``
is ``0.0.0.0``, an empty protocol TCP; ``schedutil.GetHostPorts``). Gates: ``spec.schedulingGates``
names. Images: those of the init containers, the containers and the image volumes, normalised with
``:latest`` when they name no tag (``normalizedImageName``).
"""

from __future__ import annotations

import functools
import ipaddress
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import InvalidValue

# kube's DefaultBindAllHostIP and the protocol an empty one means.
WILDCARD_IP: Final = "0.0.0.0"
TCP: Final = "TCP"
PROTOCOLS: Final = frozenset({"TCP", "UDP", "SCTP"})
MAX_PORT: Final = 65535


@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    """One host port: ``protocol`` (TCP, UDP or SCTP), ``port`` (1-65535) and ``ip`` (``0.0.0.0``: all)."""

    protocol: str
    port: int
    ip: str = WILDCARD_IP


def host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """The host ports of a pod spec: its sidecars' first, then its containers' (``GetHostPorts``'s
    order); raises :class:`InvalidValue` naming the field for what the apiserver would refuse."""
    containers = spec.get("containers")
    if not spec.get("initContainers") and type(containers) is list:
        # Most pods: containers only, none with ports (checked without the general path's reads).
        for container in containers:
            if type(container) is not dict or container.get("ports"):
                break
        else:
            return ()
    out: list[HostPort] = []
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        if not containers:
            continue
        for i, container in enumerate(wire.items(containers, f"spec.{field}")):
            ports = container.get("ports")
            if not ports or (field == "initContainers" and container.get("restartPolicy") != "Always"):
                continue
            where = f"spec.{field}[{i}].ports"
            for j, port in enumerate(wire.items(ports, where)):
                host_port = port.get("hostPort")
                if host_port is None or host_port == 0:
                    continue
                out.append(_host_port(port, host_port, f"{where}[{j}]"))
    return tuple(out)


def _host_port(port: Mapping[str, Any], number: Any, where: str) -> HostPort:
    if isinstance(number, bool) or not isinstance(number, int) or not 0 < number <= MAX_PORT:
        raise InvalidValue(f"{where}.hostPort", number, f"a port number from 1 to {MAX_PORT}")
    protocol = port.get("protocol") or TCP
    if protocol not in PROTOCOLS:
        raise InvalidValue(f"{where}.protocol", protocol, "TCP, UDP or SCTP")
    ip = port.get("hostIP") or WILDCARD_IP
    try:
        ipaddress.ip_address(ip)
    except (TypeError, ValueError):
        raise InvalidValue(f"{where}.hostIP", ip, "an IP address") from None
    return HostPort(str(protocol), number, str(ip))


def scheduling_gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of a pod spec's ``schedulingGates``, in order; raises :class:`InvalidValue` naming the
    field for a malformed entry (a gate without a name, a name that is no string)."""
    gates = spec.get("schedulingGates")
    if not gates:
        return ()
    names: list[str] = []
    for i, gate in enumerate(wire.items(gates, "spec.schedulingGates")):
        name = gate.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidValue(f"spec.schedulingGates[{i}].name", name, "a non-empty gate name")
        names.append(name)
    return tuple(names)


def normalized_image_name(name: str) -> str:
    """``name`` with ``:latest`` when it names no tag (a ``:`` after the last ``/``) nor a digest."""
    return name + ":latest" if name.rfind(":") <= name.rfind("/") else name


@functools.lru_cache(maxsize=4096)
def _normalized(name: str) -> str:
    # A cluster's pods run a few images: each is normalised (and its string shared) once.
    return sys.intern(normalized_image_name(name))


def pod_images(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], int]:
    """The normalised images a pod runs (init containers, containers, image volumes; once per
    container, in that order) and its number of containers (init and regular)."""
    plain = spec.get("containers")
    if type(plain) is list and not spec.get("initContainers") and _no_image_volume(spec.get("volumes")):
        # Most pods: containers, no image volume (the general path below reads the rest).
        fast: list[str] = []
        for container in plain:
            if type(container) is not dict:
                break
            image = container.get("image")
            if image and type(image) is str:
                fast.append(_normalized(image))
        else:
            return tuple(fast), len(plain)
    images: list[str] = []
    containers = 0
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not items:
            continue
        for container in wire.items(items, f"spec.{field}"):
            containers += 1
            image = container.get("image")
            if image and type(image) is str:
                images.append(_normalized(image))
    volumes = spec.get("volumes")
    if volumes:
        for i, volume in enumerate(wire.items(volumes, "spec.volumes")):
            source = volume.get("image")
            if source is None:
                continue
            reference = wire.mapping(source, f"spec.volumes[{i}].image").get("reference")
            if reference and type(reference) is str:
                images.append(_normalized(reference))
    return tuple(images), containers


def _no_image_volume(volumes: Any) -> bool:
    """Whether ``volumes`` (a pod's) is absent or a plain list of volumes none of which is an image."""
    if not volumes:
        return True
    if type(volumes) is not list:
        return False
    return all(type(volume) is dict and "image" not in volume for volume in volumes)
