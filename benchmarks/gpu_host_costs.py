"""Host (CPU) work per page that the GPU pipeline cannot hand to the GPU, measured without one.

At 1000 pages/s every millisecond of host work per page is one busy core; work that holds the
GIL caps the whole process at 1000 / ms pages per second. This script renders one synthetic
document page (gpu_bench.py's renderer), runs the detector once on the CPU to get a real
probability map, then times, with medians over repeats:
  - DB box extraction (DBDecoder on the GPU-made bitmap) per page
  - DB box extraction through ShmDBPool worker processes, pages/s with N processes
  - crop geometry (batched perspective solve) per page
  - CTC collapse of a 128-line batch (vectorised path vs CTCDecoder-style loop)

  PYTHONPATH=src python benchmarks/gpu_host_costs.py --font .models/fonts/simfang-subset.ttf
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def med_ms(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--font", required=True)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--processes", default="1,2")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import cv2
    import gpu_bench as gb
    import torch
    from ocrforge.scheduling.gpu_pipeline import GpuPipeline, _perspective

    from ocrforge import OCR
    from ocrforge.scheduling.db_workers import ShmDBPool

    torch.set_num_threads(2)
    d = Path(tempfile.mkdtemp())
    (d / "images").mkdir()
    rec = gb._render((1, str(d), args.font, 0))
    img = cv2.imread(str(d / rec["image"]))
    kw = {"model_dir": args.model_dir} if args.model_dir else {}
    eng = OCR(runtime="torch", **kw)
    dp = eng.det_prep(img)
    prob = eng.det_rt.run(dp.tensor)[0, 0]
    dec = eng.det_decode
    bitmap = (prob > dec.thresh).astype(np.uint8)
    quads = dec(prob, dp, bitmap)
    print(f"page {img.shape[1]}x{img.shape[0]}, det map {prob.shape[1]}x{prob.shape[0]}, "
          f"{len(rec['lines'])} label lines, {len(quads)} boxes")
    print(f"DB box extraction, in process: {med_ms(lambda: dec(prob, dp, bitmap), 15):.2f} ms/page")
    pu8 = np.round(prob * 255).astype(np.uint8)
    for n in (int(x) for x in args.processes.split(",")):
        pool = ShmDBPool(n, max(prob.shape), (dec.thresh, dec.box_thresh, dec.unclip_ratio,
                                              dec.max_candidates, dec.min_size))
        got = pool.submit(pu8, bitmap, dp.orig_h, dp.orig_w).result()  # spawn + warm-up
        assert len(got) == len(quads)
        pages = 60
        t0 = time.perf_counter()
        futs = [pool.submit(pu8, bitmap, dp.orig_h, dp.orig_w) for _ in range(pages)]
        for f in futs:
            f.result()
        el = time.perf_counter() - t0
        pool.close()
        print(f"DB box extraction, {n} worker process(es): {pages / el:.1f} pages/s")
    q = np.stack(quads).astype(np.float32)
    w = np.full(len(q), 300)
    h = np.full(len(q), 30)
    print(f"crop geometry (batched perspective solve, {len(q)} boxes): "
          f"{med_ms(lambda: _perspective(w, h, q), 50):.3f} ms/page")
    gp = GpuPipeline(eng, post_processes=0)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 18710, (128, 120)).astype(np.int32)
    idx[rng.random(idx.shape) < 0.6] = 0
    conf = rng.random(idx.shape).astype(np.float32)
    fast = med_ms(lambda: gp._ctc(idx.copy(), conf), 30)
    codes, gp._codes = gp._codes, None
    slow = med_ms(lambda: gp._ctc(idx.copy(), conf), 30)
    gp._codes = codes
    print(f"CTC collapse, 128 lines x 120 steps: vectorised {fast:.2f} ms, per-line loop {slow:.2f} ms")


if __name__ == "__main__":
    main()
