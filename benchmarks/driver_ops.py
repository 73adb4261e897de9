"""How many PyTorch operations the GPU driver thread issues a page, by step (on the CPU).

The driver thread bounds the GPU engine (docs/BENCHMARKS.md, "The driver thread is the
bound"): each operation it issues costs host time in the dispatcher and the launch, whatever
the device. Counting them needs no GPU: this runs the GPU scheduler's code on the CPU (the
same steps; network calls count as one operation each, as a graph replay would be) and counts
the ATen calls of the driver thread per step, for detection, cutting lines and the rest.

    python benchmarks/driver_ops.py [IMAGES_DIR] [PAGES]

Prints JSON: operations a page by step and by ATen name (the most frequent).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ocrforge import OCR
from ocrforge.runtimes.torch import TorchRuntime
from ocrforge.scheduling.gpu_loop import STEPS, DriverLoop


class OpCounter(TorchDispatchMode):
    """Counts ATen calls by the step under way (thread-local: entered in the driver thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.step = "other"
        self.by_step: Counter = Counter()
        self.by_op: Counter = Counter()
        self.muted = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if not self.muted:
            self.by_step[self.step] += 1
            self.by_op[f"{self.step}:{func.overloadpacket.__name__}"] += 1
        return func(*args, **(kwargs or {}))


COUNTER: dict[int, OpCounter] = {}


def _patch() -> None:
    run, forward = DriverLoop.run, TorchRuntime.forward

    def counted_run(self: DriverLoop) -> None:
        mode = COUNTER[threading.get_ident()] = OpCounter()
        with mode:
            run(self)

    def counted_step(self: DriverLoop) -> bool:
        mode = COUNTER.get(threading.get_ident())
        progress = False
        for name in STEPS:
            if mode is not None:
                mode.step = name
            progress |= getattr(self, name)()
        if mode is not None:
            mode.step = "other"
        return progress

    def counted_forward(self: TorchRuntime, x: torch.Tensor, post: object = None) -> object:
        mode = COUNTER.get(threading.get_ident())
        if mode is None:
            return forward(self, x, post)
        mode.by_step[mode.step] += 1  # one network call: one replay on a GPU
        mode.by_op[f"{mode.step}:network"] += 1
        mode.muted += 1
        try:
            return forward(self, x, post)
        finally:
            mode.muted -= 1

    DriverLoop.run, DriverLoop.step, TorchRuntime.forward = counted_run, counted_step, counted_forward


def main() -> None:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/ocr-dev/images")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    files = sorted(p for p in src.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})[:n]
    torch.set_num_threads(2)
    _patch()
    eng = OCR(runtime="torch", device="cpu")
    sch = eng.gpu_scheduler()
    t0 = time.perf_counter()
    pages = list(sch.run([str(f) for f in files]))
    wall = time.perf_counter() - t0
    (mode,) = COUNTER.values()
    k = len(pages)
    out = {"pages": k, "lines": sum(len(p.lines) for p in pages), "wall_s": round(wall, 1),
           "ops_per_page": round(sum(mode.by_step.values()) / k, 1),
           "by_step": {s: round(c / k, 1) for s, c in mode.by_step.most_common()},
           "by_op": {o: round(c / k, 2) for o, c in mode.by_op.most_common(40)},
           "stats": {"det_batches": sch.stats.det_batches, "rec_batches": sch.stats.rec_batches,
                     "orient_batches": sch.stats.orient_batches,
                     "orient_second": sch.stats.orient_second}}
    print(json.dumps(out, indent=1))
    eng.close()


if __name__ == "__main__":
    main()
