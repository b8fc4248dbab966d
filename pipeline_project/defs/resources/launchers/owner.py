"""The run pod a trainer pod belongs to: its ownerReference, so that Kubernetes' garbage collector deletes the
trainer pod (and frees its GPUs) once the run pod is gone.

The run pod is gone when its node is lost (the pod object is deleted with it) or when its Job is deleted, which
the run Job's `ttlSecondsAfterFinished` (deploy/k8s/dagster/values.yaml) does a few minutes after a run pod failed
(killed for memory, evicted): the run's retry then never trains the same lineage beside the old trainer for long.
Only a pod in the same namespace can own another (Kubernetes deletes a dependent whose namespaced owner is in
another namespace as if the owner were gone), so a trainer launched into another namespace gets no owner.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace() -> str | None:
    """The namespace of the pod this process runs in; None outside a pod (no service-account token mounted)."""
    if not SERVICE_ACCOUNT_NAMESPACE.exists():
        return None
    return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None


def run_pod_owner(namespace: str | None, core_api: Any = None) -> dict[str, str] | None:
    """The ownerReference to this process's own pod for a trainer pod in `namespace` (None: the pod's own); None
    outside a pod or for another namespace. Inside a pod a failed lookup raises: a trainer pod without its owner
    would hold its GPUs for up to its deadline after the run pod died."""
    here = own_namespace()
    if here is None:
        log.warning("not in a pod: the trainer pod gets no owner, and outlives a dead run until its deadline")
        return None
    if namespace not in (None, here):
        log.warning("the trainer pod goes to namespace %s, the run pod is in %s: no owner reference", namespace, here)
        return None
    if core_api is None:
        import kubernetes

        kubernetes.config.load_incluster_config()
        core_api = kubernetes.client.CoreV1Api()
    name = socket.gethostname()  # a pod's hostname is its name
    try:
        pod = core_api.read_namespaced_pod(name, here)
    except Exception as exc:
        raise RuntimeError(f"cannot read the run pod {here}/{name} to own the trainer pod: {exc}") from exc
    return {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid}
