"""Building a kubernetes_asyncio API client from a kubeconfig file or the in-cluster service account."""

from __future__ import annotations

import os
from typing import Any

from kubernetes_asyncio import client, config


async def new_api_client(kubeconfig: str | None = None) -> Any:
    """An ``ApiClient``: ``kubeconfig`` if given, else in-cluster when running in a Pod, else ~/.kube/config.

    The caller closes it (``await api.close()``).
    """
    if kubeconfig:
        return await config.new_client_from_config(config_file=kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return client.ApiClient(configuration)
    return await config.new_client_from_config()
