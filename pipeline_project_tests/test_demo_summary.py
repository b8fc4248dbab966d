"""The demo's closing summary adds up the materialized batches of every asset, and says what training did to the
loss over its last steps, not at one step."""

import dagster as dg

from pipeline_project.demo.runner import summarize
from pipeline_project.settings import Settings
from pipeline_project.training.loss_summary import summarize_losses


def test_summary_totals_come_from_each_assets_latest_materialization():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batches", ["b1", "b2"])
        for batch, kept, blocks in (("b1", 5, 3), ("b2", 7, 4)):
            meta = {"documents_in": kept + 2, "kept": kept, "dropped": 1, "quarantined": 1}
            instance.report_runless_asset_event(
                dg.AssetMaterialization("cleaned_shards", partition=batch, metadata=meta)
            )
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    "token_blocks",
                    partition=batch,
                    metadata={
                        "blocks": blocks,
                        "tokens": blocks * 64,
                        "fim_docs": 1,
                        "decontaminated": kept - 4,
                        "decontaminated_humaneval": kept - 4,
                        "domains": {
                            "en_web": {"docs": kept - 1, "blocks": blocks - 1, "tokens": (blocks - 1) * 64},
                            "code": {"docs": 1, "blocks": 1, "tokens": 64},
                        },
                    },
                )
            )
        table = summarize(instance, Settings(), ["b1", "b2"], {"steps": 5})
        rows = dict(zip(table.columns[0]._cells, table.columns[1]._cells))
    assert rows["retracted blocks passed over"] == rows["takedown requests"] == "0"  # zero when none, said all the same
    assert rows["kept"] == "12" and rows["documents in"] == "16"
    assert rows["blocks in Kafka"] == "7" and rows["tokens in Kafka"] == "448"
    assert rows["training steps"] == "5"
    assert rows["FIM documents"] == "2" and rows["decontaminated"] == "4 (humaneval 4)"
    assert rows["kept en_web"] == "10 documents, 320 tokens" and rows["kept code"] == "2 documents, 128 tokens"


def _rows(ckpt_meta: dict) -> dict:
    with dg.instance_for_test() as instance:
        table = summarize(instance, Settings(), [], ckpt_meta)
    return dict(zip(table.columns[0]._cells, table.columns[1]._cells))


def test_the_summary_gives_the_mean_of_the_last_steps_and_the_change_not_the_last_step():
    losses = [12.0 - 0.1 * i for i in range(57)] + [6.47, 6.9, 11.997]  # the demo's noisy last step
    summary = summarize_losses(losses)
    rows = _rows({"steps": 60, "final_loss": 11.997, **summary.as_metrics()})
    assert "final loss" not in rows
    assert rows["training loss"] == f"{summary.smoothed:.4f} (mean of the last 20 steps; last step 11.9970)"
    assert rows["loss change"].startswith(f"{summary.first:.4f} \u2192 {summary.smoothed:.4f} ({summary.change:+.4f})")
    assert summary.change < -3


def test_a_run_without_a_loss_summary_shows_none():
    rows = _rows({"steps": 0})
    assert rows["training loss"] == rows["loss change"] == "-"


def test_the_summary_shows_the_retracted_blocks_the_run_passed_over():
    assert _rows({"steps": 5, "retracted_blocks": 7})["retracted blocks passed over"] == "7"


def test_the_summary_counts_the_takedown_requests_the_instance_lists():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("takedown_requests", ["gdpr-1", "optout-2"])
        table = summarize(instance, Settings(), [], {"steps": 0})
        rows = dict(zip(table.columns[0]._cells, table.columns[1]._cells))
    assert rows["takedown requests"] == "2"
