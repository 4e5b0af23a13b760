"""Tensor-fusion's per-GPU allocation, pure (design.md Semantics 19, "GPU shares"): a node's shareable
GPUs (devices), what a pod asks of one (request), the shares in use (ledger), the choice of devices by
tensor-fusion's placement strategy (choice, args), and the ``tensor-fusion.ai/gpu-ids`` annotation
that carries the choice (gpu_ids)."""
