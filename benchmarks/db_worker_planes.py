"""DB box extraction as a worker process does it, with the planes read two ways: the old
(float via astype then a scaled copy, bitmap and grey copied out of shared memory) and the
current (one-pass float, planes in place). Probability maps come from the default CPU engine
on the dev images (the detector's own output); maps under 0.1 Mpx are skipped.

    python benchmarks/db_worker_planes.py [--dev /work/shared/data/ocr-dev] [--reps 3]

Prints ms per page for each way (interleaved repetitions) and whether the boxes are identical.
Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import glob
import time

import cv2
import numpy as np

from ocrforge import OCR
from ocrforge.stages.detect import DBDecoder, DetInput


def capture(dev: str) -> list[tuple]:
    ocr = OCR()
    runner = ocr.runner
    maps: list[tuple] = []
    orig = runner.det_decode

    def keep(prob, d, bitmap=None):
        if prob.size > 100_000:
            maps.append((np.round(prob * 255).astype(np.uint8), d.orig_h, d.orig_w, d.gray))
        return orig(prob, d, bitmap)

    runner.det_decode = keep
    for f in sorted(glob.glob(f"{dev}/images/*")):
        ocr.read(f)
    return maps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", default="/work/shared/data/ocr-dev")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cv2.setNumThreads(1)
    maps = [(u8, (u8 > 76).astype(np.uint8), g, h, w) for u8, h, w, g in capture(args.dev)]
    dec = DBDecoder(0.3, 0.6, 1.5)
    ways = {
        "copies": lambda u8, bm, g: (u8.astype(np.float32) * (1.0 / 255.0), bm.copy(), g.copy()),
        "in place": lambda u8, bm, g: (np.multiply(u8, np.float32(1.0 / 255.0), dtype=np.float32), bm, g),
    }
    ms: dict[str, list[float]] = {k: [] for k in ways}
    boxes: dict[str, list] = {}
    for _ in range(args.reps):
        for name, planes in ways.items():
            t = time.perf_counter()
            out = []
            for u8, bm, g, h, w in maps:
                prob, b, gg = planes(u8, bm, g)
                rh, rw = u8.shape
                out.append(dec(prob, DetInput(np.empty((1, 3, 1, 1), np.float32), rh / h, rw / w, h, w, gg), b))
            ms[name].append((time.perf_counter() - t) / len(maps) * 1e3)
            boxes[name] = out
    same = all(len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
               for a, b in zip(boxes["copies"], boxes["in place"], strict=True))
    for name, v in ms.items():
        print(f"{name:9s} ms/page {[round(x, 2) for x in v]} median {np.median(v):.2f}")
    print(f"{len(maps)} maps, identical boxes: {same}")


if __name__ == "__main__":
    main()
