from __future__ import annotations

import math

import pytest
import torch

from pipeline_project.training.checkpoint.store import save_checkpoint
from pipeline_project.training.resume import build_training_state, make_resume_state
from pipeline_project.training.trainer import StepMetrics, build_optimizer, lr_at, train
from pipeline_project_tests.training.helpers import SMALL_VOCAB, make_batches, tiny_config


def test_lr_schedule_warmup_cosine_floor():
    cfg = tiny_config(lr=1e-3, min_lr=1e-4, warmup_steps=10, decay_steps=110)
    lrs = [lr_at(s, cfg) for s in range(200)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:110], lrs[11:111]))
    assert lrs[60] == pytest.approx(5.5e-4)
    assert lrs[110] == lrs[199] == pytest.approx(1e-4)


def test_loss_decreases_on_a_repeated_batch(tiny_model):
    cfg = tiny_config(max_steps=12)
    batch = make_batches(1)[0]
    metrics: list[StepMetrics] = []
    result = train(
        cfg, [batch] * 50, model=tiny_model, optimizer=build_optimizer(tiny_model, cfg), on_step=metrics.append
    )
    assert result.stop_reason == "max_steps" and result.steps == 12 and result.end_step == 12
    assert result.losses[-1] < result.losses[0] - 1.0, result.losses
    assert result.tokens == 12 * batch.numel()
    assert [m.step for m in metrics] == list(range(1, 13))
    assert all(math.isfinite(m.loss) and 0.0 <= m.data_wait_fraction <= 1.0 for m in metrics)
    assert metrics[0].lr == pytest.approx(cfg.lr / cfg.warmup_steps)


def test_stops_when_data_ends_and_reports_metrics(tiny_model):
    cfg = tiny_config(log_every=2)
    consumed = []

    def batches():
        for i, batch in enumerate(make_batches(5)):
            consumed.append(i)
            yield batch

    metrics: list[StepMetrics] = []
    result = train(
        cfg,
        batches(),
        model=tiny_model,
        optimizer=build_optimizer(tiny_model, cfg),
        start_step=7,
        on_step=metrics.append,
        lag_fn=lambda: 42,
        data_state_fn=lambda: len(consumed),
    )
    assert result.stop_reason == "data_exhausted"
    assert (result.start_step, result.end_step, result.steps) == (7, 12, 5)
    assert result.data_state == 5
    assert [m.step for m in metrics] == [8, 10, 12]
    assert all(m.consumer_lag == 42 for m in metrics)
    flat = metrics[-1].as_metrics()
    assert {
        "loss",
        "lr",
        "tokens_per_s",
        "data_wait_fraction",
        "consumer_lag",
        "expert_load/max_violation",
        "expert_load/layer1/e0",
    } <= set(flat)


def test_checkpoints_inside_the_loop(tiny_model):
    cfg = tiny_config(max_steps=5, checkpoint_every=2)
    saved = []
    train(
        cfg,
        make_batches(5),
        model=tiny_model,
        optimizer=build_optimizer(tiny_model, cfg),
        data_state_fn=lambda: "pos",
        on_checkpoint=lambda step, data: saved.append((step, data)),
    )
    assert saved == [(2, "pos"), (4, "pos")]


def test_resumed_run_matches_uninterrupted_run(tmp_path):
    cfg = tiny_config()
    batches = make_batches(8)
    device = torch.device("cpu")

    full = build_training_state(cfg, SMALL_VOCAB, device)
    uninterrupted = train(cfg, batches, model=full.model, optimizer=full.optimizer)

    first = build_training_state(cfg, SMALL_VOCAB, device)
    part1 = train(
        cfg.model_copy(update={"max_steps": 3}),
        batches,
        model=first.model,
        optimizer=first.optimizer,
        data_state_fn=lambda: {"next_batch": 3},
    )
    save_checkpoint(
        tmp_path,
        model=first.model,
        tokenizer=None,
        resume=make_resume_state(first, part1.end_step, part1.tokens, [part1.data_state]),
    )
    del first

    resumed = build_training_state(cfg, SMALL_VOCAB, device, checkpoint_dir=tmp_path)
    assert (resumed.step, resumed.data_states) == (3, [{"next_batch": 3}])
    part2 = train(
        cfg,
        batches[resumed.data_states[0]["next_batch"] :],
        model=resumed.model,
        optimizer=resumed.optimizer,
        start_step=resumed.step,
    )

    assert part2.end_step == uninterrupted.end_step == 8
    assert part1.losses + part2.losses == pytest.approx(uninterrupted.losses, rel=1e-6, abs=1e-6)
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
