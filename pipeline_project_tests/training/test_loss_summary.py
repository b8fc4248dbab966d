"""What a run reports about its loss is the mean of its last steps and its change, never one step's value alone."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch

from pipeline_project.training.job import TrainJobResult
from pipeline_project.training.loss_summary import LOSS_WINDOW, from_metrics, summarize_losses
from pipeline_project.training.reporting import loss_curve_markdown, materialization_metadata
from pipeline_project.training.tracking.callback import Progress

# the demo's curve: falling from ~12 to ~6.5, then one noisy last step (it printed "final loss 11.997")
FALLING = [12.0 - 0.1 * i for i in range(57)] + [6.47, 6.9, 11.997]


def _result(**fields) -> TrainJobResult:
    base = dict(
        status="trained", message="m", steps=len(FALLING), start_step=0, end_step=len(FALLING), tokens=64,
        final_loss=FALLING[-1], offsets_consumed={}, start_position={}, end_position={}, checkpoint_uri=None,
        hf_uri=None, resumed_from=None, mlflow_run_id=None, mlflow_run_url=None, mlflow_model_uri=None,
        world_size=1, device="cpu", tokens_per_s=None, data_wait_fraction=None, stop_reason="data_exhausted",
        wall_s=1.0,
    )  # fmt: skip
    return TrainJobResult(**{**base, **fields})


def test_the_summary_is_the_mean_of_the_last_steps_and_its_change_from_the_first():
    summary = summarize_losses(FALLING)
    assert summary.window == LOSS_WINDOW == 20 and summary.steps == 60
    assert summary.last_step == 11.997
    assert summary.smoothed == pytest.approx(sum(FALLING[-20:]) / 20)
    assert summary.first == pytest.approx(sum(FALLING[:20]) / 20)
    assert summary.change == pytest.approx(summary.smoothed - summary.first) and summary.change < -3
    assert summary.smoothed < 7.7 < summary.last_step  # one noisy step does not decide what the run did


def test_short_runs_use_every_step_and_no_steps_give_no_summary():
    one = summarize_losses([5.0])
    assert (one.window, one.smoothed, one.first, one.change) == (1, 5.0, 5.0, 0.0)
    five = summarize_losses([5.0, 4.0, 3.0, 2.0, 1.0])
    assert five.window == 5 and five.smoothed == five.first == 3.0  # the two windows overlap wholly
    assert summarize_losses([]) is None


def test_the_result_and_its_materialization_carry_the_summary():
    result = _result(loss=summarize_losses(FALLING), loss_curve_url="http://m/curve.png")
    assert TrainJobResult.model_validate_json(result.model_dump_json()).loss == result.loss
    metadata = materialization_metadata(result)
    assert metadata["loss_smoothed"] == pytest.approx(result.loss.smoothed)
    assert metadata["loss_change"] == pytest.approx(result.loss.change) and metadata["loss_window"] == 20
    assert metadata["loss_last_step"] == metadata["final_loss"] == 11.997
    assert from_metrics(metadata) == result.loss.model_copy(update={"steps": len(FALLING)})
    figures = loss_curve_markdown(result)
    assert "final loss" not in figures and f"{result.loss.smoothed:.4f}" in figures and "last 20 steps" in figures


def test_a_result_without_steps_has_no_summary_in_its_metadata():
    metadata = materialization_metadata(_result(steps=0, final_loss=None))
    assert not any(key.startswith("loss_") for key in metadata)
    assert from_metrics(metadata) is None


def test_a_checkpoint_meta_gets_the_summary_of_the_logged_steps_up_to_it_in_plain_values():
    job = SimpleNamespace(train=SimpleNamespace(max_steps=None))
    progress = Progress(inv=SimpleNamespace(job=job), state=None)
    assert progress.loss_upto(10) is None  # other ranks, and before the first step
    progress.metrics = [SimpleNamespace(step=i + 1, loss=loss) for i, loss in enumerate(FALLING)]
    meta = progress.loss_upto(25)
    assert meta == summarize_losses(FALLING[:25]).model_dump()
    buffer = io.BytesIO()
    torch.save({"meta": {"loss": meta}}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["meta"]["loss"] == meta  # the resume state's loader reads it
    summary = summarize_losses(FALLING)
    assert progress.loss_tags(60) == {  # the checkpoint's model version in MLflow's registry
        "loss_smoothed": f"{summary.smoothed:.4f}",
        "loss_change": f"{summary.change:+.4f}",
        "loss_window": "20",
    }
