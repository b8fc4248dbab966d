"""Every pod that reaches S3 runs under a service account the deploy files define with its IRSA annotation (the
IAM role a pod of it assumes on EKS): a placeholder role that deploy/README.md tells a team to set, never a
commented-out template. The S3 users: the run pods (ingest writes shards), the trainer pods and the JobSet
(checkpoints), MLflow (artifacts), the webserver and the daemon (step logs), the code server (the raw S3 sensor),
and the PostgreSQL instance pods of each CloudNativePG Cluster (their WAL archive and base backups)."""

from __future__ import annotations

import re

from pipeline_project_tests.deploy import helm_render, pod_env
from pipeline_project_tests.deploy.helpers import DEPLOY, K8S, k8s_manifests, yaml_docs

IRSA = "eks.amazonaws.com/role-arn"
ROLE = re.compile(r"arn:aws:iam::(<account-id>|\d{12}):role/[\w+=,.@-]+")


def _s3_users() -> dict[str, str]:
    """Pod -> the service account it runs as."""
    values = helm_render.values()
    (jobset,) = yaml_docs(K8S / "training" / "jobset.yaml")
    (replicated,) = jobset["spec"]["replicatedJobs"]
    (mlflow,) = [d for _, d in k8s_manifests("base") if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"]
    return {
        "run pod": helm_render.run_pod_spec()["serviceAccountName"],
        "trainer pod": pod_env.trainer_launch().service_account,
        "JobSet node pod": replicated["template"]["spec"]["template"]["spec"]["serviceAccountName"],
        "MLflow": mlflow["spec"]["template"]["spec"].get("serviceAccountName", "default"),
        "webserver and daemon": helm_render.main_service_account(values),
        "code server": helm_render.user_code_service_account(values),
    } | {
        # CloudNativePG runs a Cluster's instance pods, and the Barman Cloud Plugin's sidecar, as the service account
        # named after the Cluster, made from its serviceAccountTemplate
        f"PostgreSQL {d['metadata']['name']}": d["metadata"]["name"]
        for _, d in k8s_manifests("postgres")
        if d["kind"] == "Cluster"
    }


def _defined() -> dict[str, dict[str, str]]:
    """Service account -> its annotations, from deploy/k8s and the service accounts the chart creates."""
    accounts = {
        d["metadata"]["name"]: d["metadata"].get("annotations", {})
        for _, d in k8s_manifests("base")
        if d["kind"] == "ServiceAccount"
    }
    values = helm_render.values()
    for chart in (values, values[helm_render.SUBCHART]):
        account = chart["serviceAccount"]
        assert account["create"] is True
    accounts[helm_render.main_service_account(values)] = values["serviceAccount"]["annotations"]
    sub = values[helm_render.SUBCHART]["serviceAccount"]
    accounts[helm_render.user_code_service_account(values)] = sub["annotations"]
    for _, d in k8s_manifests("postgres"):
        if d["kind"] == "Cluster" and "serviceAccountName" not in d["spec"]:
            accounts[d["metadata"]["name"]] = d["spec"]["serviceAccountTemplate"]["metadata"]["annotations"]
    return accounts


def test_every_service_account_that_reaches_s3_carries_its_irsa_role():
    defined = _defined()
    for pod, account in _s3_users().items():
        assert account in defined, f"{pod} runs as {account}, which no deploy file defines"
        role = defined[account].get(IRSA)
        assert role and ROLE.fullmatch(role), f"{pod}: service account {account} has no IRSA role ({role!r})"


def test_the_readme_tells_a_team_to_set_each_role():
    readme = (DEPLOY / "README.md").read_text()
    assert IRSA in readme and "<account-id>" in readme
    for account in set(_s3_users().values()):
        assert f"`{account}`" in readme, account


def test_the_annotations_are_live_yaml_not_comments():
    text = (K8S / "base" / "rbac.yaml").read_text()
    assert not re.search(rf"^\s*#.*{re.escape(IRSA)}", text, flags=re.M)
