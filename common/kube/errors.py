"""The Kubernetes API's errors: one hierarchy for every request gpuq sends (after kopf's
``clients/errors.py``).

Callers catch these types; none compares an HTTP status with a number or catches a client library's
exceptions. Two families, both :class:`~common.model.errors.GpuqError` (gpuq's one error hierarchy):

- :class:`ApiError`: the apiserver answered, with an error status. ``status`` is the HTTP status;
  ``reason``, ``message`` and ``details`` are those of the Kubernetes ``Status`` object it sent
  (``reason`` and ``details`` empty when the body is not one). :func:`api_error` picks the class from
  the status: :class:`BadRequest` (400), :class:`Unauthorized` (401), :class:`Forbidden` (403),
  :class:`NotFound` (404), :class:`Conflict` (409: a write over a stale resourceVersion, or
  AlreadyExists), :class:`Gone` (410: a resourceVersion too old to watch from), :class:`Invalid`
  (422), :class:`TooManyRequests` (429), :class:`ServerError` (5xx); any other error status is the
  base class. :meth:`common.kube.status.Reply.raise_for_status` raises it, ``Reply.error`` gives it.
- :class:`RequestFailed`: no answer. :class:`TransportError` when the request failed on the way
  (the apiserver may or may not have acted on it: a write's outcome is the caller's question),
  :class:`WriteRefused` when it was never sent (this process is not, or no longer, the leader),
  :class:`InvalidHeader` when it was never sent because a header would have split it.
  A TransportError is one of :class:`ConnectFailed` (no connection), :class:`Disconnected` (the
  connection was lost before the answer), :class:`RequestTimeout` (no answer in time) or
  :class:`ProtocolError` (the answer is not HTTP, or not the API's); :func:`transport_error` makes
  it from what gpuq's own client, aiohttp, the OS or a timeout raised, which stays its ``__cause__``.
  Its message is the original's (or, when that has none, the original's type: ``TimeoutError``), so
  what users read (a bind's condition message) does not depend on which client sent the request.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from gpuq_k8s.common.model.errors import GpuqError


class KubeError(GpuqError):
    """Base of every error a request to the Kubernetes API raises."""


# --- answered with an error status ---------------------------------------------------------------


class ApiError(KubeError):
    """The apiserver answered with an error status (see the module docstring); renders as the
    apiserver's own message, else ``HTTP <status>``."""

    def __init__(
        self, status: int, reason: str = "", message: str = "", details: Mapping[str, Any] | None = None
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message or f"HTTP {status}"
        self.details: Mapping[str, Any] = dict(details or {})
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.reason!r}, {self.message!r})"


class BadRequest(ApiError):
    """400: the request is malformed (a patch the apiserver cannot apply)."""


class Unauthorized(ApiError):
    """401: the credentials were refused."""


class Forbidden(ApiError):
    """403: RBAC (or an admission webhook) refused the request."""


class NotFound(ApiError):
    """404: the object (or the kind: a CRD not installed) does not exist."""


class Conflict(ApiError):
    """409: the write carried a stale resourceVersion, a UID precondition failed, a bind found the pod
    bound, or the object already exists (``reason`` AlreadyExists)."""


class Gone(ApiError):
    """410: the resourceVersion asked for was compacted: list again."""


class Invalid(ApiError):
    """422: the object failed validation; ``details["causes"]`` names the fields."""


class TooManyRequests(ApiError):
    """429: the apiserver's priority and fairness turned the request away; ``details`` may say when
    to retry (``retryAfterSeconds``)."""


class ServerError(ApiError):
    """5xx: the apiserver (or etcd behind it) failed; a write's outcome is unknown."""


_BY_STATUS: Final[Mapping[int, type[ApiError]]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def succeeded(status: int) -> bool:
    """A 2xx status: the request did what it asked."""
    return 200 <= status < 300


def api_error(status: int, body: Mapping[str, Any] | None = None) -> ApiError:
    """The error for an answer of HTTP ``status`` with ``body`` (a Kubernetes ``Status`` object, or
    whatever the answer held: only its ``message`` is then used)."""
    body = body or {}
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    details = body.get("details")
    return cls(
        status,
        str(body.get("reason") or ""),
        str(body.get("message") or ""),
        details if isinstance(details, Mapping) else None,
    )


def status_error(status: Mapping[str, Any]) -> ApiError:
    """The error a ``Status`` object carries on its own (a watch's ERROR event): its ``code`` is the
    HTTP status."""
    code = status.get("code")
    return api_error(code if isinstance(code, int) else 0, status)


# --- no answer -----------------------------------------------------------------------------------


class RequestFailed(KubeError):
    """The request got no answer: it failed on the way, or was never sent."""


class WriteRefused(RequestFailed):
    """A write that was not sent: this process may not write (it is not, or no longer, the leader)."""


class InvalidHeader(RequestFailed):
    """A request that was not sent: a header name or value it would carry is not valid HTTP (a line
    break in a token would split the request in two)."""


class TransportError(RequestFailed):
    """The request failed on the way: the apiserver may or may not have acted on it."""


class ConnectFailed(TransportError):
    """No connection to the apiserver could be made (refused, unresolvable, TLS handshake failed)."""


class Disconnected(TransportError):
    """The connection was lost (closed or reset) before the answer was read."""


class RequestTimeout(TransportError):
    """No (whole) answer within the request's timeout."""


class ProtocolError(TransportError):
    """The answer is not HTTP/1.1 as gpuq's client reads it, or not what the API sends."""


# What the clients under gpuq raise for a request that failed on the way (aiohttp, the OS, timeouts):
# the one place that names them; :func:`transport_error` turns each into gpuq's type.
TRANSPORT_FAILURES: Final = (aiohttp.ClientError, OSError, TimeoutError)


def transport_error(err: BaseException) -> TransportError:
    """gpuq's :class:`TransportError` for ``err`` (one of :data:`TRANSPORT_FAILURES`, or already
    gpuq's: returned as is), with ``err`` as its ``__cause__``."""
    if isinstance(err, TransportError):
        return err
    cls: type[TransportError]
    if isinstance(err, TimeoutError):  # before OSError: TimeoutError is one (aiohttp's timeouts too)
        cls = RequestTimeout
    elif isinstance(
        err, (aiohttp.ClientConnectorError, ConnectionRefusedError, ssl.SSLError, socket.gaierror)
    ):
        cls = ConnectFailed
    elif isinstance(err, (aiohttp.ClientResponseError, aiohttp.ClientPayloadError)):
        cls = ProtocolError  # an answer aiohttp could not read as HTTP, or a body cut short
    elif isinstance(err, (aiohttp.ClientConnectionError, OSError)):
        cls = Disconnected  # aiohttp's ServerDisconnectedError, a reset, a broken pipe
    else:
        cls = TransportError
    wrapped = cls(str(err) or type(err).__name__)
    wrapped.__cause__ = err
    return wrapped
