"""The volume rules of kube-scheduler's default profile, pure (design.md "Placement rules", volumes):

* the objects they read: :mod:`.claims` (PersistentVolumeClaims), :mod:`.persistent_volumes`,
  :mod:`.storage_classes`, :mod:`.csi_nodes`; a pod's own volumes are
  :mod:`common.model.pod_volumes`;
* :mod:`.claim_lookup`: a pod's claims found, or why they cannot be (missing, lost, being deleted,
  an ephemeral claim of another pod), with kube-scheduler's messages;
* :mod:`.matching`: the static PersistentVolume that fits a claim (``FindMatchingVolume``);
* :mod:`.binder`: VolumeBinding's decisions (claims sorted into bound / to bind / immediate, one
  node's bindings and provisionings, the API writes of PreBind and the condition it waits for);
* :mod:`.ledger`: the PersistentVolumes and claims assumed between Reserve and PreBind (the assume
  cache: two pods never take the same PersistentVolume);
* :mod:`.zones`: VolumeZone; :mod:`.restrictions`: VolumeRestrictions; :mod:`.migration` and
  :mod:`.limits`: NodeVolumeLimits;
* :mod:`.controller`: the PersistentVolume controller's and a provisioner's part, for ``gpuq simulate``.
"""
