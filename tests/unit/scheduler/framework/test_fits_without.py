"""``Framework.fits_without`` (scheduler/framework/runtime.py): the real queue check, PreFilter and
Filter with some pods taken off the cluster, which preemption asks (design.md "Preemption"); the
cluster and every ledger are as they were afterwards."""

from __future__ import annotations

import numpy as np

from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod
from tests.testing.scheduler import make_scheduler, plugin_of


def test_fits_without_asks_the_filters_with_the_pods_gone_and_restores_everything() -> None:
    sched, _ = make_scheduler("capacity-scheduling")
    sched.put_object(MakeElasticQuota("eq", "team").min(cpu="4").max(cpu="4").obj())
    sched.set_node(MakeNode("n1").alloc(cpu="4", memory="8Gi", pods="10").info())
    sched.set_node(MakeNode("n2").alloc(cpu="4", memory="8Gi", pods="10").info())
    a = MakePod("a", "team").req(cpu="2").node("n1").info()
    b = MakePod("b", "team").req(cpu="2").node("n2").info()
    for pod in (a, b):
        sched.add_pod(pod)
    quota = plugin_of(sched, CapacityScheduling)
    cluster = sched.cluster
    requested = cluster.requested.copy()
    used = quota.infos.used_numbers("team")
    framework = sched.framework
    row1, row2 = cluster.row_of["n1"], cluster.row_of["n2"]
    # 4 cpu on n1: the node's room and the namespace's max (4, all used) both need a gone.
    big = MakePod("big", "team").req(cpu="4").info()
    assert not framework.fits_without(big, row1, [])
    assert not framework.fits_without(big, row1, [b])  # quota freed, n1 still holds a
    assert not framework.fits_without(big, row2, [a])  # n2 still holds b
    assert framework.fits_without(big, row1, [a, b])
    small = MakePod("small", "team").req(cpu="2").info()
    assert framework.fits_without(small, row1, [a])
    # Nothing changed: pods, arrays, the ElasticQuota ledger.
    assert set(cluster.pods) == {"team/a", "team/b"}
    assert np.array_equal(cluster.requested, requested)
    assert quota.infos.used_numbers("team") == used
