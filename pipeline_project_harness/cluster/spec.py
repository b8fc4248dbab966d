"""The test cluster's spec: prefix `ppt`, subnet 10.78.0.0/24, state under .cluster/pytest-<prefix>, never the
developer's `pp` cluster nor the shared loopback stack. `PP_TEST_CLUSTER_PREFIX` and `PP_TEST_CLUSTER_SUBNET` pick
another, so that two sessions can run cluster tests side by side."""

from __future__ import annotations

import os

from pipeline_project.cluster import ClusterSpec
from pipeline_project.stack.config import REPO_ROOT

_PREFIX = os.environ.get("PP_TEST_CLUSTER_PREFIX", "ppt")
SPEC = ClusterSpec(
    root=REPO_ROOT / ".cluster" / f"pytest-{_PREFIX}",
    prefix=_PREFIX,
    subnet=os.environ.get("PP_TEST_CLUSTER_SUBNET", "10.78.0.0/24"),
)
CLI_OPTS = ["cluster", "--dir", str(SPEC.root), "--prefix", SPEC.prefix, "--subnet", SPEC.subnet]


def fresh_cluster(name: str, prefix: str, subnet: str):
    """A benchmark's own cluster under .cluster/<name>: whatever an interrupted run left is wiped, then it is up."""
    from pipeline_project.cluster import Cluster

    cluster = Cluster(ClusterSpec(root=REPO_ROOT / ".cluster" / name, prefix=prefix, subnet=subnet))
    cluster.down(wipe=True)
    cluster.up(timeout=300)
    return cluster
