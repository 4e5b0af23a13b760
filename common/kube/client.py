"""Building a kubernetes_asyncio API client from a kubeconfig file or the in-cluster service account,
and the leadership gate every write goes through (:class:`GatedClient`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import aiohttp
import orjson
import yaml
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import ConfigException
from yarl import URL

from gpuq_k8s.common.kube.errors import TRANSPORT_FAILURES, WriteRefused, transport_error
from gpuq_k8s.common.kube.http import SEND_CHECK, HttpClient, header_value
from gpuq_k8s.common.model.errors import GpuqError

DEFAULT_KUBECONFIG: Final = "~/.kube/config"


class KubeconfigError(GpuqError):
    """No usable kubeconfig: one line naming where it came from and what is wrong."""


def _kubeconfig_source(kubeconfig: str | None) -> tuple[str, list[str]]:
    """Where the kubeconfig comes from (for messages) and its files; no files: use the in-cluster
    service account. As controller-runtime: ``--kubeconfig``, ``$KUBECONFIG``, in-cluster (in a Pod),
    ``~/.kube/config``."""
    if kubeconfig:
        return "--kubeconfig", [kubeconfig]
    if os.environ.get("KUBECONFIG"):
        return "$KUBECONFIG", [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "in-cluster", []
    return DEFAULT_KUBECONFIG, [str(Path(DEFAULT_KUBECONFIG).expanduser())]


def _check_kubeconfig(where: str, paths: list[str]) -> None:
    """A missing or malformed kubeconfig is a one-line error naming it, not the client library's
    warning and traceback (it reads the file's structure without checking it)."""
    found = [path for path in paths if Path(path).expanduser().is_file()]
    if not found and where == DEFAULT_KUBECONFIG:
        raise KubeconfigError(
            f"no kubeconfig: expected --kubeconfig P, $KUBECONFIG or {DEFAULT_KUBECONFIG} "
            "(or a Pod's service account)"
        )
    if not found:
        raise KubeconfigError(
            f"{where}: invalid value {os.pathsep.join(paths)!r}: expected an existing kubeconfig file"
        )
    for path in found:
        try:
            data = yaml.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise KubeconfigError(f"{where}: {path}: expected a kubeconfig in YAML: {first}") from err
        if not isinstance(data, dict):
            raise KubeconfigError(
                f"{where}: {path}: invalid value of type {type(data).__name__}: expected a kubeconfig "
                "(a YAML mapping of clusters, contexts and users)"
            )


class ApiClient(client.ApiClient):
    """kubernetes_asyncio's ApiClient, with gpuq's own :class:`~common.kube.http.HttpClient` for the
    requests :func:`common.kube.status.call` sends (``gpuq_http``; None when a proxy is configured:
    those go through aiohttp, which speaks to proxies). ``close()`` closes both."""

    gpuq_http: HttpClient | None = None

    async def close(self) -> None:
        if self.gpuq_http is not None:
            await self.gpuq_http.close()
        await super().close()


async def new_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ``ApiClient`` from ``kubeconfig`` if given, else ``$KUBECONFIG``, else the in-cluster service
    account when running in a Pod, else ``~/.kube/config``; ``context`` picks a kubeconfig context.
    Raises :class:`KubeconfigError` when none is usable.

    The caller closes it (``await api.close()``).
    """
    where, paths = _kubeconfig_source(kubeconfig)
    if not paths and not context:
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as err:
            raise KubeconfigError(f"in-cluster configuration: {err}") from err
        return _finished(ApiClient(configuration))
    if not paths:
        where, paths = DEFAULT_KUBECONFIG, [str(Path(DEFAULT_KUBECONFIG).expanduser())]  # for --context
    _check_kubeconfig(where, paths)
    configuration = type.__call__(client.Configuration)  # as config.new_client_from_config makes it
    try:
        # The files named explicitly: the library reads $KUBECONFIG once, when it is imported.
        await config.load_kube_config(
            config_file=os.pathsep.join(paths), context=context, client_configuration=configuration
        )
    except ConfigException as err:
        raise KubeconfigError(f"{where}: {str(err).splitlines()[0]}") from err
    except (AttributeError, TypeError, KeyError) as err:
        # The library reads the file's structure without checking it (``contexts: 5``).
        raise KubeconfigError(f"{where}: malformed kubeconfig ({type(err).__name__}: {err})") from err
    return _finished(ApiClient(configuration))


def _finished(api: ApiClient) -> ApiClient:
    resolve_proxy_once(api)
    gate_aiohttp(api.rest_client.pool_manager)
    if api.rest_client.proxy is None:
        try:
            api.gpuq_http = HttpClient(api.configuration)
        except ValueError as err:
            raise KubeconfigError(str(err)) from err
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


class GatedRequest(aiohttp.ClientRequest):
    """aiohttp's request, asking :data:`~common.kube.http.SEND_CHECK` (the leadership gate of the
    :class:`GatedClient` the request is sent for) once more right before its bytes are written:
    ``send`` runs after the connect, with no await between, and writes first (aiohttp's own client
    has no hook there: its tracing signals and middlewares run before the connect)."""

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        check = SEND_CHECK.get()
        if check is not None:
            check(self.method, self.url.path)
        return await super().send(conn)


def gate_aiohttp(session: aiohttp.ClientSession) -> None:
    """Make ``session`` (kubernetes_asyncio's, made without a ``request_class``) send
    :class:`GatedRequest` s."""
    if session._request_class is aiohttp.ClientRequest:
        session._request_class = GatedRequest


class GatedClient:
    """``api_client`` for the writers: every request but a read is sent only if ``writes_allowed()``
    says so *at the moment it is sent* (a write queued before the lease was lost is not sent after).
    A refused write raises :class:`~common.kube.errors.WriteRefused`, a
    :class:`~common.kube.errors.RequestFailed` every writer handles as a request that got no answer
    (logged, never a traceback). Everything else is ``api_client``'s."""

    def __init__(self, api_client: Any, writes_allowed: Callable[[], bool]) -> None:
        self.api_client = api_client
        self.writes_allowed = writes_allowed
        self.refused = 0
        rest = getattr(api_client, "rest_client", None)
        if rest is not None:
            gate_aiohttp(rest.pool_manager)

    def check(self, method: str, path: str) -> None:
        """Raise :class:`~common.kube.errors.WriteRefused` for a write this process may not send now."""
        if method != "GET" and not self.writes_allowed():
            self.refused += 1
            raise WriteRefused(f"{method} {path} not sent: not the leader")

    async def call_api(self, path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        self.check(method, path)
        token = SEND_CHECK.set(self.check)  # asked again at the socket (GatedRequest, HttpClient)
        try:
            return await self.api_client.call_api(path, method, *args, **kwargs)
        finally:
            SEND_CHECK.reset(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api_client, name)


async def request(
    api_client: Any,
    method: str,
    path: str,
    *,
    body: Any,
    content_type: str,
    query: list[tuple[str, str]],
    timeout: float,
) -> tuple[int, bytes]:
    """One request with ``api_client``'s credentials: its HTTP status and body.

    The same request ``ApiClient.call_api`` sends (its default headers, its credentials, refreshed
    as it refreshes them), without what only generated model classes need (the recursive
    ``sanitize_for_serialization`` of every body and header, the stdlib JSON encoder, per-request
    regular expressions); the body goes out as orjson's bytes. An :class:`ApiClient` of
    :func:`new_api_client` sends it on its own :class:`~common.kube.http.HttpClient` (about half
    the CPU of aiohttp's request: ``tests/bench/bench_requests.py``); another kubernetes_asyncio
    ApiClient (or one with a proxy) on its aiohttp session. A :class:`GatedClient` refuses a write
    as its ``call_api`` does; any other client (a test's) is called through its ``call_api``.

    Whatever the path, a request that fails on the way raises gpuq's
    :class:`~common.kube.errors.TransportError` (aiohttp's, the OS's and timeout failures
    translated, the original kept as its ``__cause__``).
    """
    token = None
    if isinstance(api_client, GatedClient):
        api_client.check(method, path)
        token = SEND_CHECK.set(api_client.check)  # asked again at the socket
        api_client = api_client.api_client
    try:
        return await _request(
            api_client, method, path, body=body, content_type=content_type, query=query, timeout=timeout
        )
    except TRANSPORT_FAILURES as err:
        raise transport_error(err) from err
    finally:
        if token is not None:
            SEND_CHECK.reset(token)


async def _request(
    api_client: Any,
    method: str,
    path: str,
    *,
    body: Any,
    content_type: str,
    query: list[tuple[str, str]],
    timeout: float,
) -> tuple[int, bytes]:
    if not isinstance(api_client, client.ApiClient):
        return await through_call_api(
            api_client, method, path, body=body, content_type=content_type, query=query, timeout=timeout
        )
    headers = {**api_client.default_headers, "Accept": "application/json", "Content-Type": content_type}
    query = list(query)
    await api_client.update_params_for_auth(headers, query, ["BearerToken"])
    data = None if body is None else orjson.dumps(body, default=api_client.sanitize_for_serialization)
    http = api_client.gpuq_http if isinstance(api_client, ApiClient) else None
    if http is not None:
        answer = await http.request(method, path, query=query, headers=headers, body=data, timeout=timeout)
        return answer.status, answer.body
    url = str(api_client.configuration.host) + path
    if query:
        url += "?" + urlencode(query)
    rest = api_client.rest_client
    options: dict[str, Any] = {}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    session = rest.pool_manager
    gate_aiohttp(session)
    headers = {name: header_value(name, value) for name, value in headers.items()}
    async with session.request(
        method, url, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout), **options
    ) as response:
        return int(response.status), await response.read()


async def through_call_api(
    api_client: Any,
    method: str,
    path: str,
    *,
    body: Any,
    content_type: str,
    query: list[tuple[str, str]],
    timeout: float,
) -> tuple[int, bytes]:
    """The same request through ``api_client.call_api`` (kubernetes_asyncio's generated path): what
    :func:`request` does for a client that is not a kubernetes_asyncio ApiClient, and the benchmarks'
    reference."""
    response = await api_client.call_api(
        path,
        method,
        query_params=query,
        header_params={"Accept": "application/json", "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(total=timeout),
    )
    try:
        return int(response.status), await response.read()
    finally:
        response.release()
