"""The serving certificate read from its Secret through the API (``gpuq webhook --tls-secret``).

A mounted Secret reaches the pod's files only after the kubelet's sync period (a minute or more), which
would force every rotation to wait that long; reading the Secret directly, every replica serves a
renewed certificate within ``--cert-reload-interval``. The pair is written to two private files
(0600, atomically, key first) that :class:`~webhook.tls.CertificateReloader` watches as it watches a
mounted Secret, so the swap of the serving context is the one already proven not to drop a request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from pathlib import Path
from typing import Any

from gpuq_k8s.certs.files import PRIVATE_MODE, write_file_atomic
from gpuq_k8s.common.kube.errors import NotFound, RequestFailed
from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model import kinds

log = logging.getLogger(__name__)


class SecretFiles:
    """Copies ``tls.crt``/``tls.key`` of Secret ``namespace/name`` into ``directory`` when they change."""

    def __init__(self, api_client: Any, namespace: str, name: str, directory: Path) -> None:
        self.api_client = api_client
        self.path = kinds.SECRET.object_path(namespace, name)
        self.where = kinds.SECRET.ref(namespace, name)
        self.cert_file = directory / "tls.crt"
        self.key_file = directory / "tls.key"
        self._written: tuple[str, str] | None = None

    async def sync(self) -> bool:
        """Read the Secret once; True when it holds a pair (written now or before)."""
        reply = await call(self.api_client, "GET", self.path)
        if not reply.ok:
            if not isinstance(reply.error, NotFound):
                log.warning("%s: %s", self.where, reply.message)
            return self._written is not None
        data = reply.body.get("data") or {}
        pair = (str(data.get("tls.crt") or ""), str(data.get("tls.key") or ""))
        if not all(pair):
            log.warning("%s has no tls.crt and tls.key", self.where)
            return self._written is not None
        if pair != self._written:
            write_file_atomic(self.key_file, base64.b64decode(pair[1]), mode=PRIVATE_MODE)
            write_file_atomic(self.cert_file, base64.b64decode(pair[0]), mode=PRIVATE_MODE)
            self._written = pair
        return True

    async def wait_first(self, interval: float, stop: asyncio.Event) -> bool:
        """Until the Secret holds a pair (the renewer's leader may be writing the first one); False
        if ``stop`` is set first."""
        logged = False
        while not stop.is_set():
            if await self._sync_logged():
                return True
            if not logged:
                log.info(
                    "waiting for %s (issued by the certificate renewer or `gpuq certs issue`)", self.where
                )
                logged = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
        return False

    async def run(self, interval: float) -> None:
        """Keep the files in step with the Secret until cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self._sync_logged()

    async def _sync_logged(self) -> bool:
        try:
            return await self.sync()
        except (RequestFailed, OSError, ValueError) as err:  # OSError, ValueError: the files, base64
            log.warning("%s not read: %s", self.where, err or type(err).__name__)
            return self._written is not None
