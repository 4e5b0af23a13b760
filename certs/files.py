"""Reading and writing PEM files.

Private keys are created with mode 0600 from the first byte (never written world-readable and then
chmod-ed), and every file is replaced atomically (write to a temporary file in the same directory,
then rename) so a process watching the path for a certificate rotation never reads half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpuq_k8s.certs.authority import KeyPair
from gpuq_k8s.common.model.errors import InvalidValue

PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644


def write_file_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data``; the file has ``mode`` before any byte is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file 0600; fchmod before writing widens it only for public files.
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_key_pair(pair: KeyPair, certificate_path: Path, private_key_path: Path) -> None:
    """Write the certificate (0644) and the private key (0600) as PEM."""
    write_file_atomic(private_key_path, pair.private_key_pem(), mode=PRIVATE_MODE)
    write_file_atomic(certificate_path, pair.certificate_pem(), mode=PUBLIC_MODE)


def load_key_pair(certificate_path: Path, private_key_path: Path) -> KeyPair:
    """Read a pair written by :func:`write_key_pair` (e.g. to reuse an existing CA)."""
    return key_pair_from_pem(
        certificate_path.read_bytes(),
        private_key_path.read_bytes(),
        str(certificate_path),
        str(private_key_path),
    )


def key_pair_from_pem(
    certificate_pem: bytes, private_key_pem: bytes, certificate: str, private_key: str
) -> KeyPair:
    """A certificate and its EC private key from PEM; ``certificate``/``private_key`` name where they
    came from in errors (a bad PEM, another key type, a key that is not the certificate's)."""
    try:
        cert = x509.load_pem_x509_certificate(certificate_pem)
    except ValueError:
        raise InvalidValue(certificate, "(not shown)", "a PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(private_key_pem, password=None)
    except (ValueError, TypeError):
        raise InvalidValue(private_key, "(not shown)", "an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InvalidValue(private_key, type(key).__name__, "an EC private key")
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise InvalidValue(private_key, "(key)", f"the private key of {certificate}")
    return KeyPair(cert, key)
