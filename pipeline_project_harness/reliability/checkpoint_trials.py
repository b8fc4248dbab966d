"""The write of `latest.json` whose answer is lost, as the tests and `bench/reliability.py` (kind `latest_json`) run it.

The trainer moves `latest.json` with a conditional PUT. Here the real S3 server applies that PUT and its answer is
lost (`lost_response.LoseResponses`), so botocore sends it again and the repeat is refused (412). A trial counts by
content hash, never by what `upload_checkpoint` returned: the checkpoint `latest.json` names afterwards is
downloaded and each of its files must match, byte for byte, the folder its writer saved; and no step folder that
nothing references may be left behind.

| scenario | before our write | answers lost | the right outcome |
|---|---|---|---|
| first-write | no latest.json (IfNoneMatch) | the first | ours is named |
| next-write | a previous checkpoint (IfMatch) | the first | ours is named |
| every-answer | a previous checkpoint | all (botocore gives up) | ours is named |
| rival-wins | a rival moves latest.json just before our PUT | the first (a 412) | the rival's is named, ours removed |
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

from pipeline_project.training.checkpoint.store import (
    ResumeState,
    load_latest,
    read_latest,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.errors import CheckpointConflictError
from pipeline_project.training.presets import build_model
from pipeline_project.training.trainer import seed_everything
from pipeline_project_harness.reliability.lost_response import LoseResponses
from pipeline_project_harness.reliability.trials import TrialResult

SCENARIOS = ("first-write", "next-write", "every-answer", "rival-wins")
SMALL_VOCAB = 512


def digests(directory: Path) -> dict[str, str]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _saved(work: Path, name: str, step: int, seed: int) -> Path:
    seed_everything(seed)  # another seed, other weights: each writer's files hash differently
    resume = ResumeState(step=step, tokens_seen=step * 64, optimizer={}, data_states=[{"writer": name}])
    return save_checkpoint(work / name, model=build_model("tiny", SMALL_VOCAB), tokenizer=None, resume=resume)


class _RivalMovesFirst:
    """Just before our first PUT of latest.json, a rival invocation (its own client) completes its upload."""

    def __init__(self, s3, rival_s3, bucket: str, prefix: str, local: Path, expected) -> None:
        self._s3, self._event, self.won = s3, "before-send.s3.PutObject", None
        self._go = lambda: upload_checkpoint(rival_s3, bucket, prefix, 3, local, expected=expected)

    def __enter__(self) -> _RivalMovesFirst:
        self._s3.meta.events.register_first(self._event, self._move)
        return self

    def __exit__(self, *exc) -> None:
        self._s3.meta.events.unregister(self._event, self._move)

    def _move(self, request, **_kwargs):
        if self.won is None and request.url.endswith("/latest.json"):
            self.won = self._go()


def lost_latest_answer(settings, *, scenario: str, seed: int = 0, work: Path | None = None) -> TrialResult:
    """One trial of `scenario` (see the module's table) against the S3 server of `settings`."""
    t0 = time.monotonic()
    s3, bucket = settings.s3_client(), settings.bucket
    prefix = f"checkpoints/rel-latest-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="latest-trial-", dir=work))
    expected = read_latest(s3, bucket, prefix)
    if scenario != "first-write":
        expected = upload_checkpoint(s3, bucket, prefix, 1, _saved(work, "base", 1, seed), expected=expected)
    ours = _saved(work, "ours", 2, seed + 1)
    rival = _saved(work, "rival", 3, seed + 2) if scenario == "rival-wins" else None
    count = 1_000 if scenario == "every-answer" else 1
    error, won = "", None
    race = _RivalMovesFirst(s3, settings.s3_client(), bucket, prefix, rival, expected) if rival else nullcontext()
    with race, LoseResponses(s3, "PutObject", key_suffix="/latest.json", count=count) as lost:
        try:
            won = upload_checkpoint(s3, bucket, prefix, 2, ours, expected=expected)
        except CheckpointConflictError as exc:
            error = f"{type(exc).__name__}: {exc}"
    winner = rival if rival else ours
    named = read_latest(s3, bucket, prefix)
    loaded = load_latest(s3, bucket, prefix, work / "named")
    want, got = digests(winner), digests(loaded.hf_dir.parent) if loaded else {}
    shutil.rmtree(work, ignore_errors=True)
    matching = sum(1 for k, v in want.items() if got.get(k) == v)
    folders = {o["Key"].split("/")[2] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")["Contents"]}
    live = {named.ref.uri.rstrip("/").rsplit("/", 1)[1]} | {f for f in folders if f.startswith("step-1-")}
    unreferenced = sorted(folders - live - {"latest.json"})
    outcome_right = (error != "") == bool(rival) and (won is None or won == named)
    if rival:
        outcome_right = outcome_right and race.won is not None and named == race.won
    return TrialResult(
        kind="latest_json_lost_answer",
        timing_s=0.0,
        victim=f"{scenario}: {len(lost.applied)} answer(s) lost",
        blocks_claimed=len(want),
        blocks_found=matching,
        lost=len(want) - matching,
        duplicated=0,
        recovery_s=None,
        ok=outcome_right and matching == len(want) and not unreferenced,
        attempts=lost.attempts,
        error=error[:300],
        seconds=time.monotonic() - t0,
        detail={
            "scenario": scenario,
            "named": named.ref.uri,
            "server_status_of_lost_answers": lost.applied,
            "unreferenced_folders": unreferenced,
            "files_compared": len(want),
        },
    )
