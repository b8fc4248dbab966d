"""Several nodes: the trainer pod as an Indexed Job of a JobSet running `torchrun --nnodes`, and the command
that prints it (`python -m pipeline_project.defs.resources.launchers jobset ...`; deploy/README.md, "Multi-node
training")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pipeline_project.defs.resources.launchers.commands import multinode_command
from pipeline_project.defs.resources.launchers.config import JOB_CONFIG_ENV, JOB_CONFIG_KEY, RDZV_PORT, TrainerLaunch
from pipeline_project.defs.resources.launchers.pod import k8s_pod_meta, k8s_pod_spec

TRAINER_LAUNCH_KEY = "PIPELINE_TRAINER_LAUNCH"  # the settings ConfigMap's key that holds the TrainerLaunch JSON


def jobset_manifest(
    launch: TrainerLaunch, *, name: str, nodes: int, job_configmap: str, namespace: str, max_restarts: int = 2
) -> dict[str, Any]:
    """A JobSet (jobset.x-k8s.io/v1alpha2) that trains on `nodes` pods of `launch.gpus_per_pod` GPUs each.

    One Indexed Job of `nodes` pods; JobSet gives each pod the DNS name `<name>-node-0-<index>.<name>`, so the
    rendezvous endpoint is known before the pods exist. The JobConfig comes from key `job.json` of ConfigMap
    `job_configmap`. Each pod is one node with its own scratch volume, so each node downloads the previous
    checkpoint once (see deploy/README.md for the trainer's part of that).
    """
    if nodes < 1:
        raise ValueError("nodes must be >= 1")
    spec = k8s_pod_spec(launch, command=multinode_command(name, nodes, launch.gpus_per_pod))
    del spec["activeDeadlineSeconds"]  # a hand-started JobSet runs as long as its operator lets it
    container = spec["containers"][0]
    container["env"] = [
        {"name": JOB_CONFIG_ENV, "valueFrom": {"configMapKeyRef": {"name": job_configmap, "key": JOB_CONFIG_KEY}}},
        {
            "name": "NODE_RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        },
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *container["env"],
    ]
    container["ports"] = [{"name": "rdzv", "containerPort": RDZV_PORT}, *container.get("ports", [])]
    job_spec = {
        "parallelism": nodes,
        "completions": nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {"metadata": k8s_pod_meta(launch), "spec": spec},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job_spec}}],
        },
    }


def launch_from_configmap(path: Path) -> TrainerLaunch:
    """The TrainerLaunch of the ConfigMap in `path` (deploy/k8s/base/settings.yaml): the pod Dagster launches."""
    import yaml

    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "ConfigMap" and TRAINER_LAUNCH_KEY in doc.get("data", {}):
            return TrainerLaunch.from_json(doc["data"][TRAINER_LAUNCH_KEY]).model_copy(update={"launcher": "k8s"})
    raise ValueError(f"{path}: no ConfigMap with {TRAINER_LAUNCH_KEY}")


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline_project.defs.resources.launchers jobset ...`: print the multi-node recipe as YAML."""
    import yaml

    parser = argparse.ArgumentParser(description="render the trainer's Kubernetes manifests")
    parser.add_argument("what", choices=["jobset"])
    parser.add_argument(
        "--launch-from",
        type=Path,
        required=True,
        help=f"a ConfigMap YAML whose {TRAINER_LAUNCH_KEY} shapes each node's pod (deploy/k8s/base/settings.yaml)",
    )
    parser.add_argument("--name", default="deepseek-multinode")
    parser.add_argument("--namespace", default="pipeline")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--job-configmap", default="deepseek-job")
    parser.add_argument("--image", help="instead of the launch's image")
    parser.add_argument("--gpus-per-node", type=int, help="instead of the launch's gpus_per_pod")
    args = parser.parse_args(argv)
    launch = launch_from_configmap(args.launch_from)
    overrides = {"image": args.image, "gpus_per_pod": args.gpus_per_node}
    launch = launch.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    manifest = jobset_manifest(
        launch, name=args.name, nodes=args.nodes, job_configmap=args.job_configmap, namespace=args.namespace
    )
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False))
    return 0
