"""Memory on a real page size at the defaults: one A4 page at 200 dpi (1654x2339, 45 lines)
peaks at no more than 1 GiB of resident memory (docs/BENCHMARKS.md "Memory on A4 pages")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_pages.py"


def test_one_a4_page_peaks_under_1_gib(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    make = ("import sys; sys.path.insert(0, sys.argv[2]); import memory_pages as m; "
            "m.make_pdf(__import__('pathlib').Path(sys.argv[1]), 1)")
    pdf = tmp_path / "a4.pdf"
    subprocess.run([sys.executable, "-c", make, str(pdf), str(BENCH.parent)], env=env,
                   check=True, timeout=120)
    r = subprocess.run([sys.executable, str(BENCH), "--child", str(pdf), "1", "{}", "one"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    import json

    peak = json.loads(r.stdout.strip().splitlines()[-1])["peak_one_page_mib"]
    assert peak <= 1024, f"one A4 page peaked at {peak:.0f} MiB"


class _ShapeSpy:
    """Runtime wrapper that records every input shape (the real runtime computes)."""

    def __init__(self, rt):
        self.rt, self.shapes = rt, []

    def run(self, x):
        self.shapes.append(x.shape)
        return self.rt.run(x)


def test_wide_lines_run_in_smaller_batches_and_read_the_same(engine):
    """A page of many very wide lines (16 x 3200 px in one call peaked at 1.7 GB on the CPU)
    is split by the line-pixel budget; each line reads exactly as in one unbudgeted batch."""
    from conftest import render_lines, to_bgr

    from ocrforge.core import PageRunner

    text = "Invoice 2024-0117 total amount due 1,234.56 EUR paid in full on 14 May by transfer"
    crops = []
    for k in range(12):
        img = render_lines([f"{k} {text}"], size=28, margin=6).image
        crops.append(to_bgr(img))
    results = {}
    for name, budget in (("budget", None), ("one_batch", 10**9)):
        cfg = engine.config.with_(**{"rec.batch_pixels": budget})
        spy = _ShapeSpy(engine.runner.rec_rt)
        runner = PageRunner(cfg, engine.models, engine.runner.det_rt, spy, engine.runner._cls_factory)
        results[name] = ([t for t, _ in runner.recognize_crops(list(crops))[0]], spy.shapes)
    budget = engine.config.rec_batch_pixels()
    assert budget is not None and budget < 16 * 3200
    assert all(n * w <= max(budget, w) for n, _, _, w in results["budget"][1]), results["budget"][1]
    assert len(results["budget"][1]) > len(results["one_batch"][1])
    assert results["budget"][0] == results["one_batch"][0]
    assert sum(ch in results["budget"][0][3] for ch in "Invoice total") >= 10


_ARENA_FAULTS = """
import json, resource
import numpy as np
from ocrforge import OCR

def faults(run, n=1):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        run()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

engine = OCR(runtime="onnxruntime")  # the ONNX Runtime arena (OpenVINO has none)
det = engine.runner.det_rt
x = np.random.default_rng(0).random((1, 3, 640, 960), dtype=np.float32)
det.run(x)
kept = faults(lambda: det.run(x), 3)
det.release_memory()  # what recognition does first: the arena goes back
print(json.dumps({"kept": kept, "refaulted": faults(lambda: det.run(x)),
                  "shrink": engine.config.runtime.shrink_arena,
                  "det_opts": det.run_options is not None,
                  "rec_opts": engine.runner.rec_rt.run_options is not None}))
"""


def test_detection_keeps_its_arena_between_pages_and_recognition_gives_it_back():
    """With the arena given back after every run, each detection call faulted its activations
    in again (a 768x1312 page: 39k page faults, +26 % CPU per call, 2-core VM; docs/BENCHMARKS.md
    "the detection arena"). Detection shapes repeat page after page, so its arena is kept;
    recognition shapes vary line by line, so its arena is still returned. Page faults are counted
    in a fresh process, as a CLI run has it: late in the test session the run after a release
    faulted nothing, with a fresh engine too (CI, 2026-12-04; alone it passes). Cause not found:
    not glibc's mmap threshold (raised to 256 MB, or by large frees first, the fresh process
    still refaults 22k pages), not importing torch."""
    import json
    import subprocess
    import sys

    from ocrforge import OCR

    out = subprocess.run([sys.executable, "-c", _ARENA_FAULTS], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["shrink"] is None  # auto: per network
    assert not got["det_opts"] and got["rec_opts"]
    assert got["kept"] < 3000, f"{got['kept']} page faults in 3 detection calls of one shape"
    assert got["refaulted"] > 5 * max(got["kept"], 1000), got
    every = OCR(runtime="onnxruntime", **{"runtime.shrink_arena": True})
    assert every.runner.det_rt.run_options is not None and every.runner.rec_rt.run_options is not None
    none = OCR(runtime="onnxruntime", **{"runtime.shrink_arena": False})
    assert none.runner.det_rt.run_options is None and none.runner.rec_rt.run_options is None
