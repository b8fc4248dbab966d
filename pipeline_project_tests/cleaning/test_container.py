"""The filter pool is sized from the container's cgroup (CPU quota, memory limit), not the node's cores:
fake cgroup v2 and v1 trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_project.common.container import cpu_quota, memory_limit, usable_workers

GIB = 1 << 30


def _v2(
    tmp_path: Path, cpu_max: str | None, memory_max: str | None, own: str = "/kubepods/pod1/c1"
) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    d = root / own.lstrip("/")
    d.mkdir(parents=True)
    if cpu_max is not None:
        (d / "cpu.max").write_text(cpu_max + "\n")
    if memory_max is not None:
        (d / "memory.max").write_text(memory_max + "\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


def _v1(tmp_path: Path, quota: int, period: int, memory: int) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for mount, files in (
        ("cpu,cpuacct", {"cpu.cfs_quota_us": quota, "cpu.cfs_period_us": period}),
        ("memory", {"memory.limit_in_bytes": memory}),
    ):
        d = root / mount  # a v1 container sees its own cgroup at the mount's root
        d.mkdir(parents=True)
        for name, value in files.items():
            (d / name).write_text(f"{value}\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("12:memory:/kubepods/pod1\n4:cpu,cpuacct:/kubepods/pod1\n")
    return root, proc


def test_a_two_cpu_pod_on_a_96_core_node_gets_two_workers(tmp_path):
    root, proc = _v2(tmp_path, "200000 100000", "max")
    assert cpu_quota(root, proc) == 2.0
    assert usable_workers(GIB, root, proc, affinity=96) == 2


@pytest.mark.parametrize(("cpu_max", "expected"), [("150000 100000", 2), ("50000 100000", 1), ("max 100000", 96)])
def test_fractional_and_absent_quotas(tmp_path, cpu_max, expected):
    root, proc = _v2(tmp_path, cpu_max, None)
    assert usable_workers(GIB, root, proc, affinity=96) == expected


def test_the_memory_limit_caps_the_workers(tmp_path):
    root, proc = _v2(tmp_path, "800000 100000", str(3 * GIB))
    assert memory_limit(root, proc) == 3 * GIB
    assert usable_workers(GIB, root, proc, affinity=96) == 3
    assert usable_workers(8 * GIB, root, proc, affinity=96) == 1  # never fewer than one


def test_cgroup_v1_quota_and_memory(tmp_path):
    root, proc = _v1(tmp_path, quota=400000, period=100000, memory=16 * GIB)
    assert cpu_quota(root, proc) == 4.0
    assert usable_workers(2 * GIB, root, proc, affinity=96) == 4
    root2, proc2 = _v1(tmp_path / "unlimited", quota=-1, period=100000, memory=(1 << 63) - 4096)
    assert (cpu_quota(root2, proc2), memory_limit(root2, proc2)) == (None, None)
    assert usable_workers(GIB, root2, proc2, affinity=8) == 8


def test_no_cgroup_files_means_the_affinity_alone(tmp_path):
    assert usable_workers(GIB, tmp_path / "none", tmp_path / "none", affinity=6) == 6
