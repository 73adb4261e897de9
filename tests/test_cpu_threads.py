"""The default engine stays on the CPUs it is given.

ONNX Runtime, left to pick its own thread count, starts one thread per physical core of the
whole machine and pins them there, outside a ``taskset`` / container CPU set (found on the
16-core GPU host, 2026-12-04: ~14 CPUs busy under ``taskset -c 0,1``). The engine must size
its threads from the CPUs this process may use and leave their affinity alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from ocrforge.runtimes.cpu_budget import cfs_quota_cpus, default_threads

needs_two = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                               reason="needs Linux and at least 2 CPUs")

_CHILD = textwrap.dedent("""
    import glob, json, os, sys
    os.sched_setaffinity(0, {int(sys.argv[1])})
    import numpy as np
    from ocrforge import OCR
    img = np.full((160, 560, 3), 255, np.uint8)
    import cv2
    cv2.putText(img, "Threads 2024", (10, 100), cv2.FONT_HERSHEY_SIMPLEX, 1.6, (0, 0, 0), 3)
    lines = OCR(runtime=sys.argv[2]).read(img).text
    masks = {}
    for t in glob.glob("/proc/self/task/*/status"):
        for row in open(t):
            if row.startswith("Cpus_allowed_list"):
                m = row.split(":")[1].strip()
                masks[m] = masks.get(m, 0) + 1
    print(json.dumps({"masks": masks, "text": lines}))
""")


def _run_pinned(cpu: int, runtime: str) -> dict:
    import json

    r = subprocess.run([sys.executable, "-c", _CHILD, str(cpu), runtime], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_two
def test_default_engine_threads_stay_on_the_pinned_cpu():
    cpu = min(os.sched_getaffinity(0))  # ORT puts its own workers on the other cores
    out = _run_pinned(cpu, "onnxruntime")
    assert out["masks"] == {str(cpu): out["masks"].get(str(cpu), 0)}, (
        f"threads left CPU {cpu}: {out['masks']}")
    assert "2024" in out["text"]


@needs_two
def test_openvino_engine_threads_stay_on_the_pinned_cpu():
    pytest.importorskip("openvino")
    cpu = min(os.sched_getaffinity(0))  # ORT puts its own workers on the other cores
    out = _run_pinned(cpu, "openvino")
    assert set(out["masks"]) == {str(cpu)}, f"threads left CPU {cpu}: {out['masks']}"


def test_default_threads_follow_the_cpu_set_and_quota(tmp_path):
    n = len(os.sched_getaffinity(0))
    assert 1 <= default_threads() <= n
    v2 = tmp_path / "cpu.max"
    v2.write_text("150000 100000\n")
    assert cfs_quota_cpus(v2) == 2  # 1.5 CPUs of quota: two threads, not the machine's count
    v2.write_text("max 100000\n")
    assert cfs_quota_cpus(v2) is None
    assert cfs_quota_cpus(tmp_path / "missing") is None


def test_peer_sessions_get_the_same_thread_rule():
    """bench's peers leave ONNX Runtime at 0 threads; inside sized_sessions they get ours."""
    import onnxruntime as ort

    from ocrforge.models.registry import resolve_models
    from ocrforge.tools.peers import sized_sessions

    rec = str(resolve_models("ppocrv6-small").rec)
    with sized_sessions():
        inside = ort.InferenceSession(rec, providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(rec, providers=["CPUExecutionProvider"])
    assert inside.get_session_options().intra_op_num_threads == default_threads()
    assert after.get_session_options().intra_op_num_threads == 0  # patched only inside
