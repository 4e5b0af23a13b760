# gpuq: one image for `gpuq scheduler`, `gpuq webhook` and `gpuq certs` (the manifests pick the command).
# Slim Python base pinned by version (pin the digest in your registry mirror); non-root; nothing is
# written at run time (no .pyc, no caches), so readOnlyRootFilesystem: true works with an emptyDir /tmp.
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common ./common
COPY scheduler ./scheduler
COPY webhook ./webhook
COPY certs ./certs
COPY gpuq_k8s ./gpuq_k8s
RUN python -m venv /opt/gpuq && /opt/gpuq/bin/pip install --no-compile . \
    && /opt/gpuq/bin/python -m compileall -q /opt/gpuq

FROM python:3.11.13-slim-bookworm
LABEL org.opencontainers.image.title="gpuq" \
      org.opencontainers.image.description="GPU-aware quota management and scheduling for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/gpuq/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/gpuq /opt/gpuq
# 65532: the conventional "nonroot" uid; numeric so runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
ENTRYPOINT ["gpuq"]
CMD ["--help"]
