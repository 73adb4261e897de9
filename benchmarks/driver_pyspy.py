"""Where the scheduler's threads spend their CPU: py-spy attached to this process for one pass.

The thread sampler (thread_sampler.py) reads stacks from Python, so it only ever sees the
driver thread when that thread has given up the interpreter lock (inside a torch call or a
wait): its Python work between those calls is invisible to it. py-spy reads the stacks from
outside without the lock, and leaves out samples of a thread that is not running (waiting for
the lock, the device or a queue), so what it counts is CPU time, Python included.

    with PySpy(out_file) as spy:
        list(scheduler.run(pages))
    spy.summary(pages)   # per thread kind: samples, ms a page, top functions (self / total)

Needs the py-spy binary (the py-spy wheel) and leave to read this process's memory.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


class PySpy:
    def __init__(self, out: Path, rate: int = 250, gil: bool = False):
        """``gil``: sample only the thread holding the interpreter lock (py-spy --gil), so the
        samples of a thread kind over rate x wall are the share of time it held the lock."""
        self.out, self.rate, self.gil = Path(out), rate, gil
        self.proc: subprocess.Popen | None = None
        self.t0 = self.wall = 0.0

    def __enter__(self) -> PySpy:
        exe = shutil.which("py-spy")
        if exe is None:
            return self
        self.proc = subprocess.Popen(
            [exe, "record", "-p", str(os.getpid()), "--threads", "--nonblocking", "--format",
             "raw", "-r", str(self.rate), "-o", str(self.out), *(["--gil"] if self.gil else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # attach before the pass starts
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def summary(self, pages: int, top: int = 30) -> dict:
        if self.proc is None:
            return {"error": "no py-spy binary"}
        if not self.out.exists():
            err = self.proc.stderr.read().decode()[-500:] if self.proc.stderr else ""
            return {"error": f"py-spy wrote nothing: {err}"}
        out = summarise(self.out.read_text(), pages, self.rate, top)
        for k in out.values():  # the share of the pass this thread kind was on a CPU (or held
            k["share_of_wall"] = round(k["cpu_ms_per_page"] * pages / 1e3 / self.wall, 3)  # the GIL)
        return out | {"wall_s": round(self.wall, 3), "gil_only": self.gil}


def summarise(raw: str, pages: int, rate: int, top: int = 30) -> dict:
    """Per thread kind (name without the pool's _N): CPU ms a page, and by function the ms a
    page as the innermost frame (self) and anywhere on the stack (total), and by driver step."""
    ms = 1e3 / rate / pages  # one sample, in ms a page
    kinds: dict[str, dict[str, Counter]] = {}
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        name = frames[0].split(": ", 1)[-1].rsplit("_", 1)[0] if frames[0].startswith("thread") else "?"
        k = kinds.setdefault(name, {"self": Counter(), "total": Counter(), "step": Counter(),
                                     "n": Counter()})
        k["n"]["all"] += int(n)
        names = [_short(f) for f in frames[1:]]
        if names:
            k["self"][names[-1]] += int(n)
        for f in {_short(f, line=False) for f in frames[1:]}:
            k["total"][f] += int(n)
        k["step"][_step(frames[1:])] += int(n)
    out = {}
    for name, k in sorted(kinds.items(), key=lambda t: -t[1]["n"]["all"]):
        out[name] = {"cpu_ms_per_page": round(k["n"]["all"] * ms, 3),
                     "by_step": {s: round(c * ms, 3) for s, c in k["step"].most_common(12)},
                     "self": {f: round(c * ms, 3) for f, c in k["self"].most_common(top)},
                     "total": {f: round(c * ms, 3) for f, c in k["total"].most_common(top)}}
    return out


def _short(frame: str, line: bool = True) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    file = "/".join(Path(m["file"]).parts[-2:])
    return f"{m['fn']} ({file}:{m['line']})" if m["line"] and line else f"{m['fn']} ({file})"


def _step(frames: list[str]) -> str:
    """The DriverLoop step on the stack (the frame below DriverLoop.step / traced_step)."""
    for i, f in enumerate(frames):
        if f.startswith(("DriverLoop.step ", "DriverLoop.traced_step ")) and i + 1 < len(frames):
            return frames[i + 1].split(" (")[0]
    return "other"


def fmt(s: dict, n: int = 25) -> str:
    out = []
    for name, k in s.items():
        if not isinstance(k, dict) or "cpu_ms_per_page" not in k:
            continue
        what = "GIL held" if s.get("gil_only") else "CPU"
        out.append(f"py-spy {what} {name}: {k['cpu_ms_per_page']} ms a page ({k['share_of_wall']} of "
                   f"the pass); by step {k['by_step']}")
        if name.startswith("ocrforge-gpu-driver") or (s.get("gil_only") and len(out) < 200):
            out.append("  self ms a page:")
            out += [f"    {v:8.3f}  {f}" for f, v in list(k["self"].items())[:n]]
            out.append("  total ms a page:")
            out += [f"    {v:8.3f}  {f}" for f, v in list(k["total"].items())[:n]]
    return "\n".join(out)
