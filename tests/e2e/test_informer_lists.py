"""The informer's paginated list on a real kube-apiserver: every object once, pages pipelined.

The next page is requested as soon as a page has arrived, before it is decoded (its ``continue``
token is read from the head of its bytes). A built-in kind's list shows the token in its head; a
custom resource's list puts ``metadata`` after ``items`` and is read one page at a time. Both must
give exactly what one unpaginated list gives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.diff import object_key
from gpuq_k8s.common.kube.informer import Informer, continue_in_head
from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model import kinds

pytestmark = pytest.mark.e2e


class CountingInformer(Informer):
    """Records, at each page decoded, how many page requests had been sent by then."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requested = 0
        self.requested_at_decode: list[int] = []
        self.heads: list[str] = []

    async def _get_body(self, params: Any, timeout: Any) -> bytes:
        self.requested += 1
        return await super()._get_body(params, timeout)

    def _decode(self, body: bytes) -> dict[str, Any]:
        self.requested_at_decode.append(self.requested)
        self.heads.append(continue_in_head(body))
        return super()._decode(body)


async def listed(informer: Informer) -> None:
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(30):
            await informer.synced.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_paginated_pod_list_is_pipelined_and_complete(api_client: ApiClient, namespace: str) -> None:
    pods = [f"p{i:02d}" for i in range(23)]
    for name in pods:
        body = {
            "metadata": {"name": name, "namespace": namespace, "labels": {"gpuq-informer-test": namespace}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
        }
        reply = await call(api_client, "POST", f"/api/v1/namespaces/{namespace}/pods", body)
        assert reply.ok, reply.message
    # A label selector, not metadata.namespace=: kube-apiserver 1.36 pages a list narrowed by that
    # field selector wrongly (its second continue token restarts at the wrong key, sequential or not).
    informer = CountingInformer(
        api_client, kinds.POD, page_size=4, label_selector=f"gpuq-informer-test={namespace}"
    )
    await listed(informer)

    assert sorted(name for _, name in informer.items()) == pods
    pages = len(informer.requested_at_decode)
    assert pages == 6  # 23 pods, 4 a page
    # Every page but the last showed its token in its head, and the next page was asked for
    # before it was decoded.
    assert all(informer.heads[:-1]) and informer.heads[-1] == ""
    assert informer.requested_at_decode == [*range(2, pages + 1), pages]
    whole = await call(api_client, "GET", f"/api/v1/namespaces/{namespace}/pods")
    assert len(whole.body["items"]) == len(pods)
    assert informer.resource_version and int(informer.resource_version) > 0
    assert {object_key(o) for o in whole.body["items"]} == set(informer.items())


async def test_a_custom_resource_list_without_the_token_in_its_head_is_read_page_by_page(
    api_client: ApiClient, namespace: str
) -> None:
    label = f"gpuq-informer-test={namespace}"
    names = [f"{namespace}-q{i}" for i in range(7)]
    for name in names:
        body = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name, "labels": {"gpuq-informer-test": namespace}},
            "spec": {"weight": 1},
        }
        reply = await call(api_client, "POST", kinds.QUEUE.path, body)
        assert reply.ok, reply.message
    try:
        informer = CountingInformer(api_client, kinds.QUEUE, page_size=2, label_selector=label)
        await listed(informer)
        assert sorted(name for _, name in informer.items()) == names
        assert len(informer.requested_at_decode) == 4
        assert informer.heads == ["", "", "", ""]  # metadata comes after items: no token in the head
        assert informer.requested_at_decode == [1, 2, 3, 4]  # so one page at a time
    finally:
        for name in names:
            await call(api_client, "DELETE", f"{kinds.QUEUE.path}/{name}")
