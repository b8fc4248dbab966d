"""What the container lets this process use: CPUs by the cgroup CPU quota, memory by the cgroup limit.

A pod limited to 2 CPUs on a 96-core node still sees 96 cores in `sched_getaffinity`; the quota is in
`cpu.max` (cgroup v2: "QUOTA PERIOD" or "max PERIOD") or `cpu.cfs_quota_us` / `cpu.cfs_period_us` (v1). The memory
limit is `memory.max` (v2) or `memory.limit_in_bytes` (v1). The process's own cgroup comes from
`/proc/self/cgroup`; where its directory is not mounted (a v1 host shows the mount's root), the root is read.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
_V1_UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge page-aligned number


def _own_paths(proc_self_cgroup: Path) -> dict[str, str]:
    """controller ("" for v2's unified hierarchy) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _candidates(root: Path, mount: str, own: str | None) -> list[Path]:
    base = root / mount if mount else root
    dirs = [base / own.lstrip("/")] if own and own != "/" else []
    return [*dirs, base]


def _read(dirs: list[Path], name: str) -> str | None:
    for d in dirs:
        try:
            return (d / name).read_text().strip()
        except OSError:
            continue
    return None


def cpu_quota(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> float | None:
    """CPUs the cgroup quota allows (2.5 for "250000 100000"); None when there is no quota."""
    own = _own_paths(proc_self_cgroup)
    v2 = _read(_candidates(root, "", own.get("")), "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return None if quota == "max" else int(quota) / int(period or 100000)
    v1_dirs = _candidates(root, "cpu,cpuacct", own.get("cpu")) + _candidates(root, "cpu", own.get("cpu"))
    quota, period = _read(v1_dirs, "cpu.cfs_quota_us"), _read(v1_dirs, "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0:
        return None
    return int(quota) / int(period)


def memory_limit(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> int | None:
    """Bytes the cgroup may use; None when unlimited."""
    own = _own_paths(proc_self_cgroup)
    v2 = _read(_candidates(root, "", own.get("")), "memory.max")
    if v2 is not None:
        return None if v2 == "max" else int(v2)
    v1 = _read(_candidates(root, "memory", own.get("memory")), "memory.limit_in_bytes")
    if v1 is None or int(v1) >= _V1_UNLIMITED:
        return None
    return int(v1)


def affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def usable_workers(
    memory_per_worker: int,
    root: Path = CGROUP_ROOT,
    proc_self_cgroup: Path = PROC_SELF_CGROUP,
    affinity: int | None = None,
) -> int:
    """Worker processes to start: one per CPU the quota allows (rounded up: 1.5 CPUs -> 2), no more than the
    cores this process may run on, and no more than the memory limit holds at `memory_per_worker` each; at least 1."""
    cpus = affinity if affinity is not None else affinity_cpus()
    quota = cpu_quota(root, proc_self_cgroup)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    limit = memory_limit(root, proc_self_cgroup)
    if limit is not None and memory_per_worker > 0:
        cpus = min(cpus, limit // memory_per_worker)
    return max(1, cpus)
