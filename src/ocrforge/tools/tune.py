"""`ocrforge tune`: find the fastest engine configuration within an accuracy budget.

Search: coordinate descent from the starting configuration. Each axis (precision, detection
size limit, recognition min width, recognition batch size, threads / stage overlap) is tried
value by value with the other axes at their current best; a value is kept when it is faster
and the CER stays within ``budget_points`` of the FP32 reference. Every candidate reads the
whole sample through ``read_many`` (the throughput path) and is scored by evaluation.eval; its time
is the median of ``repeat`` runs.

At the end the winner and the starting configuration (the defaults, unless options were given)
are measured again in turns, ``confirm`` times each, on the same machine state. Their spread is
the measurement noise: the winner is recommended only when it beats the start by more than that
noise; otherwise the profile holds the starting configuration and the log says why. Both
numbers, the noise and the verdict go into the profile.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ocrforge.config import EngineConfig, save_profile

AXES: dict[str, list[dict[str, Any]]] = {
    "precision": [
        {"rec_precision": "int8"},
        {"rec_precision": "int8-dynamic"},
        {"det_precision": "int8"},
    ],
    "det_limit_side": [{"det_limit_side": v} for v in (800, 736)],
    "rec_min_width": [{"rec_min_width": v} for v in (160, 96)],
    "rec_batch_size": [{"rec_batch_size": v} for v in (8, 32)],
    "threads": [
        {"allow_spinning": False},
        {"det_threads": 1, "rec_threads": 1, "allow_spinning": True},
        {"pipeline": False, "det_threads": None, "rec_threads": None},
    ],
}
DEFAULT_AXES = tuple(AXES)


@dataclass
class Trial:
    axis: str
    changes: dict[str, Any]
    seconds: float
    pages: int
    cer: float
    ok: bool
    error: str | None = None

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds if self.seconds else 0.0


@dataclass
class TuneResult:
    best: EngineConfig
    reference_cer: float
    reference_pages_per_s: float
    best_cer: float
    best_pages_per_s: float
    trials: list[Trial] = field(default_factory=list)
    noise: float = 0.0  # relative spread of the final same-state runs (0.05 = 5 %)
    verdict: str = ""

    def summary(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "noise": round(self.noise, 4),
            "reference": {"cer": self.reference_cer, "pages_per_s": round(self.reference_pages_per_s, 4)},
            "best": {"cer": self.best_cer, "pages_per_s": round(self.best_pages_per_s, 4),
                     "speedup": round(self.best_pages_per_s / self.reference_pages_per_s, 3)
                     if self.reference_pages_per_s else None},
            "trials": [{"axis": t.axis, "changes": t.changes, "pages_per_s": round(t.pages_per_s, 4),
                        "cer": t.cer, "ok": t.ok, "error": t.error} for t in self.trials],
        }


def measure(cfg: EngineConfig, dataset: str | Path, limit: int | None, repeat: int = 1) -> tuple[float, int, float]:
    """(median seconds, pages, CER) of ``read_many`` over the set, after a short warm-up."""
    from ocrforge.engine import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import evaluate

    engine = OCR(cfg)
    recs = load_dataset(dataset)[:limit] if limit else load_dataset(dataset)
    list(engine.read_many([str(r.image) for r in recs[:2]]))  # warm-up: arenas, first-shape costs
    times, cer, pages = [], 0.0, 0
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        res = evaluate(engine, recs)
        times.append(time.perf_counter() - t0)
        cer, pages = res["overall"]["cer"], len(res["pages"])
    return statistics.median(times), pages, cer


def tune(dataset: str | Path, start: EngineConfig | None = None, *, budget_points: float = 0.3,
         axes: Sequence[str] = DEFAULT_AXES, limit: int | None = None, repeat: int = 1,
         confirm: int = 3, log: Callable[[str], None] = print) -> TuneResult:
    start = start or EngineConfig()
    reference = start.with_(det_precision="fp32", rec_precision="fp32", cls_precision="fp32")
    t, n, ref_cer = measure(reference, dataset, limit, repeat)
    log(f"reference (fp32): {n / t:.3f} pages/s, CER {ref_cer * 100:.2f}%")
    best, best_t = start, t
    if start != reference:
        best_t, n, _ = measure(start, dataset, limit, repeat)
    trials: list[Trial] = []
    for axis in axes:
        for changes in AXES[axis]:
            cand = best.with_(**changes)
            if cand == best:
                continue
            try:
                ct, n, ccer = measure(cand, dataset, limit, repeat)
            except Exception as e:  # a refused INT8 build or a failing setting: skip this value
                trials.append(Trial(axis, changes, 0.0, 0, float("nan"), False, f"{type(e).__name__}: {e}"))
                log(f"  {axis} {changes}: skipped ({type(e).__name__}: {e})")
                continue
            ok = (ccer - ref_cer) * 100 <= budget_points
            trials.append(Trial(axis, changes, ct, n, ccer, ok))
            log(f"  {axis} {_fmt(changes)}: {n / ct:.3f} pages/s, CER {ccer * 100:.2f}% "
                f"({(ccer - ref_cer) * 100:+.2f} pts){'' if ok else '  over budget'}")
            if ok and ct < best_t:
                best, best_t = cand, ct
    return _confirm(start, best, ref_cer, trials, dataset, limit, budget_points, confirm, log)


def _confirm(start: EngineConfig, best: EngineConfig, ref_cer: float, trials: list[Trial],
             dataset: str | Path, limit: int | None, budget_points: float, confirm: int,
             log: Callable[[str], None]) -> TuneResult:
    """Start and winner measured in turns (same machine state); the winner only when it is
    faster than the start by more than the noise of these runs and within the CER budget."""
    if best == start:
        t, n, cer = measure(start, dataset, limit, 1)
        verdict = ("no candidate was faster within the budget: the profile keeps the starting "
                   "configuration")
        log(verdict)
        return TuneResult(start, ref_cer, n / t, cer, n / t, trials, 0.0, verdict)
    runs: dict[str, list[float]] = {"start": [], "best": []}
    cers = {}
    for _ in range(max(2, confirm)):
        for key, cfg in (("start", start), ("best", best)):
            t, n, cers[key] = measure(cfg, dataset, limit, 1)
            runs[key].append(t)
    t_start, t_best = statistics.median(runs["start"]), statistics.median(runs["best"])
    noise = max((max(v) - min(v)) / statistics.median(v) for v in runs.values())
    gain = t_start / t_best - 1.0
    within = (cers["best"] - ref_cer) * 100 <= budget_points
    log(f"best: {n / t_best:.3f} pages/s vs start {n / t_start:.3f} pages/s (x{t_start / t_best:.2f}, "
        f"noise ±{noise * 100:.1f} %), CER {cers['best'] * 100:.2f}% vs {cers['start'] * 100:.2f}%")
    if gain > noise and within:
        verdict = (f"recommended: {gain * 100:.1f} % faster than the starting configuration, more "
                   f"than the measured noise ({noise * 100:.1f} %)")
        log(verdict)
        return TuneResult(best, ref_cer, n / t_start, cers["best"], n / t_best, trials, noise, verdict)
    why = (f"{gain * 100:+.1f} % speed is within the measured noise ({noise * 100:.1f} %)" if within
           else f"its CER is {(cers['best'] - ref_cer) * 100:+.2f} points over the reference")
    verdict = (f"warning: the winner is not better than the starting configuration ({why}); "
               "the profile keeps the starting configuration")
    log(verdict)
    return TuneResult(start, ref_cer, n / t_start, cers["start"], n / t_start, trials, noise, verdict)


def _fmt(changes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items())


def write_profile(result: TuneResult, path: str | Path, dataset: str, budget_points: float) -> Path:
    import platform

    import onnxruntime
    import psutil

    extra = {"tune": {"dataset": dataset, "budget_points": budget_points,
                      "machine": {"cpus_logical": psutil.cpu_count(), "cpus_physical": psutil.cpu_count(False),
                                  "processor": platform.processor() or platform.machine(),
                                  "onnxruntime": onnxruntime.__version__},
                      **result.summary()}}
    return save_profile(result.best, path, extra)


def main_log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def describe(result: TuneResult) -> str:
    return json.dumps(result.summary(), indent=2)
