"""The differential test's workload: a seeded, generated cluster and its pods, covering every kind of
placement rule of kube-scheduler 1.36's default profile, as API objects (plain JSON-like dicts).

The same seed gives the same objects, byte for byte; both runs create exactly these (only the
scheduler differs). Three zones of nodes (``nodes_per_zone`` each; in each zone one cordoned, two
tainted ``dedicated=special:NoSchedule``, one with hugepages, one holding fewer pods, one with a
single CSI volume slot), namespaces with labels (for ``namespaceSelector``), three priority classes
and a RuntimeClass with overhead. The pods, in three phases:

1. *base* (``scale`` x about 510): mid-priority pods of every rule kind (node affinity and selectors
   with tolerations, host ports, required and preferred pod affinity and anti-affinity incl.
   ``namespaceSelector``, ``matchLabelKeys`` and the self-affine first pod, topology spread
   DoNotSchedule/ScheduleAnyway with ``minDomains``, ``matchLabelKeys`` and the node inclusion
   policies, WaitForFirstConsumer claims on static PVs in zones, pre-bound Immediate claims,
   CSI volumes under CSINode limits, ReadWriteOncePod claims shared by two pods, a missing and an
   unbound claim, RuntimeClass overhead, hugepages, ephemeral storage, init containers and sidecars,
   scheduling gates, resource claims, an ElasticQuota'd namespace) and low-priority fillers that
   take the room that is left (a third covered by PodDisruptionBudgets);
2. *ungated*: half of the gated pods lose their gates;
3. *preemptors*: high-priority pods too large for the room left, so lower-priority pods are
   preempted (the budgets allowing only a few). The pods of required pod affinity and DoNotSchedule
   spread groups are as high: the checker judges those rules on the final placement, which a
   preemption must not have changed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Final

Obj = dict[str, Any]

SCHEDULER: Final = "diff-scheduler"
ZONES: Final = ("z1", "z2", "z3")
ZONE: Final = "topology.kubernetes.io/zone"
HOST: Final = "kubernetes.io/hostname"
CSI_DRIVER: Final = "csi.example.com"
GATE: Final = "example.com/wait"
NAMESPACES: Final = {
    "ns-a": {"team": "a", "env": "prod"},
    "ns-b": {"team": "b", "env": "prod"},
    "ns-c": {"team": "c", "env": "dev"},
    "ns-q": {"team": "q", "env": "dev"},  # governed by an ElasticQuota: gpuq's quota, not kube's
}
PRIORITIES: Final = {"low": 100, "mid": 1000, "high": 10000}
IMAGE: Final = "registry.k8s.io/pause:3.10"
# The pods the order-dependent rules (required pod affinity, DoNotSchedule spread) count: high
# priority, as high as the preemptors, so no preemption ever evicts one.
FINAL_PLACEMENT_KINDS: Final = ("cache", "backend", "selfaff", "spreadzone", "spreadhost", "spreadrev")


@dataclass
class Workload:
    seed: int
    cluster_objects: list[Obj] = field(default_factory=list)  # created first, in order
    nodes: list[Obj] = field(default_factory=list)
    node_status: dict[str, Obj] = field(default_factory=dict)
    namespaced_objects: list[Obj] = field(default_factory=list)  # PVCs, claims, quotas, budgets
    budget_status: Obj = field(default_factory=dict)  # what the test writes as the disruption controller
    pods: list[Obj] = field(default_factory=list)  # phase 1
    ungate: list[tuple[str, str]] = field(default_factory=list)  # phase 2: (namespace, name)
    preemptors: list[Obj] = field(default_factory=list)  # phase 3

    @property
    def pod_count(self) -> int:
        return len(self.pods) + len(self.preemptors)


def generate(seed: int, nodes_per_zone: int = 18, scale: int = 1) -> Workload:
    """The workload of ``seed``: ``3 * nodes_per_zone`` nodes and about ``scale * 530`` pods."""
    rng = random.Random(seed)
    w = Workload(seed)
    _cluster(w, nodes_per_zone)
    _volumes(w, rng, scale)
    pods = Pods(w, rng)
    for round_ in range(scale):
        pods.base(first=round_ == 0)
    pods.fillers(160 * scale)
    w.pods.sort(key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    pods.preemptors(16 * scale)
    return w


# -- the cluster ----------------------------------------------------------------------------------


def _cluster(w: Workload, per_zone: int) -> None:
    for name, ns_labels in NAMESPACES.items():
        w.cluster_objects.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": ns_labels}}
        )
    for name, value in PRIORITIES.items():
        w.cluster_objects.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    w.cluster_objects.append(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "kata"},
            "handler": "kata",
            "overhead": {"podFixed": {"cpu": "500m", "memory": "256Mi"}},
        }
    )
    for zone in ZONES:
        for i in range(per_zone):
            name = f"node-{zone}-{i:02d}"
            node_labels = {HOST: name, ZONE: zone, "disk": "ssd" if i % 2 == 0 else "hdd", "pool": "general"}
            taints: list[Obj] = []
            allocatable = {
                "cpu": "8",
                "memory": "32Gi",
                "ephemeral-storage": "100Gi",
                "hugepages-2Mi": "0",
                "pods": "40",
            }
            node_spec: Obj = {}
            if i == 0:
                node_spec["unschedulable"] = True
            if i in (1, 2):
                node_labels["pool"] = "special"
                taints.append({"key": "dedicated", "value": "special", "effect": "NoSchedule"})
            if i == 3:
                allocatable["hugepages-2Mi"] = "2Gi"
            if i == 4:
                allocatable["pods"] = "6"
            node_spec["taints"] = taints
            w.nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": node_labels},
                    "spec": node_spec,
                }
            )
            w.node_status[name] = {"capacity": dict(allocatable), "allocatable": allocatable}
            w.cluster_objects.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSINode",
                    "metadata": {"name": name},
                    "spec": {
                        "drivers": [
                            {"name": CSI_DRIVER, "nodeID": name, "allocatable": {"count": 1 if i == 5 else 2}}
                        ]
                    },
                }
            )


def _zone_affinity(zone: str) -> Obj:
    return {
        "required": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]
        }
    }


def _pv(
    name: str,
    cls: str,
    zone: str,
    *,
    csi: bool = False,
    claim: tuple[str, str] | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
) -> Obj:
    pv_spec: Obj = {
        "capacity": {"storage": "10Gi"},
        "accessModes": list(modes),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": cls,
        "nodeAffinity": _zone_affinity(zone),
    }
    if csi:
        pv_spec["csi"] = {"driver": CSI_DRIVER, "volumeHandle": f"handle-{name}"}
    else:
        pv_spec["local"] = {"path": f"/mnt/{name}"}
    if claim is not None:
        pv_spec["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": claim[0],
            "name": claim[1],
        }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {ZONE: zone}},
        "spec": pv_spec,
    }


def _pvc(
    namespace: str, name: str, cls: str, *, volume: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",)
) -> Obj:
    pvc_spec: Obj = {
        "accessModes": list(modes),
        "storageClassName": cls,
        "resources": {"requests": {"storage": "5Gi"}},
    }
    if volume:
        pvc_spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": pvc_spec,
    }


def _volumes(w: Workload, rng: random.Random, scale: int) -> None:
    no_provisioner = "kubernetes.io/no-provisioner"
    for name, mode in (
        ("local-wffc", "WaitForFirstConsumer"),
        ("csi-wffc", "WaitForFirstConsumer"),
        ("standard", "Immediate"),
    ):
        w.cluster_objects.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                # The CSI class names its driver: kube-scheduler counts an unbound claim against the
                # CSINode limit of its class's provisioner. Nobody provisions, so every zone has a
                # static PV for every CSI claim (a claim sent to dynamic provisioning would wait).
                "provisioner": CSI_DRIVER if name == "csi-wffc" else no_provisioner,
                "volumeBindingMode": mode,
            }
        )
    for zone in ZONES:
        for i in range(8 * scale):  # static PVs for WaitForFirstConsumer claims, pinned to their zone
            w.cluster_objects.append(_pv(f"local-{zone}-{i:02d}", "local-wffc", zone))
        for i in range(24 * scale):  # CSI volumes: they count against the nodes' CSINode limits
            w.cluster_objects.append(_pv(f"csi-{zone}-{i:02d}", "csi-wffc", zone, csi=True))
        for i in range(3 * scale):  # Immediate claims bound to their PV before any pod is scheduled
            namespace = rng.choice(("ns-a", "ns-b"))
            claim = f"imm-{zone}-{i:02d}"
            w.cluster_objects.append(_pv(f"pv-{claim}", "standard", zone, claim=(namespace, claim)))
            w.namespaced_objects.append(_pvc(namespace, claim, "standard", volume=f"pv-{claim}"))
        for i in range(scale):  # ReadWriteOncePod: two pods will share each claim; one must wait
            claim = f"rwop-{zone}-{i:02d}"
            modes = ("ReadWriteOncePod",)
            w.cluster_objects.append(_pv(f"pv-{claim}", "standard", zone, claim=("ns-c", claim), modes=modes))
            w.namespaced_objects.append(_pvc("ns-c", claim, "standard", volume=f"pv-{claim}", modes=modes))
    # An Immediate claim no PV can satisfy: its pod waits ("unbound immediate PersistentVolumeClaims").
    w.namespaced_objects.append(_pvc("ns-c", "unbound", "standard"))
    w.namespaced_objects.append(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "quota", "namespace": "ns-q"},
            "spec": {"min": {"cpu": "6"}, "max": {"cpu": "6"}},
        }
    )
    for namespace in ("ns-a", "ns-b", "ns-c"):
        w.namespaced_objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "protected", "namespace": namespace},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"protected": "yes"}}},
            }
        )
    w.budget_status = {
        "disruptionsAllowed": 1,
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 2,
        "observedGeneration": 1,
    }


# -- the pods -------------------------------------------------------------------------------------


class Pods:
    """Builds the pods of each kind into the workload (names unique per kind and counter)."""

    def __init__(self, w: Workload, rng: random.Random) -> None:
        self.w = w
        self.rng = rng
        self.count: dict[str, int] = {}

    def pod(
        self,
        kind: str,
        namespace: str = "",
        *,
        cpu: str = "250m",
        memory: str = "256Mi",
        priority: str = "mid",
        phase: list[Obj] | None = None,
    ) -> Obj:
        n = self.count.get(kind, 0)
        self.count[kind] = n + 1
        if kind.startswith(FINAL_PLACEMENT_KINDS):
            # Judged on the final placement (the checker's module doc): never a preemption victim.
            priority = "high"
        ns = namespace or self.rng.choice(("ns-a", "ns-b", "ns-c"))
        obj: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{kind}-{n:03d}", "namespace": ns, "labels": {"kind": kind}},
            "spec": {
                "schedulerName": SCHEDULER,
                "priorityClassName": priority,
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": "c", "image": IMAGE, "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                ],
            },
        }
        (self.w.pods if phase is None else phase).append(obj)
        return obj

    def base(self, *, first: bool) -> None:
        """One round of every rule kind (the claims made once for all, by the first round)."""
        self.node_rules()
        self.ports()
        self.pod_affinity()
        self.spread()
        self.volumes(first=first)
        self.resources()
        self.gates_claims_quota()

    # -- node affinity, selectors, taints
    def node_rules(self) -> None:
        for _ in range(10):
            p = self.pod("ssd")
            p["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
                        ]
                    }
                }
            }
        for _ in range(10):
            p = self.pod("special")
            p["spec"]["nodeSelector"] = {"pool": "special"}
            p["spec"]["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "special", "effect": "NoSchedule"}
            ]
        for _ in range(5):
            p = self.pod("notz3")
            p["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["z3"]}]}
                        ]
                    }
                }
            }
        for i in range(5):
            p = self.pod("pinned")
            target = f"node-{ZONES[i % 3]}-{5 + i:02d}"
            p["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}
                        ]
                    }
                }
            }
        for _ in range(10):  # preferred only: scored, never a rule
            p = self.pod("prefers")
            p["spec"]["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 10,
                            "preference": {
                                "matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]
                            },
                        }
                    ]
                }
            }

    # -- host ports
    def ports(self) -> None:
        for protocol, number, ip, count in (
            ("TCP", 8080, "", 20),
            ("UDP", 8080, "", 5),
            ("TCP", 9090, "127.0.0.1", 5),
        ):
            for _ in range(count):
                p = self.pod(f"port{number}{protocol.lower()}")
                port: Obj = {"containerPort": number, "hostPort": number, "protocol": protocol}
                if ip:
                    port["hostIP"] = ip
                p["spec"]["containers"][0]["ports"] = [port]

    # -- inter-pod affinity
    def pod_affinity(self) -> None:
        required = "requiredDuringSchedulingIgnoredDuringExecution"
        for g in range(3):  # one per node
            for _ in range(12):
                p = self.pod(f"anti{g}", "ns-a")
                p["metadata"]["labels"]["app"] = f"anti{g}"
                p["spec"]["affinity"] = {
                    "podAntiAffinity": {
                        required: [
                            {"labelSelector": {"matchLabels": {"app": f"anti{g}"}}, "topologyKey": HOST}
                        ]
                    }
                }
        for _ in range(4):  # one per zone: the fourth waits
            p = self.pod("zoneanti", "ns-b")
            p["metadata"]["labels"]["app"] = "zoneanti"
            p["spec"]["affinity"] = {
                "podAntiAffinity": {
                    required: [{"labelSelector": {"matchLabels": {"app": "zoneanti"}}, "topologyKey": ZONE}]
                }
            }
        for g in range(3):
            for _ in range(2):
                p = self.pod(f"cache{g}", "ns-a")
                p["metadata"]["labels"]["app"] = f"cache{g}"
            for _ in range(3):
                p = self.pod(f"backend{g}", "ns-a")
                p["spec"]["affinity"] = {
                    "podAffinity": {
                        required: [
                            {"labelSelector": {"matchLabels": {"app": f"cache{g}"}}, "topologyKey": ZONE}
                        ]
                    }
                }
        for _ in range(6):  # self-affine: the first pod may go anywhere, the rest follow it
            p = self.pod("selfaff", "ns-c")
            p["metadata"]["labels"]["app"] = "selfaff"
            p["spec"]["affinity"] = {
                "podAffinity": {
                    required: [{"labelSelector": {"matchLabels": {"app": "selfaff"}}, "topologyKey": ZONE}]
                }
            }
        for _ in range(6):
            p = self.pod("noisy", "ns-a")
            p["metadata"]["labels"]["app"] = "noisy"
        for _ in range(6):  # repelled by ns-a's noisy pods, found through the namespace's labels
            p = self.pod("quiet", "ns-b")
            p["spec"]["affinity"] = {
                "podAntiAffinity": {
                    required: [
                        {
                            "labelSelector": {"matchLabels": {"app": "noisy"}},
                            "namespaceSelector": {"matchLabels": {"team": "a"}},
                            "topologyKey": HOST,
                        }
                    ]
                }
            }
        for rollout in ("v1", "v2"):  # one per node per rollout (matchLabelKeys)
            for _ in range(8):
                p = self.pod(f"web{rollout}", "ns-c")
                p["metadata"]["labels"].update({"app": "web", "rollout": rollout})
                p["spec"]["affinity"] = {
                    "podAntiAffinity": {
                        required: [
                            {
                                "labelSelector": {"matchLabels": {"app": "web"}},
                                "matchLabelKeys": ["rollout"],
                                "topologyKey": HOST,
                            }
                        ]
                    }
                }
        for _ in range(4):  # not beside another rollout's web pods (mismatchLabelKeys)
            p = self.pod("canary", "ns-c")
            p["metadata"]["labels"].update({"app": "web", "rollout": "v3"})
            p["spec"]["affinity"] = {
                "podAntiAffinity": {
                    required: [
                        {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "mismatchLabelKeys": ["rollout"],
                            "topologyKey": HOST,
                        }
                    ]
                }
            }
        for _ in range(10):  # preferred terms: scored only
            p = self.pod("prefpod", "ns-a")
            p["spec"]["affinity"] = {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "cache0"}},
                                "topologyKey": ZONE,
                            },
                        }
                    ]
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 20,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "noisy"}},
                                "topologyKey": HOST,
                            },
                        }
                    ]
                },
            }

    # -- topology spread
    def spread(self) -> None:
        def constraint(app: str, key: str, when: str = "DoNotSchedule", **extra: Any) -> Obj:
            return {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": when,
                "labelSelector": {"matchLabels": {"app": app}},
                **extra,
            }

        for _ in range(30):
            p = self.pod("spreadzone", "ns-a")
            p["metadata"]["labels"]["app"] = "spreadzone"
            p["spec"]["topologySpreadConstraints"] = [constraint("spreadzone", ZONE)]
        for _ in range(20):  # minDomains beyond the nodes there are: the minimum counts as 0
            p = self.pod("spreadhost", "ns-b")
            p["metadata"]["labels"]["app"] = "spreadhost"
            p["spec"]["topologySpreadConstraints"] = [constraint("spreadhost", HOST, minDomains=100)]
        for _ in range(15):
            p = self.pod("spreadsoft", "ns-c")
            p["metadata"]["labels"]["app"] = "spreadsoft"
            p["spec"]["topologySpreadConstraints"] = [constraint("spreadsoft", ZONE, "ScheduleAnyway")]
        for rev in ("a", "b"):
            for _ in range(6):  # each revision spread on its own; tainted nodes counted out, affinity ignored
                p = self.pod(f"spreadrev{rev}", "ns-a")
                p["metadata"]["labels"].update({"app": "spreadrev", "rev": rev})
                p["spec"]["nodeSelector"] = {"disk": "hdd"}
                p["spec"]["topologySpreadConstraints"] = [
                    constraint(
                        "spreadrev",
                        ZONE,
                        matchLabelKeys=["rev"],
                        nodeAffinityPolicy="Ignore",
                        nodeTaintsPolicy="Honor",
                    )
                ]

    # -- volumes
    def volumes(self, *, first: bool) -> None:
        def claim_pod(kind: str, namespace: str, claim: str) -> Obj:
            p = self.pod(kind, namespace)
            p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
            return p

        for i in range(18):  # WaitForFirstConsumer on static PVs in zones (the scheduler binds them)
            namespace = ("ns-a", "ns-b", "ns-c")[i % 3]
            claim = f"local-{self.count.get('wffc', 0):03d}"
            self.w.namespaced_objects.append(_pvc(namespace, claim, "local-wffc"))
            claim_pod("wffc", namespace, claim)
        for i in range(24):  # CSI volumes: at most 2 per node (1 on some), per CSINode
            namespace = ("ns-a", "ns-b", "ns-c")[i % 3]
            claim = f"csi-{self.count.get('csi', 0):03d}"
            self.w.namespaced_objects.append(_pvc(namespace, claim, "csi-wffc"))
            claim_pod("csi", namespace, claim)
        if not first:
            return
        for pvc in [o for o in self.w.namespaced_objects if o["metadata"]["name"].startswith("imm-")]:
            claim_pod("immediate", pvc["metadata"]["namespace"], pvc["metadata"]["name"])
        for pvc in [o for o in self.w.namespaced_objects if o["metadata"]["name"].startswith("rwop-")]:
            for _ in range(2):
                claim_pod("rwop", "ns-c", pvc["metadata"]["name"])
        claim_pod("noclaim", "ns-b", "does-not-exist")
        claim_pod("noclaim", "ns-c", "does-not-exist")
        claim_pod("unbound", "ns-c", "unbound")

    # -- resource fit: overhead, hugepages, ephemeral storage, init containers and sidecars
    def resources(self) -> None:
        for _ in range(10):
            p = self.pod("kata", cpu="500m")
            p["spec"]["runtimeClassName"] = "kata"
        for _ in range(6):
            p = self.pod("huge", memory="128Mi")
            resources = p["spec"]["containers"][0]["resources"]
            resources["requests"]["hugepages-2Mi"] = "512Mi"
            resources["limits"] = {"hugepages-2Mi": "512Mi", "memory": "128Mi"}
        for _ in range(8):
            p = self.pod("disk", cpu="100m")
            p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = (
                f"{self.rng.choice((20, 40, 60))}Gi"
            )
        for _ in range(6):
            p = self.pod("init", cpu="250m")
            p["spec"]["initContainers"] = [
                {"name": "setup", "image": IMAGE, "resources": {"requests": {"cpu": "3"}}}
            ]
        for _ in range(6):
            p = self.pod("sidecar", cpu="250m")
            p["spec"]["initContainers"] = [
                {
                    "name": "proxy",
                    "image": IMAGE,
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1"}},
                }
            ]

    # -- scheduling gates, resource claims, the ElasticQuota'd namespace
    def gates_claims_quota(self) -> None:
        for i in range(20):
            p = self.pod("gated")
            p["spec"]["schedulingGates"] = [{"name": GATE}]
            if i % 2 == 0:
                self.w.ungate.append((p["metadata"]["namespace"], p["metadata"]["name"]))
        for i in range(3):
            name = f"gpu-{len(self.w.namespaced_objects)}-{i}"
            self.w.namespaced_objects.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": "ns-b"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
                        }
                    },
                }
            )
            p = self.pod("dra", "ns-b")
            p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
        for _ in range(12):
            self.pod("quota", "ns-q", cpu="1")

    # -- the rest of the room, and the pods that will want it back
    def fillers(self, count: int) -> None:
        for i in range(count):
            cpu = self.rng.choice(("1", "1500m", "2"))
            p = self.pod("filler", cpu=cpu, memory=self.rng.choice(("512Mi", "1Gi", "2Gi")), priority="low")
            if i % 3 == 0:
                p["metadata"]["labels"]["protected"] = "yes"
            if i % 5 == 0:
                p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = (
                    f"{self.rng.randint(1, 10)}Gi"
                )

    def preemptors(self, count: int) -> None:
        for _ in range(count):
            self.pod("urgent", cpu="4", memory="2Gi", priority="high", phase=self.w.preemptors)
