"""A GET of a collection's path through the API client, answered with gpuq's API errors
(:mod:`common.kube.errors`): an error status raises the :class:`~common.kube.errors.ApiError` of that
status (its Status object, or the body's first bytes as the message), a failure on the way (aiohttp's,
translated) a :class:`~common.kube.errors.TransportError`. common/kube/informer.py lists and watches by
it; scheduler/simulate/live.py reads the cluster by :func:`get_whole` (its own errors, for a user).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from gpuq_k8s.common.kube.errors import TRANSPORT_FAILURES, api_error, succeeded, transport_error


async def get(
    api_client: Any, path: str, params: list[tuple[str, str]], timeout: aiohttp.ClientTimeout
) -> Any:
    """GET ``path`` with the query ``params`` (JSON, the bearer token, the body not read): the response
    when its status is a success (the caller reads and releases it), else its error raised."""
    response = await _send(api_client, path, params, timeout)
    if succeeded(response.status):
        return response
    raise api_error(response.status, status_of(await read_body(response)))


async def get_whole(
    api_client: Any, path: str, params: list[tuple[str, str]], timeout: aiohttp.ClientTimeout
) -> tuple[int, bytes]:
    """GET ``path`` as :func:`get` does, the answer read whole whatever its status: (its status, its
    body), for a caller that words its own errors (scheduler/simulate/live.py, a user's kubeconfig)."""
    response = await _send(api_client, path, params, timeout)
    return response.status, await read_body(response)


async def _send(
    api_client: Any, path: str, params: list[tuple[str, str]], timeout: aiohttp.ClientTimeout
) -> Any:
    """The GET sent, its response (status not looked at, body not read)."""
    try:
        return await api_client.call_api(
            path,
            "GET",
            query_params=params,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
    except TRANSPORT_FAILURES as err:
        raise transport_error(err) from err


async def read_body(response: Any) -> bytes:
    """A successful ``response``'s whole body (the response released)."""
    try:
        body: bytes = await response.read()
    except TRANSPORT_FAILURES as err:
        raise transport_error(err) from err
    finally:
        response.release()
    return body


def status_of(raw: bytes) -> dict[str, Any]:
    """The Status object of an error answer; a body that is not one gives its first bytes as the
    message."""
    try:
        decoded = orjson.loads(raw)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        return decoded
    return {"message": raw[:300].decode("utf-8", "replace")}
