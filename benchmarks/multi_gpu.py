"""One engine per GPU (engine.on_devices) vs one engine, same pages, same call (issue 25).

For each labeled data set (a folder with labels.jsonl: the dev set's real pages, synthetic
pages from `ocrforge synth`), its images repeated to --pages, read by one engine on the first
device and by a DevicePool over --devices, interleaved, --reps times; pages/s around the whole
read_many after each engine's warm-up (GPU scheduler buckets captured), and CER of both on the
labeled pages. On one GPU, --devices cuda:0,cuda:0 checks the code path (two engines sharing a
GPU are not expected to be faster). Prints a line per run; JSON to --out.

    PYTHONPATH=src python benchmarks/multi_gpu.py --devices cuda:0,cuda:1 \\
        --data .devset --data /tmp/synth --pages 1000 --reps 2 --out $OUT/multi_gpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np


def run(engine, files: list[str]) -> tuple[float, list]:
    t0 = time.perf_counter()
    pages = list(engine.read_many(files))
    return time.perf_counter() - t0, pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="cuda:0,cuda:1")
    ap.add_argument("--data", action="append", required=True, help="labeled data set folder")
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from ocrforge.engine import OCR, on_devices
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    kw = {"runtime": "torch", "torch_precision": args.precision, "model_dir": args.model_dir}
    kw = {k: v for k, v in kw.items() if v is not None}
    t0 = time.perf_counter()
    one = OCR(device=devices[0], **kw)
    pool = on_devices(devices, None, **kw)
    report: dict = {"devices": devices, "engine_start_s": round(time.perf_counter() - t0, 2),
                    "sets": {}}
    for data in args.data:
        recs = load_dataset(data)
        files = [str(r.image) for r in recs] * (-(-args.pages // len(recs)))
        rng = np.random.default_rng(0)
        rng.shuffle(files)
        files = files[: args.pages]
        warm = files[:64]
        run(one, warm)
        run(pool, warm)  # every engine's scheduler built and warm
        rows = []
        for rep in range(args.reps):
            for name, eng in ([("one", one), ("pool", pool)] if rep % 2 == 0
                              else [("pool", pool), ("one", one)]):
                dt, pages = run(eng, files)
                rows.append({"rep": rep, "engine": name, "pages": len(pages),
                             "pages_per_s": round(len(pages) / dt, 2)})
                print(json.dumps({"data": data, **rows[-1]}), flush=True)
        cer = {}
        for name, eng in (("one", one), ("pool", pool)):
            pages = list(eng.read_many([str(r.image) for r in recs]))
            cer[name] = score_pages(recs, pages)["overall"].get("cer")
        med = {n: statistics.median(r["pages_per_s"] for r in rows if r["engine"] == n)
               for n in ("one", "pool")}
        report["sets"][data] = {"runs": rows, "median_pages_per_s": med,
                                "speedup": round(med["pool"] / med["one"], 3), "cer": cer,
                                "pages_per_device": list(pool.pages_per_device)}
        print(json.dumps({"data": data, **{k: v for k, v in report["sets"][data].items()
                                           if k != "runs"}}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
