"""GPU consumption vs loader delivery: can the loader's decode-and-batch path keep a GPU fed?

Two steps, on two machines (a GPU machine may have no Java, so no broker):

    # 1. on the local stack: record a segment of the token topic (synthetic blocks to a fresh topic if it is empty)
    .venv/bin/python bench/gpu_bench.py record            # -> bench/results/topic_segment.bin (<= 30 MB)
    # 2. on the GPU machine (copy the recording along; it is git-ignored)
    .venv/bin/python bench/gpu_bench.py run               # -> table on stdout, bench/results/gpu.json
    .venv/bin/python bench/gpu_bench.py run --device cpu --preset tiny --steps 3   # CPU smoke (< 2 min)
    # the sharded path: FSDP2 across the node's GPUs, bf16 parameters, fp32 gradient reduction
    .venv/bin/torchrun --standalone --nproc-per-node 8 bench/gpu_bench.py run --parallelism fsdp

`run` measures, in one process (or in each rank of a torchrun job, rank 0 reporting; tokens/s are all ranks'):
  a. GPU tokens/s: the project's `train()` loop on the preset (bf16 autocast on CUDA) fed from batches already in
     device memory, warm-up steps excluded, timed between `torch.cuda.synchronize()` calls;
  b. loader tokens/s on this machine's CPU: the recorded messages replayed through the loader's own
     `PartitionReader` (format.decode_blocks) and `BatchAssembler` (`topic_replay.py`), single-threaded;
  c. the ratio b / a (>= 1: one loader process per GPU keeps up);
  d. a loader-fed run: the same training fed by the replay through a background prefetch thread
     (`streaming/prefetch.py`, depth = the loader's prefetch), batches copied to the device as the loader does;
     reports the data-wait fraction (time `train()` blocked on the next batch / wall of the measured steps).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from pipeline_project.streaming.produce.request import ProduceRequest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from topic_replay import Record, cycle_batches, read_recording, time_decode, write_recording  # noqa: E402

RESULTS = REPO / "bench" / "results"
RECORDING = RESULTS / "topic_segment.bin"
MIB = 1024 * 1024


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# -- record (local stack) -------------------------------------------------------------------------------------


class _Tok:
    def __init__(self, info):
        self.name, self.hash = info.name, info.hash


def _topic_messages(kafka, topic: str) -> int:
    from confluent_kafka import TopicPartition

    md = kafka.make_admin().list_topics(timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return 0
    c = kafka.make_consumer()
    try:
        return sum(
            hi - lo for lo, hi in (c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in md.partitions)
        )
    finally:
        c.close()


def _produce_synthetic(kafka, tok, seq_len: int, mib: float, partitions: int) -> str:
    """Random token blocks (ids < vocab; the last block half padding) to a fresh bench topic, as the producer does."""
    from pipeline_project.streaming.kafka.format import PAD_TOKEN, max_blocks_per_message
    from pipeline_project.streaming.kafka.topics import ensure_topic
    from pipeline_project.streaming.produce.producer import produce_blocks
    from pipeline_project.streaming.produce.request import ProducerConfig

    topic = f"bench-gpu-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=partitions, replication_factor=3, min_insync_replicas=2)
    n_blocks = int(mib * MIB // (seq_len * 4))
    blocks = np.random.default_rng(0).integers(0, tok.vocab_size, size=(n_blocks, seq_len), dtype=np.uint32)
    blocks[-1, seq_len // 2 :] = PAD_TOKEN
    per_msg = max_blocks_per_message(seq_len)
    report = produce_blocks(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key=uuid.uuid4().hex,
            content_hash="synthetic",
            source="gpu-bench",
            seq_len=seq_len,
            tokenizer=_Tok(tok),
            config=ProducerConfig(statistics_interval_ms=0),
        ),
        (blocks[i : i + per_msg] for i in range(0, n_blocks, per_msg)),
    )
    log(f"produced {n_blocks} synthetic blocks ({report.bytes / MIB:.1f} MiB) to {topic}")
    return topic


def _read_segment(kafka, topic: str, max_bytes: int) -> tuple[list[Record], str, int]:
    """read_committed messages from each partition's start, round robin, until `max_bytes` of values."""
    from confluent_kafka import KafkaError, TopicPartition

    from pipeline_project.streaming.kafka.format import read_header
    from pipeline_project.streaming.load.preflight import describe_topic

    partitions, topic_id = describe_topic(kafka.make_admin(), topic, 30)
    c = kafka.make_consumer(overrides={"enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, -2) for p in partitions])  # -2: OFFSET_BEGINNING
    records: list[Record] = []
    total, seq_len, done, idle = 0, 0, set(), time.monotonic()
    try:
        while len(done) < len(partitions) and total < max_bytes and time.monotonic() - idle < 30:
            for m in c.consume(num_messages=64, timeout=1.0):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                        continue
                    raise RuntimeError(m.error().str())
                idle = time.monotonic()
                value, headers = m.value(), m.headers() or []
                size = len(value or b"")
                if total + size > max_bytes:
                    done.add(m.partition())
                    c.pause([TopicPartition(topic, m.partition())])
                    continue
                h = read_header(headers, topic=topic, partition=m.partition(), offset=m.offset())
                seq_len = seq_len or h.seq_len
                records.append(Record(m.partition(), m.offset(), value, list(headers)))
                total += size
    finally:
        c.close()
    records.sort(key=lambda r: (r.partition, r.offset))
    return records, topic_id, seq_len


def cmd_record(args) -> None:
    from pipeline_project.stack import Stack
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.tokenizer import load_tokenizer

    settings = Stack().settings()
    kafka = KafkaSettings.from_settings(settings)
    tok = load_tokenizer()
    topic, made = args.topic or settings.topic, None
    if _topic_messages(kafka, topic) == 0:
        log(f"topic {topic!r} is empty or missing: producing synthetic blocks to a fresh bench topic")
        topic = made = _produce_synthetic(kafka, tok, args.seq_len, args.max_mb * 0.97, args.partitions)
    try:
        records, topic_id, seq_len = _read_segment(kafka, topic, int(args.max_mb * MIB))
    finally:
        if made:
            kafka.make_admin().delete_topics([made, made + ".ledger"], operation_timeout=30)
    if not records:
        raise SystemExit(f"no messages read from {topic}")
    meta = {"topic": topic, "topic_id": topic_id, "seq_len": seq_len, "vocab_size": tok.vocab_size,
            "tokenizer": tok.name, "tokenizer_hash": tok.hash, "synthetic": made is not None,
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%S"), "messages": len(records)}  # fmt: skip
    size = write_recording(args.out, meta, records)
    log(f"wrote {args.out}: {len(records)} messages, {size / MIB:.1f} MiB, seq_len {seq_len}, topic {topic}")


# -- run (GPU machine, or CPU smoke) ------------------------------------------------------------------------------


def _train(cfg, batches, state, warmup: int) -> dict:
    """`train()` over `batches`; tokens/s and data-wait over the steps after `warmup`, between device syncs."""
    import torch

    from pipeline_project.training.trainer import train

    device = next(state.model.parameters()).device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    marks: dict[str, float] = {}
    waits: list[float] = []

    def on_step(m) -> None:
        if m.step == warmup:
            sync()
            marks["t0"] = time.perf_counter()
        elif m.step > warmup:
            waits.append(m.data_wait_s)
            marks["tokens"] = marks.get("tokens", 0) + m.tokens
            marks["loss"] = m.loss

    sync()
    start = time.perf_counter()
    result = train(cfg, batches, model=state.model, optimizer=state.optimizer, on_step=on_step)
    sync()
    end = time.perf_counter()
    t0 = marks.get("t0", start)
    wall = end - t0
    tokens = marks.get("tokens", result.tokens)
    return {"steps": result.steps, "measured_steps": len(waits), "tokens": tokens, "seconds": wall,
            "tokens_per_s": tokens / wall, "data_wait_s": sum(waits), "data_wait_fraction": sum(waits) / wall,
            "final_loss": result.final_loss, "total_seconds": end - start}  # fmt: skip


def _loader_fed(rec, batch_size: int, device, depth: int):
    """Replayed batches through the prefetch thread, moved to the device as the loader's __next__ does."""
    from pipeline_project.streaming.produce.prefetch import prefetch_batches

    pin = device.type == "cuda"
    for (batch,) in prefetch_batches(cycle_batches(rec, batch_size, pin_memory=pin), 1, depth):
        yield batch.tensor.to(device, non_blocking=pin) if pin else batch.tensor


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def cmd_run(args) -> None:
    import torch

    from pipeline_project.streaming.load.config import LoaderConfig
    from pipeline_project.training import distributed
    from pipeline_project.training.presets import ModelPreset, build_config, count_parameters
    from pipeline_project.training.resume import build_training_state
    from pipeline_project.training.trainer import TrainConfig

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (use --device cpu for the smoke run)")
    info = distributed.init_distributed()
    shard = args.parallelism == "fsdp" and info.enabled
    rec = read_recording(args.recording)
    seq_len = args.seq_len or rec.seq_len
    if seq_len != rec.seq_len:
        raise SystemExit(f"the recording holds seq_len {rec.seq_len} blocks; re-record with --seq-len {seq_len}")
    batch_size = args.batch_size or (16 if args.device == "cuda" else 1)
    vocab = int(rec.meta["vocab_size"])
    load_start = os.getloadavg()
    device = torch.device(args.device, info.local_rank) if args.device == "cuda" else torch.device("cpu")
    warmup = min(args.warmup, args.steps - 1)
    cfg = TrainConfig(preset=ModelPreset(name=args.preset), batch_size=batch_size,
                      max_steps=args.steps, warmup_steps=10, lr=args.lr, device=args.device, log_every=1,
                      checkpoint_every=None, parallelism=args.parallelism)  # fmt: skip
    log(f"recording: {len(rec.records)} messages, {rec.value_bytes() / MIB:.1f} MiB, seq_len {seq_len}")

    # a. GPU consumption: batches already on the device (distinct rows of the recording), cycled
    blocks = [b.tensor.to(device) for _, b in zip(range(8), cycle_batches(rec, batch_size), strict=False)]
    in_memory = (blocks[i % len(blocks)] for i in range(args.steps))
    state = build_training_state(cfg, vocab, device, shard=shard)
    gpu = _train(cfg, in_memory, state, warmup)
    log(f"a. {args.preset} on {device}: {gpu['tokens_per_s']:,.0f} tokens/s")
    del state
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # b. loader decode-and-batch on this CPU
    replay_s = args.replay_seconds if args.replay_seconds is not None else (5.0 if device.type == "cuda" else 2.0)
    decode = time_decode(rec, batch_size, replay_s, pin_memory=device.type == "cuda")
    log(f"b. loader decode-and-batch: {decode['tokens_per_s']:,.0f} tokens/s over {decode['passes']} passes")

    # d. loader-fed run
    state = build_training_state(cfg, vocab, device, shard=shard)
    fed_iter = _loader_fed(rec, batch_size, device, LoaderConfig.model_fields["prefetch"].default)
    try:
        fed = _train(cfg, fed_iter, state, warmup)
    finally:
        fed_iter.close()
    log(f"d. loader-fed: {fed['tokens_per_s']:,.0f} tokens/s, data-wait {100 * fed['data_wait_fraction']:.2f}%")

    ratio = decode["tokens_per_s"] / gpu["tokens_per_s"]
    load_end = os.getloadavg()
    result = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "smoke": device.type != "cuda",
        "preset": args.preset,
        "parameters": count_parameters(build_config(args.preset, vocab))["total"],
        "dtype": _dtype(device, shard),
        "parallelism": args.parallelism if info.enabled else "one process",
        "world_size": info.world_size,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "steps": args.steps,
        "warmup_steps_excluded": warmup,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "recording": {**rec.meta, "bytes": rec.value_bytes(), "file": str(args.recording)},
        "gpu_in_memory": gpu,
        "loader_decode": decode,
        "loader_over_gpu": ratio,
        "loader_fed": fed,
        "machine": platform.platform(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    distributed.destroy()
    if not info.is_main:
        return
    print_table(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {out}")


def _dtype(device, shard: bool) -> str:
    if device.type != "cuda":
        return "fp32"
    return "bf16 params, fp32 reduce (FSDP2)" if shard else "bf16 autocast"


def print_table(r: dict) -> None:
    la = (
        "/".join(f"{x:.1f}" for x in r["load_average_start"])
        + " -> "
        + "/".join(f"{x:.1f}" for x in r["load_average_end"])
    )
    print(f"\n{r['preset']} ({r['parameters'] / 1e6:.1f}M params) on {r['device']} ({r['device_name']}), "
          f"{r['world_size']} x {r['parallelism']}, {r['dtype']}, batch {r['batch_size']} x {r['seq_len']}, {r['steps']} steps "
          f"({r['warmup_steps_excluded']} warm-up excluded), {r['cpus']} CPUs, load average {la}\n")  # fmt: skip
    print("| measure | tokens/s | notes |")
    print("|---|---|---|")
    g, d, f = r["gpu_in_memory"], r["loader_decode"], r["loader_fed"]
    print(f"| a. training from in-memory batches | {g['tokens_per_s']:,.0f} | {g['measured_steps']} steps, "
          f"loss {g['final_loss']:.3f} |")  # fmt: skip
    print(f"| b. loader decode-and-batch (1 CPU thread, replay) | {d['tokens_per_s']:,.0f} | {d['passes']} passes, "
          f"{d['batches']} batches |")  # fmt: skip
    print(f"| c. ratio b / a | {r['loader_over_gpu']:.2f}x | >= 1: one loader process keeps the device fed |")
    print(f"| d. training fed by the replayed loader | {f['tokens_per_s']:,.0f} | data-wait "
          f"{100 * f['data_wait_fraction']:.2f}% of {f['seconds']:.2f} s |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("record", help="record a topic segment on the local stack")
    rp.add_argument("--topic", default=None, help="default: the configured token topic (Settings.topic)")
    rp.add_argument("--seq-len", type=int, default=512, help="synthetic blocks only (TrainConfig's default)")
    rp.add_argument("--max-mb", type=float, default=24.0)
    rp.add_argument("--partitions", type=int, default=8)
    rp.add_argument("--out", default=str(RECORDING))
    rr = sub.add_parser("run", help="GPU tokens/s, loader replay tokens/s, their ratio, loader-fed data-wait")
    rr.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    rr.add_argument("--preset", choices=["small", "tiny"], default="small")
    rr.add_argument("--steps", type=int, default=50)
    rr.add_argument("--warmup", type=int, default=10, help="steps excluded from the rates (at most steps - 1)")
    rr.add_argument("--batch-size", type=int, default=None, help="default 16 on cuda, 1 on cpu")
    rr.add_argument("--seq-len", type=int, default=None, help="default (and only choice): the recording's")
    rr.add_argument("--lr", type=float, default=3e-4)
    rr.add_argument("--parallelism", choices=["ddp", "fsdp"], default="ddp", help="under torchrun: DDP or FSDP2")
    rr.add_argument("--replay-seconds", type=float, default=None, help="decode measurement (default 5 s; cpu 2 s)")
    rr.add_argument("--recording", default=str(RECORDING))
    rr.add_argument("--out", default=str(RESULTS / "gpu.json"))
    args = ap.parse_args(argv)
    if args.cmd == "run" and args.steps < 2:
        ap.error("--steps must be >= 2 (one warm-up step is excluded)")
    cmd_record(args) if args.cmd == "record" else cmd_run(args)


if __name__ == "__main__":
    main()
