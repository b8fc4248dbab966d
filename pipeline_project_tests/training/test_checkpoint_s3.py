"""Against the real S3 server of the local stack."""

from __future__ import annotations

import uuid

import pytest
import torch

from pipeline_project.training.checkpoint import (
    ResumeState,
    latest_ref,
    load_latest,
    s3_client,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.presets import build_model
from pipeline_project.training.verify import reload_and_generate

pytestmark = pytest.mark.stack


def test_upload_then_load_latest_and_reload(stack, tmp_path, deepseek_tokenizer):
    s3 = s3_client(stack)
    prefix = f"checkpoints/test-{uuid.uuid4().hex[:8]}"
    assert load_latest(s3, stack.bucket, prefix) is None

    torch.manual_seed(0)
    model = build_model("tiny", deepseek_tokenizer.vocab_size)
    offsets = [{"partitions": {"0": {"offset": 12, "block": 1}}}]
    for step in (3, 7):
        save_checkpoint(
            tmp_path / f"local-{step}",
            model=model,
            tokenizer=deepseek_tokenizer,
            resume=ResumeState(step=step, tokens_seen=step * 64, optimizer={"state": {}}, data_states=offsets),
        )
        ref = upload_checkpoint(s3, stack.bucket, prefix, step, tmp_path / f"local-{step}")
    assert ref.uri == f"s3://{stack.bucket}/{prefix}/step-7/"
    assert latest_ref(s3, stack.bucket, prefix) == ref
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=stack.bucket, Prefix=f"{prefix}/step-7/")["Contents"]}
    assert {
        f"{prefix}/step-7/hf/model.safetensors",
        f"{prefix}/step-7/hf/tokenizer.json",
        f"{prefix}/step-7/resume/state.pt",
        f"{prefix}/step-7/resume/data_state.json",
    } <= keys

    loaded = load_latest(s3, stack.bucket, prefix, tmp_path / "downloaded")
    assert loaded.ref.step == 7 and loaded.resume.step == 7 and loaded.resume.data_states == offsets
    assert (loaded.hf_dir / "model.safetensors").is_file()

    generated = reload_and_generate(s3, ref.uri, tmp_path / "verify", new_tokens=4)
    assert len(generated) == 4 and all(0 <= t < deepseek_tokenizer.vocab_size for t in generated)
