"""Default-engine settings on the CPU: one engine per setting, each reading the whole set in turn,
for a few rounds (run where nothing else runs; speed on a shared machine is meaningless).

    python benchmarks/cpu_settings.py DATASET [ROUNDS]      (a labels.jsonl folder)
"""

from __future__ import annotations

import sys
import time

SETTINGS = {"default": {}, "pipelined": {"pipeline.enabled": True},
            "serial": {"pipeline.enabled": False}, "minw160": {"rec.min_width": 160},
            "b6": {"rec.batch_size": 6}, "spin": {"runtime.allow_spinning": True}}


def main() -> None:
    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    recs = load_dataset(sys.argv[1])
    imgs = [str(r.image) for r in recs]
    engines = {k: OCR(**v) for k, v in SETTINGS.items()}
    for e in engines.values():
        list(e.read_many(imgs[:2]))
    for rnd in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
        for name, e in engines.items():
            t0 = time.perf_counter()
            pages = list(e.read_many(imgs))
            el = time.perf_counter() - t0
            sc = score_pages(recs, pages)["overall"]
            print(f"round {rnd} {name:10s} {len(imgs) / el:.3f} pages/s  CER {100 * sc['cer']:.2f} % "
                  f"(aligned {100 * sc['cer_aligned']:.2f} %)  det F1 {100 * sc['det_f1']:.2f} %", flush=True)


if __name__ == "__main__":
    main()
