"""Secrets never leak, and no default credentials apply outside the local stack.

The graph test materializes ingest + a tiny training run over the SASL_SSL cluster (`secure_kafka.py`) and the shared
S3 and MLflow, plus runs that fail on a wrong Kafka password and a wrong S3 key. It then scans every place a secret
could land (the Dagster instance's files: event log, run storage and compute logs; every event record and its
metadata; the MLflow runs' params, tags and names; the trainer's job file; Python logs; the brokers' logs; every
exception message) for each secret in play: zero hits.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
from botocore.exceptions import ClientError
from mlflow.tracking import MlflowClient

from pipeline_project import settings as settings_module
from pipeline_project.defs.resources import build_resources
from pipeline_project.defs.resources.launchers import JOB_CONFIG_ENV
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.settings import LOCAL_POSTGRES_PASSWORD, LOCAL_S3_ACCESS_KEY, LOCAL_S3_SECRET_KEY, Settings
from pipeline_project.stack import Stack, StackConfig
from pipeline_project.stack.security import BROKER_USER
from pipeline_project_tests.secure_kafka import SecureCluster, isolated_resources, secure_stack

# -- no default credentials outside the local stack -----------------------------------------------------------------

S3_ENV = ("PIPELINE_S3_ENDPOINT", "PIPELINE_S3_PORT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
          "AWS_SESSION_TOKEN", "AWS_PROFILE")  # fmt: skip


@pytest.fixture
def aws_chain(monkeypatch, tmp_path) -> Path:
    """No S3 settings in the environment; boto3's chain finds only a credentials file (as IRSA or a profile would)."""
    for name in S3_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIPELINE_STATE_DIR", str(tmp_path / "no-local-stack"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "aws-credentials").write_text(
        "[default]\naws_access_key_id = AKIAFROMCHAIN\naws_secret_access_key = x\n"
    )
    return tmp_path


def _access_key(client) -> str:
    return client._request_signer._credentials.access_key


def test_without_an_endpoint_clients_take_the_aws_chain_not_the_local_keys(aws_chain):
    s = Settings()
    assert (s.s3_endpoint, s.s3_access_key, s.s3_secret_key) == (None, None, None)
    assert _access_key(s.s3_client()) == "AKIAFROMCHAIN"
    resource = build_resources(s)["s3"]
    assert (resource.endpoint_url, resource.aws_access_key_id, resource.aws_secret_access_key) == (None, None, None)
    assert _access_key(resource.get_client()) == "AKIAFROMCHAIN"


def test_a_remote_endpoint_gets_no_local_keys_either(aws_chain, monkeypatch):
    monkeypatch.setenv("PIPELINE_S3_ENDPOINT", "https://minio.example.internal:9000")
    s = Settings()
    assert (s.s3_access_key, s.s3_secret_key) == (None, None)
    assert _access_key(s.s3_client()) == "AKIAFROMCHAIN"


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:19000", "http://localhost:26000"])
def test_an_endpoint_on_this_machine_defaults_to_the_local_stack_keys(aws_chain, monkeypatch, endpoint):
    monkeypatch.setenv("PIPELINE_S3_ENDPOINT", endpoint)
    s = Settings()
    assert (s.s3_access_key, s.s3_secret_key) == (LOCAL_S3_ACCESS_KEY, LOCAL_S3_SECRET_KEY)
    assert LOCAL_S3_SECRET_KEY not in repr(s)


def test_keys_in_the_environment_win_everywhere(aws_chain, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    for endpoint in (None, "http://127.0.0.1:19000"):
        if endpoint:
            monkeypatch.setenv("PIPELINE_S3_ENDPOINT", endpoint)
        assert (Settings().s3_access_key, Settings().s3_secret_key) == ("AKIAENV", "env-secret")


def test_the_stack_hands_its_endpoint_and_keys_to_what_it_launches(aws_chain, monkeypatch, tmp_path):
    config = StackConfig(state_dir=tmp_path / "state", s3_port=26500)
    env = config.client_env()
    assert env["PIPELINE_S3_ENDPOINT"] == "http://127.0.0.1:26500"
    assert env["KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT" and env["KAFKA_SASL_PASSWORD"] == ""
    webserver, daemon = Stack(config).services["dagster"].processes()
    for mp in (webserver, daemon):
        assert {k: mp.env[k] for k in env} == env
    # What definitions.py's `build_resources()` sees inside the stack's code server and runs:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert s.s3_endpoint == "http://127.0.0.1:26500"
    assert (s.s3_access_key, s.s3_secret_key) == (LOCAL_S3_ACCESS_KEY, LOCAL_S3_SECRET_KEY)
    assert build_resources()["s3"].endpoint_url == "http://127.0.0.1:26500"
    assert _access_key(s.s3_client()) == LOCAL_S3_ACCESS_KEY


def test_secrets_stay_out_of_settings_and_resource_reprs(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sentinel-repr-secret")
    monkeypatch.setenv(settings_module.KAFKA_SASL_PASSWORD_ENV, "sentinel-repr-kafka")
    text = repr(Settings()) + "".join(repr(r) for r in build_resources().values())
    assert "sentinel-repr" not in text


# -- the graph, scanned ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def secure(request) -> SecureCluster:
    return secure_stack(request)


def _hits(secrets: dict[str, str], where: str, text: str | bytes) -> list[str]:
    data = text if isinstance(text, bytes) else text.encode(errors="replace")
    return [f"{name} in {where}" for name, value in secrets.items() if value.encode() in data]


def _event_errors(result) -> list[str]:
    """Every error a run's events carry (step failures, resource init failures, run failure), causes included."""
    errors = [getattr(e.event_specific_data, "error", None) for e in result.all_events]
    return [err.to_string() for err in errors if err is not None]


@pytest.mark.stack
def test_no_secret_reaches_any_log_metadata_mlflow_job_file_or_error(secure: SecureCluster, stack, monkeypatch,
                                                                     caplog, tmp_path):  # fmt: skip
    from pipeline_project.defs.assets import checkpoint, cleaned, raw, token_blocks
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
    from pipeline_project.demo.sample.corpus import generate

    uid = uuid.uuid4().hex[:8]
    secrets = {
        "kafka password": secure.password,
        "broker password": secure.config.kafka_secure.password(BROKER_USER),
        "S3 secret key": stack.s3_secret_key,
        "Postgres password": LOCAL_POSTGRES_PASSWORD,
        "wrong kafka password": f"wrong-kafka-{uuid.uuid4().hex}",
        "wrong S3 secret key": f"wrong-s3-{uuid.uuid4().hex}",
    }
    # Secrets reach the resources as the stack hands them to Dagster: through the environment (EnvVar), never config.
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", secure.password)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", stack.s3_access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", stack.s3_secret_key)
    caplog.set_level("DEBUG")
    job_files: list[str] = []
    original_run = dg.PipesSubprocessClient.run

    def capture_job_file(self, *, command, **kwargs):
        job_files.append(self.env[JOB_CONFIG_ENV])  # the job travels in the trainer's env (resources/launchers.py)
        return original_run(self, command=command, **kwargs)

    monkeypatch.setattr(dg.PipesSubprocessClient, "run", capture_job_file)

    settings = secure.settings_with(stack)
    resources = isolated_resources(settings, uid)
    resources["trainer"] = TrainerResource(run_name=f"sx-{uid}", batch_size=4, max_steps=2, warmup_steps=1)
    layout = resources["layout"]
    s3 = stack.s3_client()
    for f in generate(seed=9, docs_per_language=3):
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)

    errors: list[str] = []
    with dg.instance_for_test() as instance:
        sensor_resources = {k: resources[k] for k in ("s3", "layout")}
        with dg.build_sensor_context(instance=instance, resources=sensor_resources) as ctx:
            batch = raw_s3_sensor(ctx).run_requests[0].partition_key
        instance.add_dynamic_partitions(batches.name, [batch])
        ingest = [raw, cleaned, token_blocks]
        assets = [*dg.load_assets_from_modules(ingest), *dg.load_asset_checks_from_modules(ingest)]
        runs = [dg.materialize(assets, resources=resources, partition_key=batch, instance=instance)]
        training = [*dg.load_assets_from_modules([checkpoint]), *dg.load_asset_checks_from_modules([checkpoint])]
        runs.append(dg.materialize(training, resources=resources, instance=instance,
                                   selection=[checkpoint.deepseek_checkpoint.key]))  # fmt: skip
        assert all(r.success for r in runs)
        assert job_files, "the trainer's job file was not captured"

        # The resources read their secrets (EnvVar) when a step starts: put wrong ones in the environment.
        # A wrong Kafka password fails the step at resource setup, with a clear line and no secret in it.
        monkeypatch.setenv("KAFKA_SASL_PASSWORD", secrets["wrong kafka password"])
        failed = dg.materialize([token_blocks.token_blocks], resources=resources, partition_key=batch,
                                instance=instance, raise_on_error=False)  # fmt: skip
        assert not failed.success
        errors += _event_errors(failed)
        assert any("refused the SASL SCRAM-SHA-512 login of user 'pipeline'" in err for err in errors), errors
        runs.append(failed)
        # A wrong S3 key fails the sensor's listing.
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secrets["wrong S3 secret key"])
        sensor_context = dg.build_sensor_context(instance=instance, resources=sensor_resources)
        with sensor_context as ctx, pytest.raises(ClientError) as s3_error:
            raw_s3_sensor(ctx)
        errors.append(repr(s3_error.value) + "".join(str(t) for t in s3_error.traceback))

        found: list[str] = []
        files = [p for p in Path(instance.root_directory).rglob("*") if p.is_file()]
        assert any(p.suffix == ".err" and p.parent.name == "compute_logs" for p in files), "no compute log to scan"
        for path in files:  # event log, run storage, compute logs (the trainer's output included)
            found += _hits(secrets, f"instance file {path.name}", path.read_bytes())
        run_ids = [r.run_id for r in runs]
        for run_id in run_ids:
            for record in instance.all_logs(run_id):
                found += _hits(secrets, f"event of run {run_id[:8]}", dg.serialize_value(record))
        for result in runs:
            for event in result.get_asset_materialization_events():
                found += _hits(secrets, "asset metadata", dg.serialize_value(event.materialization.metadata))

    client = MlflowClient(stack.mlflow_tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    mlflow_runs = [
        run
        for run_id in run_ids
        for tag in ("dagster.run_id", "dagster_run_id")
        for run in client.search_runs(experiments, filter_string=f"tags.`{tag}` = '{run_id}'")
    ]
    assert len(mlflow_runs) >= 2, "the produce and training runs are in MLflow"
    for run in mlflow_runs:
        found += _hits(secrets, f"MLflow run {run.info.run_name}", repr((run.data.params, run.data.tags, run.info)))
    for text in job_files:
        assert '"security_protocol":"SASL_SSL"' in text, "the job file names the secure cluster, minus the password"
        found += _hits(secrets, "trainer job file", text)
    assert caplog.records and errors
    assert _hits(secrets, "control", f"<{secure.password}>") == ["kafka password in control"]
    for record in caplog.records:
        found += _hits(secrets, f"log {record.name}", record.getMessage())
    for log in (secure.config.state_dir / "kafka").glob("broker-*/server.log"):
        found += _hits(secrets, f"broker log {log.parent.name}", log.read_bytes())
    for text in errors:
        found += _hits(secrets, "exception message", text)
    assert found == []


def test_clients_follow_the_environment_of_their_creation_not_the_first_one(aws_chain, monkeypatch):
    """boto3's process-wide default session keeps the first credentials it resolved; a later client must not."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEARLIER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "earlier")
    assert _access_key(settings_module.make_s3_client(None, None, None)) == "AKIAEARLIER"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert _access_key(settings_module.make_s3_client(None, None, None)) == "AKIAFROMCHAIN"
