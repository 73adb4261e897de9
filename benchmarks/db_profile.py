"""Where DB box extraction spends its CPU time, on real pages (no GPU needed).

Runs the default CPU engine's detection network once per image to get the real probability
map and grey plane, then calls the engine's DBDecoder on them under cProfile (the same call
the GPU scheduler's contour workers make per page) and prints ms a page and the functions
with the most own and cumulative time. Proportions, not a timing: run it alone on the machine
for the ms figure to mean anything.

    python benchmarks/db_profile.py IMAGES_DIR [PAGES] [REPEATS]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

from ocrforge import OCR
from ocrforge.io.inputs import load_image


def maps(eng: OCR, paths: list[Path]) -> list[tuple]:
    """(probability map, DetInput) per page, as the CPU runner's detect() makes them."""
    runner = eng.runner
    limit = eng.config.det.limit_side
    out = []
    for path in paths:
        d = runner.det_prep(load_image(str(path)), limit, False)
        prob = runner.det_rt.run(d.tensor)
        h, w = d.size()
        out.append((prob[0, 0, :h, :w].copy(), d))
    return out


def main() -> None:
    images = sorted(Path(sys.argv[1]).iterdir())[: int(sys.argv[2]) if len(sys.argv) > 2 else 20]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    eng = OCR(runtime="onnxruntime")
    pages = maps(eng, images)
    dec = eng.runner.det_decode
    for prob, d in pages:  # warm-up
        dec(prob, d)
    prof = cProfile.Profile()
    t0 = time.process_time()
    prof.enable()
    boxes = 0
    for _ in range(repeats):
        for prob, d in pages:
            boxes += len(dec(prob, d))
    prof.disable()
    per_page = (time.process_time() - t0) / (repeats * len(pages)) * 1e3
    print(f"{len(pages)} pages x {repeats}: {per_page:.2f} ms CPU a page under cProfile, "
          f"{boxes / repeats / len(pages):.1f} boxes a page")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(18)
        print(s.getvalue()[-4000:])


if __name__ == "__main__":
    main()
