#!/usr/bin/env python
"""Peak RSS of one `engine.ocr_images` call on N letter pages (1700x2200, 12 lines) in a fresh
process: how the engine's working memory grows with the pages in one call.

  python benchmarks/engine_batch_memory.py 1 960; python benchmarks/engine_batch_memory.py 4 960
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve_pdfs import make_pdf  # noqa: E402

from ocrforge.config import ReadOptions  # noqa: E402
from ocrforge.engine import OCR  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    n, limit = int(sys.argv[1]), int(sys.argv[2])
    eng = OCR()
    pages = list(eng.decode(make_pdf(n, "doc")))
    before = peak_mb()
    t = time.perf_counter()
    eng.ocr_images(pages, ReadOptions(det_limit_side=limit))
    print(f"{n} page(s) at det_limit {limit}: peak RSS {before:.0f} MB after decoding -> "
          f"{peak_mb():.0f} MB after ocr_images ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
