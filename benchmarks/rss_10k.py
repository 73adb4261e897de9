"""10,000-page job through OCR.read_many: does memory stay flat, do results keep input order?

Pages are small on purpose (so the job finishes in minutes on 2 cores): each is a 360x96
white image with its own index printed twice ("07391 / 07391", OpenCV Hershey font), made
lazily by a generator (the job never holds all pages). Order is checked by reading the index
back from each result: page k must say k. RSS is sampled every 0.2 s by a thread (psutil).

    python benchmarks/rss_10k.py --pages 10000 [--profile p.json] [--out rss.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections.abc import Iterator

import cv2
import numpy as np
import psutil


def page(k: int) -> np.ndarray:
    img = np.full((96, 360, 3), 255, np.uint8)
    cv2.putText(img, f"{k:05d} / {k:05d}", (14, 62), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (0, 0, 0), 2, cv2.LINE_AA)
    return img


def pages(n: int) -> Iterator[np.ndarray]:
    for k in range(n):
        yield page(k)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--profile")
    ap.add_argument("--batch-pages", type=int, default=4)
    ap.add_argument("--out")
    args = ap.parse_args()

    from ocrforge.config import atomic_write_text
    from ocrforge.engine import OCR

    eng = OCR(profile=args.profile) if args.profile else OCR()
    proc = psutil.Process()
    list(eng.read_many(pages(8)))  # warm-up: sessions, arenas
    samples: list[tuple[float, int, int]] = []
    done = [0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), done[0], proc.memory_info().rss))
            stop.wait(0.2)

    rss_start = proc.memory_info().rss
    th = threading.Thread(target=sampler, daemon=True)
    t0 = time.perf_counter()
    th.start()
    wrong_order = 0
    unreadable = 0
    errors = 0
    checkpoints = {}
    for k, pg in enumerate(eng.read_many(pages(args.pages), batch_pages=args.batch_pages)):
        done[0] = k + 1
        if pg.error:
            errors += 1
            continue
        nums = re.findall(r"\d{5}", pg.text.replace(" ", ""))
        if not nums:
            unreadable += 1
        elif int(nums[0]) != k and (len(nums) < 2 or int(nums[1]) != k):
            wrong_order += 1
        if (k + 1) % 1000 == 0:
            checkpoints[k + 1] = proc.memory_info().rss
            print(f"{k + 1:6d} pages  {time.perf_counter() - t0:7.1f}s  RSS {checkpoints[k + 1] / 2**20:7.1f} MiB",
                  flush=True)
    elapsed = time.perf_counter() - t0
    stop.set()
    th.join()
    rss_end = proc.memory_info().rss
    peak = max(s[2] for s in samples) if samples else rss_end
    res = {
        "pages": args.pages, "page_kind": "360x96 generated line image '#####  / #####'",
        "config": eng.config.to_dict(), "elapsed_s": round(elapsed, 1),
        "pages_per_s": round(args.pages / elapsed, 2),
        "rss_mib": {"start": round(rss_start / 2**20, 1), "peak": round(peak / 2**20, 1),
                    "end": round(rss_end / 2**20, 1),
                    "per_1000_pages": {k: round(v / 2**20, 1) for k, v in checkpoints.items()}},
        "results_in_order": wrong_order == 0 and errors == 0,
        "wrong_order": wrong_order, "unreadable": unreadable, "errors": errors,
    }
    print(json.dumps(res["rss_mib"], indent=1))
    print(f"in order: {res['results_in_order']} (wrong {wrong_order}, unreadable {unreadable}, errors {errors}); "
          f"{res['pages_per_s']} pages/s")
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=2) + "\n")
    return 0 if res["results_in_order"] else 1


if __name__ == "__main__":
    sys.exit(main())
