"""Accuracy guard: a faster network is only accepted if the whole OCR pipeline stays accurate.

The candidate replaces one network (det, rec or cls) of an FP32 engine; both engines read the
same held-out labeled pages (synthetic by default) with ``evaluation.eval.evaluate`` and the page
CER difference, in percentage points, is checked against the budget.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ocrforge.config import EngineConfig

if TYPE_CHECKING:
    from ocrforge.engine import OCR

DEFAULT_BUDGET_POINTS = 0.5


class BuildRefused(RuntimeError):
    """A build lost more accuracy than the budget allows (and --force was not given)."""

    def __init__(self, message: str, report: dict[str, Any]):
        super().__init__(message)
        self.report = report


@dataclass
class GuardResult:
    dataset: str
    pages: int
    cer_fp32: float
    cer_candidate: float
    delta_points: float
    det_f1_fp32: float | None
    det_f1_candidate: float | None
    budget_points: float
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (f"CER {self.cer_fp32 * 100:.2f}% (fp32) -> {self.cer_candidate * 100:.2f}% "
                f"(delta {self.delta_points:+.2f} points, budget {self.budget_points:.2f}) on "
                f"{self.pages} pages of {self.dataset}")


def upright_records(dataset: str | Path) -> list:
    """Synthetic pages minus those turned by 90/180/270 degrees: without the orientation
    classifier FP32 reads those as garbage too, and the CER of garbage swings with any change
    (the guard would measure noise, not precision loss)."""
    from ocrforge.evaluation.dataset import load_dataset

    recs = load_dataset(dataset)
    return [r for r in recs if not (r.meta.get("transforms") or {}).get("rotate_cw")]


def fp32_engine(cfg: EngineConfig, role: str) -> OCR:
    from ocrforge.engine import OCR

    return OCR(cfg.with_(det_precision="fp32", rec_precision="fp32", cls_precision="fp32",
                         use_cls=cfg.cls.enabled or role == "cls", runtime="onnxruntime"))


def check(role: str, candidate: Path, precision: str, engine: OCR, dataset: str | Path,
          pages: int | None, budget_points: float = DEFAULT_BUDGET_POINTS,
          fp32_result: dict[str, Any] | None = None) -> tuple[GuardResult, dict[str, Any]]:
    """Evaluate ``engine`` (FP32) and the same engine with ``candidate`` as its ``role`` network.
    Returns the guard result and the FP32 evaluation (reusable for the next role)."""
    from ocrforge.evaluation.eval import evaluate
    from ocrforge.runtimes.onnxruntime import OrtRuntime

    attr = f"{role}_rt"
    ref = fp32_result or evaluate(engine, dataset, pages)
    runner = engine.runner
    if role == "cls":
        runner.cls_runtime()
        attr = "_cls_rt"
    original = getattr(runner, attr)
    setattr(runner, attr, OrtRuntime(candidate, engine.config.runtime, precision))
    try:
        got = evaluate(engine, dataset, pages)
    finally:
        setattr(runner, attr, original)
    c0, c1 = ref["overall"]["cer"], got["overall"]["cer"]
    delta = (c1 - c0) * 100
    name = str(dataset) if isinstance(dataset, (str, Path)) else f"{Path(dataset[0].image).parent.parent} (upright pages)"
    res = GuardResult(name, len(got["pages"]), c0, c1, round(delta, 4),
                      ref["overall"].get("det_f1"), got["overall"].get("det_f1"),
                      budget_points, delta <= budget_points)
    return res, ref


def time_runtime(rt: Any, inputs: list[np.ndarray], repeats: int = 3) -> float:
    """Median over ``repeats`` of the seconds to run every input once (after one warm-up)."""
    rt.run(inputs[0])
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for x in inputs:
            rt.run(x)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def speed(role: str, candidate: Path, precision: str, engine: OCR, inputs: list[np.ndarray],
          repeats: int = 3) -> dict[str, Any]:
    """Network-only speed of FP32 vs candidate on the same engine inputs (same process, interleaved)."""
    from ocrforge.runtimes.onnxruntime import OrtRuntime

    fp32_rt = engine.runner.cls_runtime() if role == "cls" else getattr(engine.runner, f"{role}_rt")
    cand_rt = OrtRuntime(candidate, engine.config.runtime, precision)
    t32 = time_runtime(fp32_rt, inputs, repeats)
    tc = time_runtime(cand_rt, inputs, repeats)
    return {"inputs": len(inputs), "fp32_s": round(t32, 4), "candidate_s": round(tc, 4),
            "speedup": round(t32 / tc, 3) if tc else None, "repeats": repeats,
            "intra_op_threads": engine.config.runtime.intra_op_threads}
