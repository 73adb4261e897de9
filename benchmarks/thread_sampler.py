"""Where a process's Python threads spend their time: a sampling profiler for benchmarks.

Every ``interval`` seconds it reads every thread's current frame (sys._current_frames) and, for
threads whose name starts with one of the given prefixes, counts (a) the innermost frame inside
ocrforge's source (file:function:line: time in C calls is charged to the Python line that
called them) and (b) the outermost ocrforge method of the stack (the driver loop's step).
Low overhead (one GIL acquisition per sample); the shares are statistical."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[1] / "src" / "ocrforge")


def _where(frame) -> tuple[str, str]:
    inner = outer = None
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if "/ocrforge/" in fn and "/benchmarks/" not in fn:
            here = f"{Path(fn).name}:{f.f_code.co_name}:{f.f_lineno}"
            inner = inner or here
            outer = f"{Path(fn).name}:{f.f_code.co_name}"
        f = f.f_back
    top = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
    return inner or top, outer or top


class _Background:
    """A daemon thread running ``self._run`` from ``with`` to its end (``self._stop`` set)."""

    thread_name = "background"
    _stop: threading.Event
    _t: threading.Thread | None

    def __enter__(self):
        self._t = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._t:
            self._t.join()

    def _run(self) -> None:
        raise NotImplementedError


class ThreadSampler(_Background):
    thread_name = "sampler"

    def __init__(self, prefixes: tuple[str, ...] = ("ocrforge-gpu",), interval: float = 0.002,
                 depth: int = 2):
        self.prefixes, self.interval, self.depth = prefixes, interval, depth
        self.inner: dict[str, Counter] = {}
        self.steps: dict[str, Counter] = {}
        self.samples: Counter = Counter()
        self._stop = threading.Event()
        self._t: threading.Thread | None = None
        # CPU seconds each thread used (Linux /proc, read every ~100 ms, last value kept per
        # thread): tells a thread busy with work from one waiting for the GIL or the GPU
        self.cpu: dict[int, tuple[str, float, float]] = {}
        self.wall: dict[int, list[float]] = {}

    def _run(self) -> None:
        last = 0.0
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            if time.perf_counter() - last >= 0.1:
                self._read_cpu()
                last = time.perf_counter()
            for ident, frame in sys._current_frames().items():
                name = names.get(ident, "?")
                if not name.startswith(self.prefixes):
                    continue
                kind = name.rsplit("_", 1)[0]  # ThreadPoolExecutor names end in _N
                inner, outer = _where(frame)
                self.samples[kind] += 1
                self.inner.setdefault(kind, Counter())[inner] += 1
                self.steps.setdefault(kind, Counter())[_step(frame, outer)] += 1

    def _read_cpu(self) -> None:
        now = time.perf_counter()
        for t in threading.enumerate():
            tid = t.native_id
            if tid is None or not t.name.startswith(self.prefixes):
                continue
            try:
                f = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            tick = os.sysconf("SC_CLK_TCK")
            cpu = (int(f[11]) + int(f[12])) / tick
            first = self.cpu.get(tid, (None, cpu, cpu))[1]  # counted from the first reading
            self.cpu[tid] = (t.name.rsplit("_", 1)[0], first, cpu)
            self.wall.setdefault(tid, [now, now])[1] = now

    def thread_cpu(self) -> dict:
        """Per kind of thread: CPU seconds used, the seconds its threads lived (summed) and
        the busy share (CPU / lifetime) while sampled."""
        out: dict[str, dict] = {}
        for tid, (kind, first, last) in self.cpu.items():
            a, b = self.wall[tid]
            cpu = last - first
            o = out.setdefault(kind, {"threads": 0, "cpu_s": 0.0, "alive_s": 0.0})
            o["threads"] += 1
            o["cpu_s"] += cpu
            o["alive_s"] += b - a
        for o in out.values():
            o["busy"] = round(o["cpu_s"] / o["alive_s"], 3) if o["alive_s"] else None
            o["cpu_s"] = round(o["cpu_s"], 3)
            o["alive_s"] = round(o["alive_s"], 3)
        return out

    def summary(self, top: int = 20) -> dict:
        out = {}
        for kind, n in self.samples.items():
            out[kind] = {"samples": n,
                         "steps": {k: round(v / n, 4) for k, v in self.steps[kind].most_common(top)},
                         "lines": {k: round(v / n, 4) for k, v in self.inner[kind].most_common(top)}}
        out["thread_cpu"] = self.thread_cpu()
        return out


def _step(frame, outer: str) -> str:
    """The DriverLoop method just below run() (take, launch_det, ...), else the outer frame."""
    chain = []
    f = frame
    while f is not None:
        if f.f_code.co_filename.endswith("gpu_loop.py"):
            chain.append(f.f_code.co_name)
        f = f.f_back
    if chain:
        chain.reverse()  # outermost first: run, then the step, then what it called
        return "/".join(chain[1:3]) or chain[0] + ("" if frame.f_code.co_name != "sleep" else ":sleep")
    return outer


def fmt(summary: dict, top: int = 12) -> str:
    rows = []
    for kind, c in summary.get("thread_cpu", {}).items():
        rows.append(f"  cpu {kind}: {c['threads']} threads, {c['cpu_s']:.2f} s CPU over "
                    f"{c['alive_s']:.2f} s alive (busy {c['busy']})")
    for kind, s in summary.items():
        if kind == "thread_cpu":
            continue
        rows.append(f"  {kind} ({s['samples']} samples)")
        rows += [f"    step {v * 100:5.1f}%  {k}" for k, v in list(s["steps"].items())[:top]]
        rows += [f"    line {v * 100:5.1f}%  {k}" for k, v in list(s["lines"].items())[:top]]
    return "\n".join(rows)


if __name__ == "__main__":  # a self-check: a busy thread and a sleeping one
    def busy():
        t = time.time()
        while time.time() - t < 0.3:
            sum(range(1000))

    with ThreadSampler(prefixes=("w",)) as s:
        a = threading.Thread(target=busy, name="w-busy")
        b = threading.Thread(target=time.sleep, args=(0.3,), name="w-sleep")
        a.start(); b.start(); a.join(); b.join()  # noqa: E702
    print(fmt(s.summary()), file=sys.stderr)


class GilProbe(_Background):
    """How long a thread that has just left a blocking call waits for the GIL: a thread sleeps
    ``period`` seconds again and again and records how late each sleep ends (the time to get
    the GIL back, plus the OS's wake-up delay). The GPU driver thread pays the same wait after
    every torch call that releases the GIL, hundreds of them a page. ``baseline()`` measures
    the lateness with nothing else running in the process's Python, to subtract."""

    thread_name = "gil-probe"

    def __init__(self, period: float = 0.002):
        self.period = period
        self.late: list[float] = []
        self._stop = threading.Event()
        self._t: threading.Thread | None = None

    def baseline(self, seconds: float = 0.3) -> dict:
        late = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            late.append(self._late_once())
        return _lateness(late)

    def _late_once(self) -> float:
        t0 = time.perf_counter()
        time.sleep(self.period)
        return time.perf_counter() - t0 - self.period

    def _run(self) -> None:
        while not self._stop.is_set():
            self.late.append(self._late_once())

    def summary(self) -> dict:
        return _lateness(self.late)


def _lateness(late: list[float]) -> dict:
    if not late:
        return {"n": 0}
    s = sorted(late)
    q = lambda f: round(s[min(len(s) - 1, int(f * len(s)))] * 1e3, 3)  # noqa: E731
    return {"n": len(s), "mean_ms": round(sum(s) / len(s) * 1e3, 3), "p50_ms": q(0.5),
            "p90_ms": q(0.9), "p99_ms": q(0.99), "max_ms": round(s[-1] * 1e3, 3)}
