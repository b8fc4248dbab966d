import uuid

import dagster as dg
import pytest

from pipeline_project.defs.resources import build_resources
from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig


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
        checkpoints_prefix=f"it-{uid}/checkpoints/",
        topic=TopicConfig(name=f"it-{uid}-blocks", seq_len=64, message_bytes=16 * 1024),
    )


@pytest.fixture
def resources(stack, layout) -> dict:
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.dedup import DedupIndexResource

    res = build_resources(stack)
    res["layout"] = layout
    # a dedup index of this test only (a schema of its own), and the filters in process: a worker pool
    # costs seconds to start, and test_ingest_graph runs one
    res["dedup"] = DedupIndexResource(
        postgres_url=stack.postgres_url, schema_name=f"it_{layout.topic.name.split('-')[1]}"
    )
    res["cleaning"] = CleaningResource(workers=1)
    return res


@pytest.fixture
def s3(stack):
    return stack.s3_client()


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def pg_instance(stack):
    """A Dagster instance whose run, event and schedule storage is a fresh database on the stack's PostgreSQL,
    as the stack's own instance and deploy/dagster/dagster.yaml configure it."""
    import uuid

    import psycopg2

    name = f"dagster_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    url = stack.postgres_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1) + f"/{name}"
    with dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}}) as inst:
        yield inst
    with admin.cursor() as cur:
        cur.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.close()
