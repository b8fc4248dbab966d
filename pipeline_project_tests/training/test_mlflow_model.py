"""A registered checkpoint loads through MLflow's own loaders (real S3 and MLflow server of the local stack):
`mlflow.transformers.load_model("models:/<lineage>@latest-checkpoint")` and the pyfunc flavour give the model the
trainer saved, read from the checkpoint's own `hf/` folder (no second copy of the weights)."""

from __future__ import annotations

import uuid

import pytest
import torch
from mlflow.tracking import MlflowClient

from pipeline_project.training.checkpoint.store import (
    ResumeState,
    read_latest,
    s3_client,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.presets import build_model
from pipeline_project.training.tracking.lineage import CHECKPOINT_ALIAS, register_checkpoint

pytestmark = pytest.mark.stack


@pytest.fixture
def mlflow_s3_env(stack, monkeypatch):
    """What a user sets to read the registry's model versions from the stack's S3 (see deploy/README.md)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", stack.s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", stack.s3_access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", stack.s3_secret_key)
    mlflow.set_tracking_uri(stack.mlflow_tracking_uri)
    mlflow.set_registry_uri(stack.mlflow_tracking_uri)
    return stack


def test_latest_checkpoint_loads_with_mlflow_transformers_and_pyfunc(mlflow_s3_env, tmp_path, deepseek_tokenizer):
    import mlflow

    stack = mlflow_s3_env
    s3 = s3_client(stack)
    lineage = f"test-mlflow-load-{uuid.uuid4().hex[:8]}"
    prefix = f"checkpoints/{lineage}"
    torch.manual_seed(0)
    model = build_model("tiny", deepseek_tokenizer.vocab_size).eval()
    resume = ResumeState(step=3, tokens_seen=192, optimizer={"state": {}}, data_states=[])
    local = save_checkpoint(tmp_path / "local", model=model, tokenizer=deepseek_tokenizer, resume=resume)
    ref = upload_checkpoint(s3, stack.bucket, prefix, 3, local, expected=read_latest(s3, stack.bucket, prefix)).ref
    client = MlflowClient(stack.mlflow_tracking_uri)
    version = register_checkpoint(client, lineage, source=ref.hf_uri, run_id=None, tags={"step": "3"})
    assert client.get_model_version(lineage, version).source == ref.hf_uri  # the checkpoint's folder, not a copy
    hf_keys = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=stack.bucket, Prefix=ref.hf_uri[len(f"s3://{stack.bucket}/") :])["Contents"]
    ]
    assert sum(k.endswith(".safetensors") for k in hf_keys) == 1  # one copy of the weights: MLmodel reads them in place

    (tmp_path / "dl").mkdir(), (tmp_path / "py").mkdir()
    pipe = mlflow.transformers.load_model(f"models:/{lineage}@{CHECKPOINT_ALIAS}", dst_path=str(tmp_path / "dl"))
    ids = torch.tensor([deepseek_tokenizer.tokenizer.encode("The data pipeline")])
    with torch.no_grad():
        expected, got = model(ids).logits, pipe.model.eval()(ids).logits
    torch.testing.assert_close(got, expected)
    assert pipe.tokenizer.encode("The data pipeline") == ids[0].tolist()

    pyfunc = mlflow.pyfunc.load_model(f"models:/{lineage}@{CHECKPOINT_ALIAS}", dst_path=str(tmp_path / "py"))
    assert pyfunc.metadata.flavors["python_function"]["loader_module"] == "mlflow.transformers"
    [text] = pyfunc.predict(["The data pipeline"], params={"max_new_tokens": 2, "do_sample": False})
    assert isinstance(text, str) and text.startswith("The data pipeline")
