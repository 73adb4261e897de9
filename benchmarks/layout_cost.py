"""CPU cost of the layout stage against the whole page (issue 11: at most 10 % on documents).

    python benchmarks/layout_cost.py DATASET [DATASET ...] [--kinds document,columns] [--limit N]

Every page is read once with the layout stage on (``OCR.layout``); the process CPU time of the
whole read (all threads: decode, detection, recognition, layout) and of ``layout.analyze`` alone
are taken with ``time.process_time``; the share is their ratio, per data set kind and overall.
The layout stage also needs the CTC character steps: ``CTCDecoder.decode_steps`` replaces the
plain collapse; its extra time (decode_steps minus the plain decoder on the same output, both
timed) is counted as layout cost too.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import ocrforge.layout as layout
from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.stages.recognize import CTCDecoder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--kinds", default="document,columns,tables",
                    help="record kinds to measure (comma-separated; default document,columns,tables)")
    ap.add_argument("--limit", type=int, default=10, help="pages per data set (default 10)")
    ap.add_argument("--json", help="write per-page numbers here")
    args = ap.parse_args()
    kinds = set(args.kinds.split(","))
    engine = OCR()
    engine.layout = {}
    spent: list[float] = []
    real = layout.analyze

    def timed(*a, **k):
        t0 = time.process_time()
        try:
            return real(*a, **k)
        finally:
            spent.append(time.process_time() - t0)

    extra: list[float] = []
    plain: list[float] = []
    real_steps = CTCDecoder.decode_steps

    def timed_steps(self, probs, *a, **k):
        t0 = time.process_time()
        out = real_steps(self, probs, *a, **k)
        t1 = time.process_time()
        self(probs)  # the plain decoder on the same output, for the difference
        plain.append(time.process_time() - t1)
        extra.append((t1 - t0) - plain[-1])
        return out

    layout.analyze = timed
    CTCDecoder.decode_steps = timed_steps
    rows = []
    try:
        for ds in args.datasets:
            recs = [r for r in load_dataset(ds) if r.kind in kinds][: args.limit]
            for r in recs:
                spent.clear()
                extra.clear()
                plain.clear()
                t0 = time.process_time()
                page = engine.read(str(r.image))
                # the plain decoder run for comparison is not part of a real read
                total = time.process_time() - t0 - sum(plain)
                cost = sum(spent) + max(sum(extra), 0.0)
                rows.append({"dataset": ds, "image": r.name, "kind": r.kind, "lines": len(page.lines),
                             "page_cpu_s": total, "analyze_cpu_s": sum(spent), "steps_extra_cpu_s": sum(extra),
                             "layout_cpu_s": cost})
                print(f"{r.name[:50]:50s} {r.kind:9s} lines {len(page.lines):4d}  page {total:7.3f} s  "
                      f"analyze {sum(spent):6.3f} s  steps +{sum(extra):6.3f} s  ({100 * cost / total:5.2f} %)",
                      flush=True)
    finally:
        layout.analyze = real
        CTCDecoder.decode_steps = real_steps
    if not rows:
        print("no pages of the kinds asked for")
        return 1
    print(f"\nhost: {platform.machine()}, {platform.python_version()}; per-page CPU share of layout:")
    for kind in sorted({r["kind"] for r in rows}) + ["all"]:
        sel = [r for r in rows if kind in ("all", r["kind"])]
        shares = [r["layout_cpu_s"] / r["page_cpu_s"] for r in sel]
        tot = sum(r["layout_cpu_s"] for r in sel) / sum(r["page_cpu_s"] for r in sel)
        print(f"  {kind:9s} pages {len(sel):3d}  median {100 * statistics.median(shares):5.2f} %  "
              f"max {100 * max(shares):5.2f} %  total {100 * tot:5.2f} %")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
