"""Training-loop throughput on this machine: tokens/s and data-wait of `train()` fed from in-memory tensors.

    .venv/bin/python bench/training_bench.py [--steps 20] [--presets tiny,small] [--seq-len 128] [--batch 4]

Prints a markdown table and writes bench/results/training.json. On a CPU-only machine this measures the
loop's overhead and the CPU rate; the GPU figure (small preset, bf16) needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from pipeline_project.streaming.tokenizer import load_tokenizer
from pipeline_project.training.devices import resolve_device
from pipeline_project.training.presets import ModelPreset, build_config, count_parameters
from pipeline_project.training.resume import build_training_state
from pipeline_project.training.trainer import StepMetrics, TrainConfig, train


def measure(preset: str, steps: int, batch: int, seq_len: int, vocab: int) -> dict:
    cfg = TrainConfig(
        preset=ModelPreset(name=preset),
        batch_size=batch,
        max_steps=steps,
        warmup_steps=2,
        device="auto",
    )
    device = resolve_device(cfg)
    state = build_training_state(cfg, vocab, device)
    batches = [torch.randint(0, vocab, (batch, seq_len)) for _ in range(steps)]
    metrics: list[StepMetrics] = []
    t0 = time.perf_counter()
    train(cfg, batches, model=state.model, optimizer=state.optimizer, on_step=metrics.append)
    wall = time.perf_counter() - t0
    steady = metrics[2:] or metrics  # skip warm-up steps (allocations, first-touch)
    step_time = sum(m.step_time_s for m in steady) / len(steady)
    return {
        "preset": preset,
        "parameters": count_parameters(build_config(preset, vocab))["total"],
        "device": str(device),
        "batch": batch,
        "seq_len": seq_len,
        "steps": steps,
        "tokens_per_s": batch * seq_len / step_time,
        "step_time_s": step_time,
        "data_wait_fraction": sum(m.data_wait_fraction for m in steady) / len(steady),
        "final_loss": metrics[-1].loss,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()
    vocab = load_tokenizer().vocab_size
    rows = [measure(p, args.steps, args.batch, args.seq_len, vocab) for p in args.presets.split(",")]
    print("| preset | params | device | batch x seq | tokens/s | step (s) | data-wait | loss after |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['preset']} | {r['parameters'] / 1e6:.1f}M | {r['device']} | {r['batch']}x{r['seq_len']} | "
            f"{r['tokens_per_s']:,.0f} | {r['step_time_s']:.3f} | {100 * r['data_wait_fraction']:.3f}% | "
            f"{r['final_loss']:.3f} |"
        )
    out = Path(__file__).parent / "results" / "training.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": torch.get_num_threads(),
                "cuda": torch.cuda.is_available(),
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
