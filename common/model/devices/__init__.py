"""DRA devices: the pure allocator of ``resource.k8s.io/v1`` claims, with the semantics of
kube-scheduler's DynamicResources plugin and ``k8s.io/dynamic-resource-allocation/structured``
v0.36.4 (docs/design.md "DRA devices"), one concept per module:

* :mod:`.amounts`: quantities as exact nano-unit integers;
* :mod:`.semver`: semantic versions as Kubernetes' CEL library reads them;
* :mod:`.cel_env`: the CEL environment of device selectors, compiled once per expression;
* :mod:`.node_selector`: ``v1.NodeSelector`` matching of one node;
* :mod:`.device`, :mod:`.slices`, :mod:`.classes`, :mod:`.claims`: the wire models (Device,
  ResourceSlice, DeviceClass, ResourceClaim and ResourceClaimTemplate);
* :mod:`.taints`: device taints and request tolerations;
* :mod:`.results`: an allocation (``status.allocation``);
* :mod:`.pools`: pools, generations, completeness, and the devices a node reaches (the inventory);
* :mod:`.capacity`, :mod:`.counters`, :mod:`.constraints`: consumable capacity, shared counters,
  ``matchAttribute``/``distinctAttribute``;
* :mod:`.ledger`: the allocated state (rebuild from claims, reserve/unreserve in flight);
* :mod:`.matching`: selector results cached per slice;
* :mod:`.plan`, :mod:`.search`, :mod:`.explain`: a pod's claims prepared once per cycle, the search
  on one node, and the reasons when it fails;
* :mod:`.extended`: extended resources backed by a DeviceClass (the implicit claim);
* :mod:`.quota`: what a device or a share of one is worth to the quota engines.
"""
