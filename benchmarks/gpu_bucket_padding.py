"""Detection padding of page-shape rules, computed from page sizes alone (no network): the
pixels detection runs (the page's bucket) over those it needs (the page at detector size), and
how many distinct shapes (CUDA graphs) each rule makes.

    python benchmarks/gpu_bucket_padding.py [--dev /work/shared/data/ocr-dev]

The rule is chosen on the "typical" list (common scan, photo, screenshot and receipt sizes);
the dev set is reported beside it.
"""

from __future__ import annotations

import argparse
import glob

import cv2

from ocrforge import OCR

TYPICAL = [(3508, 2480), (2339, 1654), (1754, 1240), (3300, 2550), (2200, 1700), (1650, 1275),
           (1080, 1920), (768, 1366), (900, 1440), (2532, 1170), (2400, 1080), (1600, 576),
           (2200, 576), (1200, 384), (1448, 1024), (1024, 1448), (480, 640), (720, 1280),
           (64, 320), (48, 480)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", default="/work/shared/data/ocr-dev")
    args = ap.parse_args()
    dev = [cv2.imread(f).shape[:2] for f in sorted(glob.glob(f"{args.dev}/images/*"))]
    for step in (0, 256, 128):
        eng = OCR(runtime="torch", device="cpu", **{"gpu.bucket_step": step})
        sch = eng.gpu_scheduler()
        for name, sizes in (("typical", TYPICAL), ("dev", dev)):
            used = run = 0
            shapes = set()
            for h, w in sizes:
                rh, rw = eng.runner.det_prep.shape(h, w, sch.limit)
                b = sch.page_bucket(rh, rw)
                used += rh * rw
                run += b[0] * b[1]
                shapes.add(b)
            label = f"step {step}" if step else "page buckets"
            print(f"{label:13s} {name:8s} padding {run / used:.3f}x  shapes {len(shapes)}")


if __name__ == "__main__":
    main()
