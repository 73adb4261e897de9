"""Runs a script in a fresh interpreter and checks that the interpreter ends once the script
is done: a process that has printed everything and then waits forever (a queue's feeder
thread joined at exit, a child joined at exit) is a hung CI job, not a pass."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
DONE = "script done"


def ends_after(script: str, *, run_s: float = 600.0, exit_s: float = 60.0) -> str:
    """Run ``script`` (in the tests folder, so it can import the test modules); its output. Fails if the
    script does not finish in ``run_s`` or its interpreter is still there ``exit_s`` later."""
    code = textwrap.dedent(script) + f"\nprint({DONE!r}, flush=True)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=TESTS)
    out: list[str] = []
    watchdog = threading.Timer(run_s, proc.kill)  # a script that never finishes
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.strip() == DONE:
                break
        assert out and out[-1].strip() == DONE, (
            f"the script did not finish in {run_s:.0f} s:\n" + "".join(out[-40:]))
        watchdog.cancel()
        try:
            proc.wait(timeout=exit_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the script finished but its interpreter did not end in "
                                 f"{exit_s:.0f} s:\n" + "".join(out[-40:])) from None
        assert proc.returncode == 0, "".join(out[-40:])
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return "".join(out)
