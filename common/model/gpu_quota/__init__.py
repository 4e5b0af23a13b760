"""GPUResourceQuota: namespace quotas in TFLOPS, VRAM and workers (gpu-resource-quota.md; design.md
Semantics 5), one concept per module:

* :mod:`.quota`: the object, parsed from the wire model, its admission validation and the
  annotations the mutating webhook defaults from it;
* :mod:`.card_share`: what one unit of a card type is worth, and the nameless card types of GPU
  resources card discovery could not name;
* :mod:`.request`: a pod's GPU request, from its tensor-fusion annotations else from its card;
* :mod:`.store`: the ledger (:class:`~common.model.gpu_quota.store.GPUQuotaStore`): checks, reserve,
  unreserve, rebuild;
* :mod:`.status`: the status a sync writes, its conditions and the alert event.
"""
