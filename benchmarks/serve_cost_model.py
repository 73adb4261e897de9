#!/usr/bin/env python
"""Check the server's admission cost model (ocrforge.server.admission.page_units): engine
seconds per work unit should come out about the same for every kind of page and det_limit.

Pages: the server's warm-up page, a one-line 320x104 image, a three-line 900x232 image and a
letter page (1700x2200 at 200 dpi) with 12 lines, each read at det_limit 640, 960 and 2048;
interleaved repetitions, medians. Prints seconds per unit for the full model and for counting
detection pixels alone (PAGE_OVERHEAD + detection megapixels).

  python benchmarks/serve_cost_model.py --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from serve_pdfs import font, make_pdf  # noqa: E402

from ocrforge.config import ReadOptions  # noqa: E402
from ocrforge.engine import OCR  # noqa: E402
from ocrforge.io.inputs import PageImage  # noqa: E402
from ocrforge.server.admission import PAGE_OVERHEAD, page_units  # noqa: E402
from ocrforge.server.service import _warmup_image  # noqa: E402


def text_page(lines: list[str], width: int) -> PageImage:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, 64 * len(lines) + 40), "white")
    d = ImageDraw.Draw(img)
    for i, t in enumerate(lines):
        d.text((30, 20 + 64 * i), t, fill="black", font=font(40))
    return PageImage(lines[0], 0, cv2.cvtColor(np.asarray(img), cv2.COLOR_RGB2BGR))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    eng = OCR()
    cases = {
        "warm-up 480x160": _warmup_image(),
        "1 line 320x104": text_page(["Burst 42"], 320),
        "3 lines 900x232": text_page(["Hello ocrforge 2026", "你好世界 欢迎使用", "Invoice No. 4711"], 900),
        "letter 12 lines": next(eng.decode(make_pdf(1, "doc"))),
    }
    limits = (640, 960, 2048)
    times: dict[tuple[str, int], list[float]] = {}
    for p in cases.values():  # first run of each shape
        eng.ocr_images([p], ReadOptions(det_limit_side=limits[0]))
    load0 = os.getloadavg()
    for _ in range(args.reps):
        for lim in limits:
            for name, p in cases.items():
                t = time.perf_counter()
                eng.ocr_images([p], ReadOptions(det_limit_side=lim))
                times.setdefault((name, lim), []).append(time.perf_counter() - t)
    print(f"load average {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}, {args.reps} reps, medians")
    print("| page | det_limit | seconds | units | s/unit | det-pixels-only units | s/unit |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    full, det_only = [], []
    for (name, lim), v in times.items():
        p = cases[name]
        h, w = eng.det_shape(p.width, p.height, lim)
        u = page_units(p.width, p.height, (h, w))
        u0 = PAGE_OVERHEAD + h * w / 1e6
        t = statistics.median(v)
        full.append(t / u)
        det_only.append(t / u0)
        print(f"| {name} | {lim} | {t:.3f} | {u:.2f} | {t / u:.2f} | {u0:.2f} | {t / u0:.2f} |")
    print(f"max/min s/unit: model {max(full) / min(full):.2f}, "
          f"detection pixels alone {max(det_only) / min(det_only):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
