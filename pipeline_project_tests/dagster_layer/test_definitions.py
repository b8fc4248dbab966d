import sys

import dagster as dg


def test_definitions_load_with_the_four_assets_checks_and_sensors():
    from pipeline_project.definitions import defs

    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {
        "raw_text",
        "cleaned_shards",
        "token_blocks",
        "deepseek_checkpoint",
        "training_content_summary",
        "takedown_report",
    }
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("deepseek_checkpoint")).parent_keys == {dg.AssetKey("token_blocks")}
    assert graph.get(dg.AssetKey("token_blocks")).parent_keys == {dg.AssetKey("cleaned_shards")}
    specs = [graph.get_check_spec(k) for k in graph.asset_check_keys]
    checks = {c.name for c in specs}
    assert {
        "cleaned_counts_add_up",
        "cleaned_shards_readable",
        "topic_holds_claimed_blocks",
        "loss_is_finite",
        "checkpoint_reloads",
        "raw_objects_unchanged",
        "batch_not_failed",
    } <= checks
    blocking = {c.name for c in specs if c.blocking}
    assert {"checkpoint_reloads", "topic_holds_claimed_blocks", "cleaned_counts_add_up"} <= blocking
    sensors = {s.name for s in defs.sensors}
    assert sensors == {
        "raw_s3_sensor",
        "checkpoint_trigger_sensor",
        "ingest_automation_sensor",
        "failed_batch_sensor",
        "takedown_report_sensor",
    }


def test_code_location_imports_nothing_heavy():
    """Sensors run in the code server: loading definitions must not import torch or transformers."""
    import subprocess

    code = (
        "import sys; import pipeline_project.definitions; "
        "print(','.join(m for m in ('torch', 'transformers', 'mlflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_small_batch_is_cleaned_in_process_and_a_large_one_over_the_workers():
    from pipeline_project.defs.resources.cleaning import CleaningResource

    auto = CleaningResource(workers=3)
    assert auto.worker_count(1 << 20) == 1  # below pool_min_mb: starting workers costs more than the filters
    assert auto.worker_count(8 << 20) == 3 and auto.worker_count() == 3
    assert CleaningResource(workers=3, pool_min_mb=0).worker_count(10) == 3


def test_every_asset_declares_its_code_version():
    """Dagster marks an asset's materializations stale when its code_version changes: bump it with the logic."""
    from pipeline_project.definitions import defs

    graph = defs.resolve_asset_graph()
    missing = [k.to_user_string() for k in graph.get_all_asset_keys() if not graph.get(k).code_version]
    assert missing == []


def test_loading_the_code_location_and_running_pipes_prints_no_preview_warning():
    """The preview APIs the project uses knowingly (partitioned asset checks, the Pipes message reader that
    Dagster's own clients call) are silenced where they are used, so `scripts/demo.sh` prints none of them."""
    import subprocess

    code = (
        "import pipeline_project.definitions, pipeline_project.defs.resources.trainer, dagster as dg; "
        "dg.PipesTempFileMessageReader().expected_writer_count"
    )
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True)
    assert not [line for line in out.stderr.splitlines() if "PreviewWarning" in line or "BetaWarning" in line]
