"""Peak resident memory (VmHWM) of one engine over a folder of images, read with read_many.

    python benchmarks/devset_peak_rss.py '{"runtime": "openvino"}' [IMAGES_DIR]

The JSON argument is passed to ``OCR(**kw)`` (dotted keys allowed: ``{"rec.batch_pixels": 5120}``).
Memory only: wall time is printed but means nothing on a shared machine.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ocrforge import OCR


def main() -> int:
    kw = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    folder = Path(sys.argv[2] if len(sys.argv) > 2 else "/work/shared/data/ocr-dev/images")
    images = sorted(str(p) for p in folder.iterdir() if p.is_file())
    engine = OCR(**kw)
    t0 = time.time()
    pages = sum(1 for _ in engine.read_many(images))
    hwm = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    print(json.dumps({"kw": kw, "pages": pages, "wall_s": round(time.time() - t0, 1),
                      "peak_mib": int(hwm.split()[1]) // 1024}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
