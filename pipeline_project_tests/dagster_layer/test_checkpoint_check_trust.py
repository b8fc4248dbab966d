"""The blocking `checkpoint_reloads` check runs in a process that holds every secret: a checkpoint URI outside the
trainer's own lineage (another run, another bucket, a climbing path) fails the check with one line and downloads
nothing; the real S3 server of the stack answers the check's client."""

import tempfile

import dagster as dg
import pytest
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.assets.checkpoint import checkpoint_reloads
from pipeline_project.defs.resources.trainer import TrainerResource

pytestmark = pytest.mark.stack


@pytest.mark.parametrize(
    "uri",
    [
        "s3://{bucket}/{prefix}other/step-1-ab12/",
        "s3://elsewhere/{prefix}it/step-1-ab12/",
        "s3://{bucket}/{prefix}it/step-1-ab12/../../../",
        "s3://{bucket}/{prefix}it/",
    ],
)
def test_a_checkpoint_uri_outside_the_lineage_fails_the_check(stack, layout, uri, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    uri = uri.format(bucket=layout.bucket, prefix=layout.checkpoints_prefix)
    instance = dg.DagsterInstance.ephemeral()
    instance.report_runless_asset_event(
        dg.AssetMaterialization("deepseek_checkpoint", metadata={"checkpoint_uri": uri, "steps": 3})
    )
    s3 = S3Resource(endpoint_url=stack.s3_endpoint, aws_access_key_id=stack.s3_access_key,
                    aws_secret_access_key=stack.s3_secret_key)  # fmt: skip
    context = dg.build_asset_check_context(
        instance=instance, resources={"s3": s3, "layout": layout, "trainer": TrainerResource(run_name="it")}
    )
    result = checkpoint_reloads(context)
    assert not result.passed
    error = result.metadata["error"].value
    assert "is not a step folder" in error and "\n" not in error
    assert list(tmp_path.iterdir()) == []  # no temp dir was even made
