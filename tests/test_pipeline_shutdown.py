"""Leaving a read_many() loop early never aborts Python (issue 20, item 7).

Before the fix the pipeline's threads were joined with a 5 s timeout and blocked for ever on
their input queues, so one of them could still be inside ONNX Runtime when the interpreter
tore down: ``terminate called without an active exception``, exit 134. A suspended generator
at interpreter exit aborted every time. Each scenario runs in a fresh interpreter while two
busy processes load the CPU (the abort was seen on a busy machine).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import render_lines

SCRIPT = textwrap.dedent("""
    import sys, threading
    from ocrforge import OCR
    from ocrforge.scheduling.threads import live_threads

    paths = sys.argv[1:]
    ocr = OCR()

    def workers():
        return [t.name for t in threading.enumerate() if t.name.startswith("ocrforge")]

    for page in ocr.read_many(paths):          # 1. break out of the loop
        break
    assert not workers() and not live_threads(), f"after break: {workers()}"

    try:                                       # 2. an exception inside the loop
        for page in ocr.read_many(paths):
            raise ValueError("boom")
    except ValueError:
        pass
    assert not workers(), f"after an exception: {workers()}"

    it = ocr.read_many(paths * 3)              # 3. interpreter exit, generator suspended
    next(it)
    print("done", flush=True)
""")

GPU_SCHEDULER = textwrap.dedent("""
    import sys, threading
    import torch
    from ocrforge import OCR

    torch.set_num_threads(1)
    paths = sys.argv[1:]
    sched = OCR(runtime="torch", device="cpu", **{"gpu.warmup": False}).gpu_scheduler()
    for page in sched.run(paths):
        break
    # the driver thread stays, idle, for the next run (threads.Reusable); nothing else does
    alive = [t.name for t in threading.enumerate() if t.name.startswith("ocrforge-gpu-")
             and not t.name.startswith("ocrforge-gpu-driver_")]
    assert not alive, f"after break: {alive}"
    assert sched.drivers.busy() == 0
    it = sched.run(paths * 3)                  # interpreter exit, generator suspended
    next(it)
    print("done", flush=True)
""")

CTRL_C = textwrap.dedent("""
    import sys
    from ocrforge import OCR

    for page in OCR().read_many(sys.argv[1:] * 40):
        print("page", flush=True)
""")


@pytest.fixture(scope="module")
def five(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("five")
    out = []
    for i in range(5):
        r = render_lines([f"Page {i} leaves early", "Total 12.50"], size=24, margin=16)
        p = d / f"p{i}.png"
        r.image.save(p)
        out.append(str(p))
    return out


@pytest.fixture()
def cpu_load():
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in busy:
            p.kill()
            p.wait()


def _env() -> dict:
    import os

    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_leaving_read_many_early_exits_cleanly(five, cpu_load, tmp_path):
    script = tmp_path / "leave.py"
    script.write_text(SCRIPT)
    for _ in range(3):
        r = subprocess.run([sys.executable, str(script), *five], capture_output=True, text=True,
                           env=_env(), timeout=300)
        assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-3000:]}"
        assert "done" in r.stdout
        assert "terminate called" not in r.stderr


def test_gpu_scheduler_left_early_exits_cleanly(five, cpu_load, tmp_path):
    """The GPU scheduler's generator has the same shape; its code runs on the CPU here."""
    pytest.importorskip("torch")
    script = tmp_path / "gpu.py"
    script.write_text(GPU_SCHEDULER)
    for _ in range(2):
        r = subprocess.run([sys.executable, str(script), *five], capture_output=True, text=True,
                           env=_env(), timeout=300)
        assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-3000:]}"
        assert "done" in r.stdout and "terminate called" not in r.stderr


def test_ctrl_c_in_read_many_stops_cleanly(five, cpu_load, tmp_path):
    script = tmp_path / "ctrlc.py"
    script.write_text(CTRL_C)
    # a suite started in the background (`cmd &` in a script) inherits SIGINT ignored, and so
    # would the child (Python then installs no KeyboardInterrupt handler): give it the default
    p = subprocess.Popen([sys.executable, str(script), *five], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env(),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline().strip() == "page"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        p.kill()
    assert "KeyboardInterrupt" in err
    assert "terminate called" not in err
    assert p.returncode in (-signal.SIGINT, 130, 1), (p.returncode, err[-3000:])
