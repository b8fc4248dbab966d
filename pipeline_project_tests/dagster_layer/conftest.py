import uuid

import dagster as dg
import pytest

from pipeline_project.resources import build_resources
from pipeline_project.resources.layout import PipelineLayout


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def layout(uid) -> PipelineLayout:
    """Prefixes and topic of this test only, so tests never see each other's data or dedup index."""
    return PipelineLayout(
        raw_prefix=f"it-{uid}/raw/",
        shards_prefix=f"it-{uid}/shards/",
        exclusions_prefix=f"it-{uid}/exclusions/",
        dedup_prefix=f"it-{uid}/dedup/",
        checkpoints_prefix=f"it-{uid}/checkpoints/",
        topic=f"it-{uid}-blocks",
        seq_len=64,
        message_bytes=16 * 1024,
    )


@pytest.fixture
def resources(stack, layout) -> dict:
    res = build_resources(stack)
    res["layout"] = layout
    return res


@pytest.fixture
def s3(stack):
    return stack.s3_client()


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst
