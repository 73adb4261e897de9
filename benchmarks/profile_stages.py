"""Where does the time go? Per-stage seconds (Page.timings) summed over a data set.

One ``OCR.read`` per image (no pipelining, so stages do not overlap), after one warm-up page.

    python benchmarks/profile_stages.py /work/shared/data/ocr-dev [key=value ...]
    python benchmarks/profile_stages.py DATASET rec_precision=int8-dynamic det_precision=int8
"""

from __future__ import annotations

import sys
import time

import cv2


def main() -> int:
    from ocrforge.engine import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.tools.bench import parse_value

    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    overrides = {k: parse_value(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])}
    eng = OCR(**overrides)
    images = [cv2.imread(str(r.image)) for r in load_dataset(sys.argv[1])]
    eng.read(images[0])
    tm: dict[str, float] = {}
    t0 = time.perf_counter()
    for im in images:
        for k, v in eng.read(im).timings.items():
            tm[k] = tm.get(k, 0.0) + v
    wall = time.perf_counter() - t0
    total = sum(tm.values())
    print(f"{len(images)} pages in {wall:.1f}s ({len(images) / wall:.3f} pages/s); config overrides {overrides}")
    for k, v in sorted(tm.items(), key=lambda kv: -kv[1]):
        print(f"  {k:10s} {v:8.2f}s  {v / total * 100:5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
