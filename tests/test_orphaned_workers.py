"""A process holding worker pools (DB boxes, layout: spawned ProcessPoolExecutors) that is
killed outright, as an OOM kill or a crash would end a server's engine child, takes its
workers with it instead of leaving them waiting on its queues for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

SCRIPT = """
import os, sys, time
from ocrforge.scheduling.db_workers import ShmDBPool
from ocrforge.scheduling.layout_workers import LayoutPool

db = ShmDBPool(2, 64, (0.3, 0.6, 1.5, 1000, 3))
lay = LayoutPool(1, {})
[f.result() for f in [db.pool.submit(int) for _ in range(4)]]
lay.pool.submit(int).result()
print("up", flush=True)
time.sleep(600)
"""


def test_pool_workers_end_when_their_process_is_killed():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).parent))
    workers: list[psutil.Process] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                   if "spawn_main" in " ".join(c.cmdline())]
        assert len(workers) == 3, [c.cmdline() for c in workers]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"{len(alive)} of 3 workers outlived their killed process"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:  # never leave them to the rest of the suite
            try:
                w.kill()
            except psutil.Error:
                pass
