"""How many CPUs this process may use, and how many compute threads to give a network.

ONNX Runtime, when its thread count is left at 0, starts one thread per physical core of the
whole machine and pins each to its core, ignoring the process's CPU set (``taskset``, a
container's cpuset) and its CPU quota. On a 16-core host under ``taskset -c 0,1`` that kept
~14 CPUs busy (docs/BENCHMARKS.md, "Threads outside the CPU set"). The engine therefore always
passes an explicit count: the physical cores within the CPU set, capped by the quota.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

_SYS_CPU = Path("/sys/devices/system/cpu")


def cpu_set() -> set[int] | None:
    """The CPUs this process may run on, or None off Linux."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None


def cfs_quota_cpus(cpu_max: Path | None = None) -> int | None:
    """CPUs allowed by the cgroup CPU quota (rounded up), or None when there is no quota."""
    for path in [cpu_max] if cpu_max else _quota_files():
        try:
            fields = path.read_text().split()
        except OSError:
            continue
        if path.name == "cpu.cfs_quota_us":  # cgroup v1: quota here, period beside it
            try:
                fields = [fields[0], (path.parent / "cpu.cfs_period_us").read_text().strip()]
            except OSError:
                continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        quota, period = int(fields[0]), int(fields[1])
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    return None


def _quota_files() -> list[Path]:
    files = []
    try:
        for row in Path("/proc/self/cgroup").read_text().splitlines():
            if row.startswith("0::"):  # cgroup v2: this process's own group
                files.append(Path("/sys/fs/cgroup") / row[3:].lstrip("/") / "cpu.max")
    except OSError:
        pass
    return files + [Path("/sys/fs/cgroup/cpu.max"), Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")]


def _capped(n: int) -> int:
    quota = cfs_quota_cpus()
    return max(1, min(n, quota) if quota else n)


def usable_cpus() -> int:
    """Logical CPUs this process may run on: its CPU set, capped by the cgroup quota."""
    cpus = cpu_set()
    return _capped(len(cpus) if cpus else (os.cpu_count() or 1))


def _physical_cores(cpus: set[int]) -> int:
    cores = set()
    for c in cpus:
        topo = _SYS_CPU / f"cpu{c}" / "topology"
        try:
            cores.add((topo.joinpath("physical_package_id").read_text().strip(),
                       topo.joinpath("core_id").read_text().strip()))
        except OSError:
            return len(cpus)  # no topology (some containers): count every CPU
    return len(cores)


def default_threads() -> int:
    """Compute threads for one network when the config says 0: the physical cores in this
    process's CPU set, capped by the CPU quota; 0 (the runtime's own choice) off Linux."""
    cpus = cpu_set()
    if not cpus:
        return 0
    return _capped(_physical_cores(cpus))
