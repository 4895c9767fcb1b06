"""The persistent volume controller: a claim of a storage class the cluster lacks is never provisioned, and says so.

A claim of a class the cluster has is bound when it is created (`admission`: the default class's provisioner binds
at once). One of a class it lacks stays Pending, and the controller's every sync of it (`--pvclaimbinder-sync-period`,
15 s) records the Warning upstream's `syncUnboundClaim` does: `ProvisioningFailed`, `storageclass.storage.k8s.io "X"
not found` (pkg/controller/volume/persistentvolume/pv_controller.go)."""

from __future__ import annotations

from agent_sre.simulator import kubelet
from agent_sre.simulator.admission import STORAGE_CLASSES
from agent_sre.simulator.controllers.context import Pass

CLAIM_SYNC_S = 15.0


def reconcile(p: Pass) -> None:
    for claim in p.c.list("persistentvolumeclaims"):
        storage_class = (claim.get("spec") or {}).get("storageClassName")
        if (claim.get("status") or {}).get("phase") != "Pending" or storage_class in STORAGE_CLASSES:
            continue
        since = p.st.first_failure.setdefault((claim["metadata"]["uid"], "ProvisioningFailed"), p.now)
        attempts = 1 + int((p.now - since + kubelet.TIME_EPSILON_S) // CLAIM_SYNC_S)
        p.event(claim, "ProvisioningFailed", f'storageclass.storage.k8s.io "{storage_class}" not found', "Warning",
                component="persistentvolume-controller", count=attempts)
        p.later(since + attempts * CLAIM_SYNC_S, display=True)
