"""TLS for the webhook: TLS 1.2 or newer, certificate files re-read when they change.

Rotation without a restart and without a failed request: the listening socket keeps one *front*
context whose SNI callback hands every new handshake the most recently loaded context
(``SSLObject.context = ...``, OpenSSL's ``SSL_set_SSL_CTX``). OpenSSL calls the callback whether or not
the client sends SNI (the apiserver sends none when it dials an IP address). A new pair is loaded into
a fresh context first and only swapped in once it loads completely, so a half-rotated pair (new
certificate, old key, as a non-atomic copy leaves it for a moment) is never served: the old pair
stays in use and the next poll tries again. Connections already open keep their session.

Changes are found by polling ``stat`` (mtime, inode, size; following symlinks, so the ``..data``
swap of a mounted Secret counts) and confirmed by a hash of the bytes, so touching a file reloads
nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import ssl
from pathlib import Path
from typing import NamedTuple

from cryptography import x509

log = logging.getLogger(__name__)


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context for the pair: TLS 1.2+, HTTP/1.1 only (aiohttp speaks no HTTP/2)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    # load_cert_chain also checks that the key belongs to the certificate.
    context.load_cert_chain(cert_file, key_file)
    context.set_alpn_protocols(["http/1.1"])
    return context


class _Stamp(NamedTuple):
    """What identifies a version of a file without reading it: a rewrite or an atomic rename changes it."""

    mtime_ns: int
    inode: int
    size: int


def _stamp(path: Path) -> _Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Stamp(st.st_mtime_ns, st.st_ino, st.st_size)


class CertificateReloader:
    """Owns the server's SSL context and swaps in new certificate files when they change."""

    def __init__(self, cert_file: Path, key_file: Path, *, interval: float = 1.0) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.interval = interval
        self.reloads = 0
        self.failures = 0
        self._stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        cert_bytes, key_bytes = self.cert_file.read_bytes(), self.key_file.read_bytes()
        self._digest = _digest(cert_bytes, key_bytes)
        # The front context is what the listening socket holds; it is also the first current one.
        self.context = server_context(self.cert_file, self.key_file)
        self.context.sni_callback = self._select
        self._current = self.context
        self.not_after = _not_after(cert_bytes)

    def _select(self, ssl_object: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        current = self._current
        if current is not ssl_object.context:
            ssl_object.context = current

    def check(self) -> bool:
        """Reload if the files changed and the new pair loads; True when a new pair is in use."""
        stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        if stamps == self._stamps:
            return False
        try:
            cert_bytes, key_bytes = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as err:
            # A file briefly missing mid-rotation: keep serving the old pair, look again next poll.
            log.warning("certificate files unreadable, keeping the current pair: %s", err)
            self.failures += 1
            return False
        digest = _digest(cert_bytes, key_bytes)
        if digest == self._digest:
            self._stamps = stamps
            return False
        try:
            fresh = server_context(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as err:
            log.warning("new certificate pair does not load yet, keeping the current one: %s", err)
            self.failures += 1
            return False
        self._current = fresh
        self._stamps = stamps
        self._digest = digest
        self.not_after = _not_after(cert_bytes)
        self.reloads += 1
        log.info("serving certificate reloaded from %s", self.cert_file)
        return True

    async def run(self) -> None:
        """Poll for changes until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check()


def _digest(cert: bytes, key: bytes) -> bytes:
    return hashlib.sha256(cert + b"\0" + key).digest()


def _not_after(cert_pem: bytes) -> float:
    try:
        return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.timestamp()
    except ValueError:
        return 0.0
