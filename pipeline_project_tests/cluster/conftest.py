"""One namespace cluster for the whole session, shared by every module of this folder.

Its own cluster (prefix `ppt`, subnet 10.78.0.0/24, state under .cluster/pytest), never the developer's `pp` one
nor the shared loopback stack. `PP_TEST_CLUSTER_PREFIX` and `PP_TEST_CLUSTER_SUBNET` pick another, so that two
sessions can run cluster tests side by side. `test_down_leaves_no_namespace_link_or_process` takes it down, so it runs last.
"""

from __future__ import annotations

import time

import pytest

from pipeline_project.cluster import Cluster
from pipeline_project_harness.cluster.spec import SPEC

LAST = "test_down_leaves_no_namespace_link_or_process"


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.name == LAST)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def cluster():
    c = Cluster(SPEC)
    c.down(wipe=True)  # whatever an interrupted session left
    started = time.monotonic()
    c.up(timeout=240)
    print(f"\ncluster up: {time.monotonic() - started:.0f} s")
    try:
        yield c
    finally:
        c.down(wipe=True)
