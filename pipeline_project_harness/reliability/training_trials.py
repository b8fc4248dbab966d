"""The trainer's kill trial: `kill -9` the out-of-process trainer mid-step, run it again, and check the checkpoint
lineage trained every batch once (against an undisturbed loader's batches and positions). Also the helpers the
MLflow outage trial shares: a small trainer job on the throw-away stack, its environment and its result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from pipeline_project.stack import Stack
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig
from pipeline_project_harness.reliability.faults import kafka_of
from pipeline_project_harness.reliability.invariants import write_seq_topic
from pipeline_project_harness.reliability.trials import REPO, TrialResult, unique_topic

# -- the trainer dies mid-step ---------------------------------------------------------------------------

TRAIN_SEQ_LEN = 32
TRAIN_BATCH = 2
# The `tiny` preset, narrowed (ModelPreset.overrides): its 129,280 x 64 embeddings make every checkpoint ~200 MB of
# weights and AdamW moments, which the test would spend most of its time writing to S3; at width 16 with tied
# embeddings it is ~25 MB. Still DeepseekV3 with MLA and routed experts.
TRAIN_MODEL_OVERRIDES = dict(
    hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_attention_heads=2, num_key_value_heads=2,
    q_lora_rank=8, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4, tie_word_embeddings=True,
)  # fmt: skip


def trainer_job(stack: Stack, topic: str, prefix: str, *, checkpoint_every: int, mlflow: bool = False) -> dict:
    """A `JobConfig` (as JSON) of the `tiny` preset on CPU that checkpoints every `checkpoint_every` steps."""
    settings = stack.settings()
    return {
        "train": {"preset": {"name": "tiny", "overrides": TRAIN_MODEL_OVERRIDES}, "lr": 3e-3, "warmup_steps": 2, "batch_size": TRAIN_BATCH,
                  "device": "cpu", "checkpoint_every": checkpoint_every, "seed": 0},
        "kafka": kafka_of(stack).model_dump(mode="json"),
        "topic": {"name": topic, "seq_len": TRAIN_SEQ_LEN},
        "s3_endpoint": settings.s3_endpoint,
        "bucket": settings.bucket,
        "checkpoint_prefix": prefix,
        "mlflow_tracking_uri": settings.mlflow_tracking_uri if mlflow else None,
        "log_model_to_mlflow": False,
        "loader_idle_timeout_s": 10,
        "system_metrics_interval_s": 1,
    }  # fmt: skip


def trainer_env(stack: Stack) -> dict[str, str]:
    # one quick attempt per MLflow call: the client's default retries for minutes before it gives up
    return {**os.environ, **stack.config.client_env(), "OMP_NUM_THREADS": "1",
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}  # fmt: skip


def trainer_cmd(config: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline_project.training.entrypoint", "--config", str(config)]


def trainer_result(stdout: str) -> dict:
    from pipeline_project.training.entrypoint import RESULT_PREFIX

    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert len(lines) == 1, f"the trainer printed no result: {stdout[-2000:]}"
    return json.loads(lines[0][len(RESULT_PREFIX) :])


def seed_training_topic(stack: Stack, n_blocks: int, *, blocks_per_message: int = 3) -> str:
    """A 2-partition topic of sequence blocks that carry the DeepSeek tokenizer's identity (the trainer checks it).
    3 blocks per message and 2 per batch: batch boundaries cut messages, so positions carry a block index."""
    from pipeline_project.streaming.tokenizer import load_tokenizer

    kafka = kafka_of(stack)
    topic = unique_topic("train")
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3, min_insync_replicas=2)
    write_seq_topic(
        kafka, topic, n_blocks, TRAIN_SEQ_LEN, blocks_per_message=blocks_per_message, tokenizer=load_tokenizer()
    )
    return topic


def reference_batches(stack: Stack, topic: str) -> tuple[list[tuple[int, ...]], list[dict[str, dict[str, int]]]]:
    """What an undisturbed trainer's loader delivers (same config as `run._build_loader`): the sequence numbers of
    every batch, and the position after each (index 0: before the first batch)."""
    loader = KafkaBlockLoader(
        LoaderConfig(kafka=kafka_of(stack), topic=topic, seq_len=TRAIN_SEQ_LEN, batch_size=TRAIN_BATCH, rank=0,
                     world_size=1, num_workers=1, mode="bounded", seed=0, idle_timeout_s=10)
    )  # fmt: skip
    batches, positions = [], [_position(loader.state_dict())]
    try:
        for batch in loader:
            batches.append(tuple(int(s) for s in batch.numpy()[:, 0]))
            positions.append(_position(loader.state_dict()))
    finally:
        loader.close()
    return batches, positions


def _position(state: dict) -> dict[str, dict[str, int]]:
    return {
        str(p): {"offset": int(c["offset"]), "block": int(c.get("block", 0))} for p, c in state["partitions"].items()
    }


def _checkpoint_state(s3, bucket: str, ref) -> dict:
    """The resume state a checkpoint holds: step, the optimizer's step count, the loader position."""
    import tempfile as tmp

    import torch

    with tmp.TemporaryDirectory() as d:
        key = ref.resume_uri.removeprefix(f"s3://{bucket}/") + "state.pt"
        s3.download_file(bucket, key, f"{d}/state.pt")
        state = torch.load(f"{d}/state.pt", map_location="cpu", weights_only=False)
    steps = {int(v["step"]) for v in state["optimizer"]["state"].values() if "step" in v}
    return {"step": state["step"], "optimizer_steps": sorted(steps), "position": _position(state["data_states"][0])}


def wait_for_checkpoint(s3, bucket: str, prefix: str, *, min_step: int, proc: subprocess.Popen, timeout: float = 300):
    from pipeline_project.training.checkpoint.store import read_latest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ref = read_latest(s3, bucket, prefix).ref
        if ref is not None and ref.step >= min_step:
            return ref
        assert proc.poll() is None, f"the trainer exited ({proc.returncode}) before checkpoint step {min_step}"
        time.sleep(0.2)
    raise TimeoutError(f"no checkpoint at step >= {min_step} under {prefix} within {timeout:g}s")


def trainer_kill(stack: Stack, workdir: Path, *, delay_s: float, n_blocks: int = 12, checkpoint_every: int = 2):
    """SIGKILL the trainer `delay_s` after its first mid-run checkpoint appeared in S3 (it is then inside the next
    step), then run it again. The second invocation must start at the checkpoint's step, data position and
    optimizer state, and train exactly the batches after it: none twice, none skipped."""
    from pipeline_project.training.checkpoint.store import read_latest

    t_start = time.monotonic()
    topic = seed_training_topic(stack, n_blocks)
    batches, positions = reference_batches(stack, topic)
    total = len(batches)
    settings = stack.settings()
    s3, bucket = settings.s3_client(), settings.bucket
    prefix = f"checkpoints/{topic}"
    config = workdir / f"job-{topic}.json"
    config.write_text(json.dumps(trainer_job(stack, topic, prefix, checkpoint_every=checkpoint_every)))

    log = workdir / f"trainer-{topic}-1.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(trainer_cmd(config), cwd=REPO, env=trainer_env(stack), stdout=out, stderr=out)
        try:
            wait_for_checkpoint(s3, bucket, prefix, min_step=checkpoint_every, proc=proc)
            time.sleep(delay_s)
            alive_at_kill = proc.poll() is None
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(30)
    at_kill = read_latest(s3, bucket, prefix).ref
    saved = _checkpoint_state(s3, bucket, at_kill)

    t_rerun = time.monotonic()
    second = subprocess.run(trainer_cmd(config), cwd=REPO, env=trainer_env(stack), capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert second.returncode == 0, f"the re-run failed: {second.stderr[-4000:]}"
    result = trainer_result(second.stdout)
    rerun_s = time.monotonic() - t_rerun
    final = _checkpoint_state(s3, bucket, read_latest(s3, bucket, prefix).ref)

    k = saved["step"]
    checks = {
        "checkpoint_position_is_after_its_steps": saved["position"] == positions[k],
        "checkpoint_optimizer_at_its_step": saved["optimizer_steps"] == [k],
        "resumed_from_the_checkpoint": result["resumed_from"] == at_kill.uri and result["start_step"] == k,
        "started_at_the_saved_position": result["start_position"] == saved["position"],
        "trained_the_rest_once": result["steps"] == total - k and result["end_step"] == total,
        "ended_where_an_undisturbed_run_ends": result["end_position"] == positions[total],
        "optimizer_continued": final["optimizer_steps"] == [total] and final["position"] == positions[total],
    }
    trained = [s for b in batches[:k] for s in b] + [s for b in batches[k : k + result["steps"]] for s in b]
    counts = Counter(trained)
    expected = [s for b in batches for s in b]
    return TrialResult(
        kind="trainer_kill", timing_s=delay_s, victim="trainer process", blocks_claimed=len(expected),
        blocks_found=len(set(trained) & set(expected)), lost=len(set(expected) - set(trained)),
        duplicated=sum(c - 1 for c in counts.values() if c > 1), recovery_s=rerun_s,
        ok=all(checks.values()) and alive_at_kill, attempts=2, seconds=time.monotonic() - t_start,
        detail={"checks": checks, "alive_at_kill": alive_at_kill, "checkpoint_step_at_kill": k, "batches": total,
                "rerun_steps": result["steps"], "topic": topic},
    )  # fmt: skip
