"""Cost of each export format per page, relative to OCR of the same page (one run,
interleaved repetitions, medians). Usage: python scripts/bench_exporters.py [reps]"""

from __future__ import annotations

import io
import statistics
import sys
import time

import numpy as np
from PIL import Image

from ocrforge import OCR
from ocrforge.evaluation.synth import render_page
from ocrforge.io.exporters import EXPORTERS, export


def main(reps: int = 5) -> None:
    eng = OCR()
    images = []
    for i in range(3):
        data, _, _ = render_page(7, i, kind="document", clean=True)
        rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        images.append(np.ascontiguousarray(rgb[:, :, ::-1]))
    times: dict[str, list[float]] = {"ocr": [], **{f: [] for f in EXPORTERS}}
    for _ in range(reps):
        for img in images:
            t = time.perf_counter()
            page = eng.read(img)
            times["ocr"].append(time.perf_counter() - t)
            page.dpi = 200.0
            for f, e in EXPORTERS.items():
                t = time.perf_counter()
                export([page], f, images=[img] if e.needs_images else None)
                times[f].append(time.perf_counter() - t)
    print("pages (h, w):", [im.shape[:2] for im in images])
    ocr = statistics.median(times["ocr"])
    for k, v in times.items():
        m = statistics.median(v)
        print(f"{k:9s} median {m * 1000:9.2f} ms   share of OCR time {m / ocr:7.2%}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
