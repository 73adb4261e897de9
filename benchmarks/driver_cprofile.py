"""The GPU driver thread's CPU time by function: cProfile inside the driver thread, timed by
the thread's own CPU clock (time.thread_time), so a wait for the interpreter lock or for the
device costs nothing and what is left is the Python and the launches the thread pays for.

    with DriverProfile() as prof:
        list(scheduler.run(pages))
    prof.summary(len(pages))  # {"cpu_ms_per_page": ..., "tottime": [...], "cumtime": [...]}

cProfile slows Python calls down, so shares between functions are the reading, not absolute
times (the bench's untraced passes give those).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Any

from ocrforge.scheduling.gpu_loop import DriverLoop


class DriverProfile:
    def __init__(self, top: int = 40):
        self.top = top
        self.prof: cProfile.Profile | None = None
        self._run: Any = None

    def __enter__(self) -> DriverProfile:
        run = self._run = DriverLoop.run
        me = self

        def profiled(loop: DriverLoop) -> None:
            me.prof = cProfile.Profile(time.thread_time)
            me.prof.enable()
            try:
                run(loop)
            finally:
                me.prof.disable()

        DriverLoop.run = profiled
        return self

    def __exit__(self, *exc: object) -> None:
        DriverLoop.run = self._run

    def summary(self, pages: int) -> dict:
        if self.prof is None:
            return {}
        st = pstats.Stats(self.prof).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
        total = sum(v[2] for v in st.values())
        rows = [(_name(k), v[1], v[2], v[3]) for k, v in st.items()]

        def table(col: int) -> list:
            best = sorted(rows, key=lambda r: -r[col])[: self.top]
            return [{"fn": r[0], "calls_per_page": round(r[1] / pages, 2),
                     "self_ms_per_page": round(r[2] / pages * 1e3, 4),
                     "cum_ms_per_page": round(r[3] / pages * 1e3, 4)} for r in best]

        return {"cpu_ms_per_page": round(total / pages * 1e3, 3),
                "tottime": table(2), "cumtime": table(3)}


def _name(k: tuple) -> str:
    file, line, fn = k
    if file == "~":
        return fn  # a builtin: '<method 'replay' of ...>'
    short = file.rsplit("/", 2)
    return f"{'/'.join(short[-2:])}:{line}:{fn}"


def fmt(s: dict, n: int = 25) -> str:
    if not s:
        return ""
    out = [f"driver CPU (cProfile, thread time): {s['cpu_ms_per_page']} ms a page"]
    for key in ("tottime", "cumtime"):
        out.append(f"  by {key}: self / cumulative ms a page, calls a page")
        out += [f"    {r['self_ms_per_page']:8.4f} {r['cum_ms_per_page']:8.4f} "
                f"{r['calls_per_page']:7.2f}  {r['fn']}" for r in s[key][:n]]
    return "\n".join(out)
