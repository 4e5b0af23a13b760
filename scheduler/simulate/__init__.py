"""``gpuq simulate``: the real scheduler against an in-memory cluster read from manifests."""
