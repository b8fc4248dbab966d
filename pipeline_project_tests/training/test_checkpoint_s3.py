"""Against the real S3 server of the local stack."""

from __future__ import annotations

import hashlib
import uuid

import pytest
import torch

from pipeline_project.training.checkpoint.store import (
    ResumeState,
    latest_ref,
    load_latest,
    read_latest,
    s3_client,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.checkpoint.verify import reload_and_generate
from pipeline_project.training.errors import CheckpointConflictError
from pipeline_project.training.presets import build_model
from pipeline_project_harness.reliability.checkpoint_trials import SCENARIOS, lost_latest_answer
from pipeline_project_harness.reliability.lost_response import LoseResponses

pytestmark = pytest.mark.stack


def test_upload_then_load_latest_and_reload(stack, tmp_path, deepseek_tokenizer):
    s3 = s3_client(stack)
    prefix = f"checkpoints/test-{uuid.uuid4().hex[:8]}"
    assert load_latest(s3, stack.bucket, prefix) is None

    torch.manual_seed(0)
    model = build_model("tiny", deepseek_tokenizer.vocab_size)
    offsets = [{"partitions": {"0": {"offset": 12, "block": 1}}}]
    pointer = read_latest(s3, stack.bucket, prefix)
    assert (pointer.ref, pointer.etag) == (None, None)
    for step in (3, 7):
        save_checkpoint(
            tmp_path / f"local-{step}",
            model=model,
            tokenizer=deepseek_tokenizer,
            resume=ResumeState(step=step, tokens_seen=step * 64, optimizer={"state": {}}, data_states=offsets),
        )
        pointer = upload_checkpoint(s3, stack.bucket, prefix, step, tmp_path / f"local-{step}", expected=pointer)
    ref = pointer.ref
    assert ref.uri.startswith(f"s3://{stack.bucket}/{prefix}/step-7-") and ref.uri.endswith("/")
    assert latest_ref(s3, stack.bucket, prefix) == ref
    step_prefix = ref.uri.removeprefix(f"s3://{stack.bucket}/")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=stack.bucket, Prefix=step_prefix)["Contents"]}
    assert {
        f"{step_prefix}hf/model.safetensors",
        f"{step_prefix}hf/tokenizer.json",
        f"{step_prefix}resume/state.pt",
        f"{step_prefix}resume/data_state.json",
    } <= keys

    loaded = load_latest(s3, stack.bucket, prefix, tmp_path / "downloaded")
    assert loaded.ref.step == 7 and loaded.resume.step == 7 and loaded.resume.data_states == offsets
    assert (loaded.hf_dir / "model.safetensors").is_file()

    generated = reload_and_generate(s3, ref.uri, tmp_path / "verify", new_tokens=4)
    assert len(generated) == 4 and all(0 <= t < deepseek_tokenizer.vocab_size for t in generated)


def test_two_runs_from_the_same_latest_json_one_wins_the_other_conflicts(stack, tmp_path, tiny_model):
    """Both read latest.json at their start and train to the same step; each writes its own step folder, and
    only the first conditional write of latest.json succeeds. The loser's checkpoint is not referenced."""
    s3 = s3_client(stack)
    prefix = f"checkpoints/test-race-{uuid.uuid4().hex[:8]}"
    local = save_checkpoint(
        tmp_path / "local",
        model=tiny_model,
        tokenizer=None,
        resume=ResumeState(step=1, tokens_seen=64, optimizer={}, data_states=[]),
    )
    base = upload_checkpoint(s3, stack.bucket, prefix, 1, local, expected=read_latest(s3, stack.bucket, prefix))

    started_a, started_b = read_latest(s3, stack.bucket, prefix), read_latest(s3, stack.bucket, prefix)
    assert started_a == started_b == base
    winner = upload_checkpoint(s3, stack.bucket, prefix, 5, local, expected=started_a)
    with pytest.raises(CheckpointConflictError, match="another training run"):
        upload_checkpoint(s3, stack.bucket, prefix, 5, local, expected=started_b)
    assert latest_ref(s3, stack.bucket, prefix) == winner.ref

    # the race past the fail-fast check: latest.json moves between that check and the conditional write
    moved = upload_checkpoint(s3, stack.bucket, prefix, 6, local, expected=winner)
    with pytest.raises(CheckpointConflictError):
        upload_checkpoint(_StaleView(s3, moved.etag, winner.etag), stack.bucket, prefix, 7, local, expected=winner)
    assert latest_ref(s3, stack.bucket, prefix) == moved.ref
    folders = {o["Key"].split("/")[2] for o in s3.list_objects_v2(Bucket=stack.bucket, Prefix=prefix)["Contents"]}
    assert not any(f.startswith("step-7-") for f in folders)  # the loser's upload was removed
    assert sum(f.startswith("step-5-") for f in folders) == 1


class _StaleView:
    """An S3 client whose reads of latest.json still show an old ETag (the fail-fast check passes), so the
    conditional write itself must catch the move."""

    def __init__(self, s3, current_etag: str, stale_etag: str):
        self._s3, self._current, self._stale = s3, current_etag, stale_etag

    def get_object(self, **kw):
        got = self._s3.get_object(**kw)
        if kw["Key"].endswith("latest.json") and got["ETag"] == self._current:
            got["ETag"] = self._stale
        return got

    def __getattr__(self, name):
        return getattr(self._s3, name)


@pytest.mark.parametrize("first", [True, False], ids=["IfNoneMatch", "IfMatch"])
@pytest.mark.parametrize("lost", [1, 100], ids=["first-answer-lost", "every-answer-lost"])
def test_a_lost_answer_to_the_latest_json_write_is_not_taken_for_a_lost_race(stack, tmp_path, tiny_model, first, lost):
    """The conditional PUT of latest.json is applied by the server but its answer is lost; botocore sends it again
    and the retry is refused (412), since latest.json already holds it. The write succeeded: latest.json names
    this upload, its folder stays whole, and the returned pointer chains the next upload."""
    s3 = s3_client(stack)
    prefix = f"checkpoints/test-lost-{uuid.uuid4().hex[:8]}"
    local = save_checkpoint(
        tmp_path / "local", model=tiny_model, tokenizer=None,
        resume=ResumeState(step=2, tokens_seen=64, optimizer={}, data_states=[]),
    )  # fmt: skip
    expected = read_latest(s3, stack.bucket, prefix)
    if not first:
        expected = upload_checkpoint(s3, stack.bucket, prefix, 1, local, expected=expected)
    with LoseResponses(s3, "PutObject", key_suffix="/latest.json", count=lost) as dropped:
        pointer = upload_checkpoint(s3, stack.bucket, prefix, 2, local, expected=expected)
    assert dropped.applied[0] == 200 and dropped.attempts >= 2  # applied, then sent again by botocore's retry
    assert read_latest(s3, stack.bucket, prefix) == pointer and pointer.ref.step == 2
    loaded = load_latest(s3, stack.bucket, prefix, tmp_path / "downloaded")
    assert _digests(loaded.hf_dir.parent) == _digests(local)
    assert upload_checkpoint(s3, stack.bucket, prefix, 3, local, expected=pointer).ref.step == 3


def _digests(directory) -> dict[str, str]:
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_lost_answer_trial_counts_the_named_checkpoint_by_content(stack, tmp_path, scenario):
    """The trial bench/reliability.py runs (kind latest_json): with a rival, the rival's checkpoint is named and
    ours removed; without one, ours is named. Either way the named checkpoint downloads byte for byte."""
    r = lost_latest_answer(stack, scenario=scenario, work=tmp_path)
    assert r.ok and r.lost == 0 and r.blocks_found == r.blocks_claimed > 0, r.to_dict()
    assert r.detail["server_status_of_lost_answers"][0] == (412 if scenario == "rival-wins" else 200)
    assert ("CheckpointConflictError" in r.error) == (scenario == "rival-wins")
