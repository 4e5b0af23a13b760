"""Building a kubernetes_asyncio API client from a kubeconfig file or the in-cluster service account,
and the leadership gate every write goes through (:class:`GatedClient`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client, config
from yarl import URL


async def new_api_client(kubeconfig: str | None = None) -> Any:
    """An ``ApiClient``: ``kubeconfig`` if given, else in-cluster when running in a Pod, else ~/.kube/config.

    The caller closes it (``await api.close()``).
    """
    if kubeconfig:
        api = await config.new_client_from_config(config_file=kubeconfig)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        api = client.ApiClient(configuration)
    else:
        api = await config.new_client_from_config()
    resolve_proxy_once(api)
    return api


def resolve_proxy_once(api: Any) -> None:
    """Look the environment's proxy for the apiserver up now, once, instead of on every request.

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True``: every request then reads
    the proxy variables and ~/.netrc in a worker thread, two thread hand-offs per request (a tenth
    of the scheduler's CPU per bind in the profile). The environment does not change under a
    running process, so the answer is taken once: an ``HTTPS_PROXY`` (minus ``NO_PROXY``) that
    applies to the apiserver becomes the client's explicit proxy, as client-go honours it; netrc
    credentials are not used for the apiserver (client-go ignores them too).
    """
    rest = api.rest_client
    if rest.proxy is None:
        try:
            proxy, auth = get_env_proxy_for_url(URL(api.configuration.host))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": auth.encode()}
    rest.pool_manager._trust_env = False


class WriteRefused(aiohttp.ClientError):
    """A write that was not sent: this process may not write (it is not, or no longer, the leader)."""


class GatedClient:
    """``api_client`` for the writers: every request but a read is sent only if ``writes_allowed()``
    says so *at the moment it is sent* (a write queued before the lease was lost is not sent after).
    A refused write raises :class:`WriteRefused`, which every writer already handles as a request
    that failed on the way (logged, never a traceback). Everything else is ``api_client``'s."""

    def __init__(self, api_client: Any, writes_allowed: Callable[[], bool]) -> None:
        self.api_client = api_client
        self.writes_allowed = writes_allowed
        self.refused = 0

    async def call_api(self, path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        if method != "GET" and not self.writes_allowed():
            self.refused += 1
            raise WriteRefused(f"{method} {path} not sent: not the leader")
        return await self.api_client.call_api(path, method, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api_client, name)
