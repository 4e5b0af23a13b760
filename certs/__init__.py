"""Certificate issuance for gpuq: a small CA, serving and client certificates, PEM files."""

from gpuq_k8s.certs.authority import (
    KeyPair,
    create_ca,
    generate_private_key,
    issue_client_certificate,
    issue_serving_certificate,
    private_key_pem,
    public_key_pem,
)
from gpuq_k8s.certs.files import load_key_pair, write_file_atomic, write_key_pair

__all__ = [
    "KeyPair",
    "create_ca",
    "generate_private_key",
    "issue_client_certificate",
    "issue_serving_certificate",
    "load_key_pair",
    "private_key_pem",
    "public_key_pem",
    "write_file_atomic",
    "write_key_pair",
]
