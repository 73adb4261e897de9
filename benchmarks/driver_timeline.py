"""What the GPU waits for: a summary of the GPU driver thread's traced passes.

GpuScheduler.trace (a list) makes the driver add a row per pass over its steps
(scheduling/gpu_loop.TRACE_COLUMNS): the state the pass began with, including whether the
device had finished everything it was given, and each step's seconds. The time up to the next
row is charged to that state, so the summary says, for the time the device sat idle, what the
driver was doing (a step, or sleeping) and what it had in hand (pages waiting for a detection
bucket, contour jobs out or done, lines in partial recognition batches, ...).

    python benchmarks/driver_timeline.py timeline.npy [max_inflight]
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np

from ocrforge.scheduling.gpu_loop import STEPS
from ocrforge.scheduling.gpu_loop import TRACE_COLUMNS as COLUMNS

# what a state holds, as letters: F window full, I pages ready to take, W pages waiting for
# detection, O orientation out, C contour jobs out (c: one of them done, the driver's turn),
# L lines queued for recognition, R recognition out
FLAGS = (("I", "inputs"), ("W", "waiting"), ("O", "orienting"), ("C", "contours"),
         ("L", "rec_lines"), ("R", "rec_out"))


def summarise(rows: np.ndarray, max_inflight: int = 128, top: int = 8) -> dict:
    """Shares of the traced wall time: device idle or busy, by driver step and by state."""
    col = {c: rows[:, k] for k, c in enumerate(COLUMNS)}
    steps = np.stack([col[f"s_{n}"] for n in STEPS], axis=1)
    # a pass lasts until the next begins; the last one, its steps
    dt = np.diff(col["t"], append=col["t"][-1] + steps[-1].sum())
    wall = float(dt.sum()) or 1.0
    work = np.minimum(steps.sum(axis=1), dt)
    idle = col["idle"] == 1
    out: dict = {"passes": int(len(rows)), "wall_s": round(wall, 3),
                 "device_idle_share": round(float(dt[idle].sum()) / wall, 3),
                 "driver_busy_share": round(float(work.sum()) / wall, 3),
                 # of the time in steps, the share the driver ran on a CPU (the rest: waiting
                 # for the interpreter lock or inside a blocking device call)
                 "driver_cpu_share_of_steps": round(float(col["cpu"].sum()) / (float(work.sum()) or 1.0), 3),
                 "pass_ms": _quantiles(dt * 1e3)}
    kinds = {"idle": idle, "busy": col["idle"] == 0, "unknown": col["idle"] < 0}  # -1: no events
    for name, sel in kinds.items():
        if not sel.any():
            continue
        t = float(dt[sel].sum()) or 1.0
        by_step = {n: round(float(steps[sel, k].sum()) / t, 3) for k, n in enumerate(STEPS)}
        by_step["sleeping"] = round(float((dt[sel] - work[sel]).sum()) / t, 3)
        out[f"device_{name}"] = {"s": round(float(dt[sel].sum()), 3), "driver": by_step,
                                 "state": _states(col, dt, sel, max_inflight, top)}
    out["in_hand_mean"] = {c: round(float((col[c] * dt).sum()) / wall, 2)
                           for c in ("live", "waiting", "orienting", "contours", "contours_done",
                                     "rec_lines", "rec_out", "inputs", "crop_mib")}
    slow = np.argsort(dt)[::-1][:top]
    out["slowest_passes"] = [{"ms": round(float(dt[i]) * 1e3, 2), "idle": int(col["idle"][i]),
                              "cpu_ms": round(float(col["cpu"][i]) * 1e3, 2),
                              **{n: round(float(steps[i, k]) * 1e3, 2) for k, n in enumerate(STEPS)}}
                             for i in slow]
    return out


def _states(col: dict, dt: np.ndarray, sel: np.ndarray, max_inflight: int, top: int) -> dict:
    """Time shares of the state letters (FLAGS) over the selected passes, the top few."""
    t = float(dt[sel].sum()) or 1.0
    acc: Counter = Counter()
    for i in np.flatnonzero(sel):
        key = "F" if col["live"][i] >= max_inflight else ""
        for letter, c in FLAGS:
            if col[c][i] > 0:
                key += "c" if letter == "C" and col["contours_done"][i] > 0 else letter
        acc[key or "-"] += float(dt[i])
    return {k: round(v / t, 3) for k, v in acc.most_common(top)}


def _quantiles(ms: np.ndarray) -> dict:
    q = np.percentile(ms, [50, 90, 99, 100]) if len(ms) else [0.0] * 4
    return {"mean": round(float(ms.mean()), 3) if len(ms) else 0.0,
            **{k: round(float(v), 3) for k, v in zip(("p50", "p90", "p99", "max"), q, strict=True)}}


def main() -> None:
    rows = np.load(sys.argv[1])
    print(json.dumps(summarise(rows, int(sys.argv[2]) if len(sys.argv) > 2 else 128), indent=1))


if __name__ == "__main__":
    main()
