"""The DB step (DBDecoder) on the dev set's probability maps, the current code against a copy
of an earlier detect.py (e.g. `git show REV:src/ocrforge/stages/detect.py > /tmp/detect_old.py`):
identical boxes, and ms per page, interleaved repetitions, one OpenCV thread. Run on a quiet
machine.

    python benchmarks/db_to_page.py /tmp/detect_old.py [--dev /work/shared/data/ocr-dev] [--reps 5]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import statistics
import sys
import time

import cv2
import numpy as np

import ocrforge.stages.detect as current
from ocrforge import OCR


def load_old(path: str):
    spec = importlib.util.spec_from_file_location("ocrforge.stages.detect_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def capture(dev: str) -> tuple[list, object]:
    ocr = OCR()
    maps: list = []
    dec = ocr.runner.det_decode

    def keep(prob, d, bitmap=None):
        maps.append((prob.copy(), d))
        return dec(prob, d, bitmap)

    ocr.runner.det_decode = keep
    for f in sorted(glob.glob(f"{dev}/images/*")):
        ocr.read(f)
    return maps, dec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("--dev", default="/work/shared/data/ocr-dev")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    cv2.setNumThreads(1)
    maps, cur = capture(args.dev)
    kw = dict(thresh=cur.thresh, box_thresh=cur.box_thresh, unclip_ratio=cur.unclip_ratio,
              order=cur.order)
    decs = {"before": load_old(args.old).DBDecoder(**kw), "now": current.DBDecoder(**kw)}
    bms = [(p > cur.thresh).astype(np.uint8) for p, _ in maps]
    outs = {k: [dec(p, d, b) for (p, d), b in zip(maps, bms, strict=True)] for k, dec in decs.items()}
    same = all(len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
               for a, b in zip(outs["before"], outs["now"], strict=True))
    ms: dict[str, list[float]] = {k: [] for k in decs}
    for _ in range(args.reps):
        for k, dec in decs.items():
            t0 = time.perf_counter()
            for (p, d), b in zip(maps, bms, strict=True):
                dec(p, d, b)
            ms[k].append((time.perf_counter() - t0) / len(maps) * 1e3)
    print(f"{len(maps)} maps, {sum(map(len, outs['now']))} boxes, identical: {same}")
    for k, v in ms.items():
        print(f"{k}: median {statistics.median(v):.2f} ms/page  {[round(x, 2) for x in v]}")


if __name__ == "__main__":
    main()
