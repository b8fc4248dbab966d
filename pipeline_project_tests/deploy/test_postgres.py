"""deploy/k8s/postgres: the CloudNativePG Clusters (the dedup and ledger index, Dagster, MLflow), their backups to S3
and the Barman Cloud Plugin's ObjectStore against the operators' own CRD schemas (fetched by scripts/setup.sh); the
settings, Helm values and MLflow pointed at them; the volumes sized from the measured figures; and the one-server
alternative (deploy/k8s/base/postgres.yaml) as a drop-in for them."""

from __future__ import annotations

import copy
import json
import re
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from pipeline_project.common.postgres import SERVER_KEEPALIVES
from pipeline_project_tests.deploy import pod_env
from pipeline_project_tests.deploy.helpers import CNPG_KINDS, DEPLOY, K8S, REPO, k8s_manifests, validate_cnpg

POSTGRES = k8s_manifests("postgres")
BASE = k8s_manifests("base")
PLUGIN = "barman-cloud.cloudnative-pg.io"
# The goal the platform is sized against (docs/architecture.md, "Sizing")
GOAL_DOCUMENTS = 10**10
GOAL_BATCHES = 10**6


def _ids(items):
    return [f"{path.name}:{doc['kind']}/{doc['metadata']['name']}" for path, doc in items]


def _docs(kind: str, items=POSTGRES) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for _, doc in items if doc["kind"] == kind}


CLUSTERS = _docs("Cluster")


def _cluster(database: str) -> dict:
    (cluster,) = [c for c in CLUSTERS.values() if c["spec"]["bootstrap"]["initdb"]["database"] == database]
    return cluster


def _values() -> dict:
    return yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())


@pytest.mark.parametrize(("path", "doc"), POSTGRES, ids=_ids(POSTGRES))
def test_cloudnative_pg_resources_fit_their_crd_schemas(path, doc):
    assert doc["kind"] in CNPG_KINDS
    assert doc["metadata"]["namespace"] == "pipeline"
    validate_cnpg(doc)


def _broken(kind: str, change) -> dict:
    doc = copy.deepcopy(next(d for _, d in POSTGRES if d["kind"] == kind))
    change(doc["spec"])
    return doc


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("Cluster", lambda spec: spec.update(instance=spec.pop("instances"))),  # misspelt
        ("Cluster", lambda spec: spec.update(instances="three")),  # wrong type
        ("Cluster", lambda spec: spec["postgresql"]["parameters"].update(tcp_keepalives_idle=10)),  # not a string
        ("Cluster", lambda spec: spec["bootstrap"]["initdb"].update(databse="pipeline")),  # nested, misspelt
        ("Cluster", lambda spec: spec["plugins"][0].update(isWalArchiver=True)),  # wrong case
        ("ScheduledBackup", lambda spec: spec.update(method="barmanCloud")),  # not in the enum
        ("ObjectStore", lambda spec: spec["configuration"].pop("destinationPath")),  # required
        ("ObjectStore", lambda spec: spec.update(retentionPolicy="30 days")),  # not the pattern
    ],
    ids=["misspelt", "wrong-type", "parameter-not-string", "nested", "case", "enum", "required", "pattern"],
)
def test_the_crd_validator_rejects_a_wrong_field(kind, change):
    with pytest.raises(jsonschema.ValidationError):
        validate_cnpg(_broken(kind, change))


def test_each_store_has_its_own_cluster_with_a_standby():
    """The dedup index (with the ledger index: the code reads one URL for both), Dagster and MLflow: a Cluster each,
    each able to fail over."""
    databases = {c["spec"]["bootstrap"]["initdb"]["database"] for c in CLUSTERS.values()}
    assert databases == {"pipeline", "dagster", "mlflow"}
    for name, cluster in CLUSTERS.items():
        assert cluster["spec"]["instances"] >= 2, name


def test_the_index_cluster_loses_no_acknowledged_commit_in_a_failover():
    """First-writer-wins and the ledger's exactly-once act on what a commit acknowledged: a commit waits for a
    standby (never the primary alone), only a standby holding it is promoted, and one standby down blocks nothing."""
    spec = _cluster("pipeline")["spec"]
    sync = spec["postgresql"]["synchronous"]
    assert sync["dataDurability"] == "required" and sync["number"] >= 1 and sync.get("failoverQuorum") is True
    assert spec["instances"] - 1 > sync["number"]


def test_every_cluster_bounds_a_dead_clients_session():
    """Liveness never rests on a kernel default: the advisory locks of a cut-off client free within the bound."""
    for name, cluster in CLUSTERS.items():
        given = cluster["spec"]["postgresql"]["parameters"]
        assert {k: given.get(k) for k in SERVER_KEEPALIVES} == {k: str(v) for k, v in SERVER_KEEPALIVES.items()}, name


def test_every_cluster_archives_its_wal_and_takes_base_backups_to_s3():
    stores = _docs("ObjectStore")
    backups = _docs("ScheduledBackup")
    for name, cluster in CLUSTERS.items():
        (plugin,) = cluster["spec"]["plugins"]
        assert plugin["name"] == PLUGIN and plugin["isWALArchiver"] is True, name
        store = stores[plugin["parameters"]["barmanObjectName"]]
        assert store["spec"]["configuration"]["destinationPath"].startswith("s3://")
        assert store["spec"]["retentionPolicy"]
        # each Cluster its own folder: the plugin's serverName defaults to the Cluster's name; none is forced
        assert "serverName" not in plugin["parameters"] and "serverName" not in store["spec"]["configuration"]
        scheduled = [b for b in backups.values() if b["spec"]["cluster"]["name"] == name]
        assert scheduled, f"{name}: no ScheduledBackup"
        for backup in scheduled:
            assert backup["spec"]["method"] == "plugin" and backup["spec"]["pluginConfiguration"]["name"] == PLUGIN
            assert backup["spec"]["immediate"] is True  # a WAL archive without a base backup restores nothing
            assert len(backup["spec"]["schedule"].split()) == 6  # CloudNativePG's cron has seconds first


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Gi|Ti)", quantity).groups()
    return int(number) * {"Gi": 2**30, "Ti": 2**40}[unit]


def test_the_volumes_hold_the_goal_at_the_measured_cost():
    """The index's volume holds 10^10 kept documents at the measured bytes per kept document, Dagster's 10^6
    batches at the measured bytes per batch (bench/results/, the figures the Sizing table cites)."""
    dedup = json.loads((REPO / "bench" / "results" / "dedup_scale.json").read_text())["sizes"]
    assert round(dedup["bytes_per_kept_doc"]) == 1262  # schema 3's 1,261.5 B: the docs' "1,261 B"
    assert _bytes(_cluster("pipeline")["spec"]["storage"]["size"]) >= GOAL_DOCUMENTS * dedup["bytes_per_kept_doc"]
    dagster = json.loads((REPO / "bench" / "results" / "dagster_scale.json").read_text())["sizes"]
    (at_goal,) = [size for size in dagster if size["batches"] == GOAL_BATCHES]
    assert _bytes(_cluster("dagster")["spec"]["storage"]["size"]) >= 10 * at_goal["db_bytes"]


def _url(url: str) -> tuple[str, int, str, str]:
    parts = urlsplit(url)
    assert parts.password is None, "the password travels as PGPASSWORD, never in a URL"
    return parts.hostname, parts.port, parts.username, parts.path.lstrip("/")


def _rw(cluster: dict) -> str:
    """The Service CloudNativePG makes for a Cluster's primary."""
    return f"{cluster['metadata']['name']}-rw.{cluster['metadata']['namespace']}.svc"


def _owner(cluster: dict) -> tuple[str, str]:
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    return initdb["owner"], initdb["database"]


def _password_ref(container: dict) -> dict:
    (entry,) = [e for e in container.get("env", []) if e["name"] == "PGPASSWORD"]
    return entry["valueFrom"]["secretKeyRef"]


def test_the_pipeline_dagster_and_mlflow_point_at_their_clusters():
    index, dagster, mlflow = _cluster("pipeline"), _cluster("dagster"), _cluster("mlflow")
    secret_of = {name: c["spec"]["bootstrap"]["initdb"]["secret"]["name"] for name, c in CLUSTERS.items()}

    # the dedup index and the ledger index: PIPELINE_POSTGRES_URL, its password from the owner's Secret
    host, port, user, database = _url(pod_env.settings_data()["PIPELINE_POSTGRES_URL"])
    assert (host, port, (user, database)) == (_rw(index), 5432, _owner(index))
    values = _values()
    user_code = values["dagster-user-deployments"]["deployments"][0]
    run = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["containerConfig"]
    for container in (user_code, run):
        assert _password_ref(container) == {"name": secret_of[index["metadata"]["name"]], "key": "password"}

    # Dagster's storage: the chart's postgresql.* and its password Secret
    pg = values["postgresql"]
    assert (pg["postgresqlHost"], pg["service"]["port"]) == (_rw(dagster), 5432)
    assert (pg["postgresqlUsername"], pg["postgresqlDatabase"]) == _owner(dagster)
    assert values["global"]["postgresqlSecretName"] == secret_of[dagster["metadata"]["name"]]

    # MLflow's backend store
    (deployment,) = [d for _, d in BASE if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (backend,) = [a.split("=", 1)[1] for a in container["command"] if a.startswith("--backend-store-uri=")]
    host, port, user, database = _url(backend)
    assert (host, port, (user, database)) == (_rw(mlflow), 5432, _owner(mlflow))
    assert _password_ref(container) == {"name": secret_of[mlflow["metadata"]["name"]], "key": "password"}


def test_every_owner_secret_is_documented_as_cloudnative_pg_reads_it():
    """bootstrap.initdb.secret: type basic-auth with the owner's `username` and a `password`; Dagster's also under
    the key its chart reads."""
    secrets = _docs("Secret", BASE)
    for name, cluster in CLUSTERS.items():
        owner, _database = _owner(cluster)
        secret = secrets[cluster["spec"]["bootstrap"]["initdb"]["secret"]["name"]]
        assert secret["type"] == "kubernetes.io/basic-auth", name
        assert secret["stringData"]["username"] == owner and "password" in secret["stringData"], name
    assert "postgresql-password" in secrets[_values()["global"]["postgresqlSecretName"]]["stringData"]


def test_the_one_server_alternative_is_a_drop_in_for_the_clusters():
    """deploy/k8s/base/postgres.yaml serves the same owners, databases and passwords under each Cluster's `-rw`
    Service name, so no setting changes between the two."""
    (statefulset,) = _docs("StatefulSet", BASE).values()
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    services = {
        name: s
        for name, s in _docs("Service", BASE).items()
        if s["spec"].get("selector") and s["spec"]["selector"].items() <= labels.items()
    }
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    (init,) = _docs("ConfigMap", BASE)["postgres-init"]["data"].values()
    index = _cluster("pipeline")
    assert (env["POSTGRES_USER"], env["POSTGRES_DB"]) == _owner(index)
    for name, cluster in CLUSTERS.items():
        assert f"{name}-rw" in services and services[f"{name}-rw"]["spec"]["ports"][0]["port"] == 5432
        secret = {"name": cluster["spec"]["bootstrap"]["initdb"]["secret"]["name"], "key": "password"}
        assert secret in [v["secretKeyRef"] for v in env.values() if isinstance(v, dict)], name
        owner, database = _owner(cluster)
        if cluster is not index:
            assert f"CREATE ROLE {owner} LOGIN PASSWORD" in init, owner
            assert f"CREATE DATABASE {database} OWNER {owner};" in init, database


def test_the_steps_install_no_operator_and_name_the_clusters():
    readme = (DEPLOY / "README.md").read_text()
    assert "CloudNativePG operator, 1.29.0 or newer" in readme and "Barman Cloud Plugin" in readme
    assert "kubectl apply -f deploy/k8s/postgres/" in readme
    for name in CLUSTERS:
        assert f"cluster/{name}" in readme, name
