"""Dev-set accuracy and detection pixels of the GPU scheduler's code on the CPU for one
``gpu.bucket_step`` (0: the page buckets): does a detection-shape grid read as well?

    python benchmarks/gpu_bucket_accuracy.py STEP [--dev /work/shared/data/ocr-dev]

Prints one JSON line: CER, aligned CER, det F1, and the megapixels detection ran against
those the pages needed. Slow (torch on the CPU, one thread): ~12 min for the 56 dev pages.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", type=int)
    ap.add_argument("--dev", default="/work/shared/data/ocr-dev")
    args = ap.parse_args()
    torch.set_num_threads(1)
    recs = load_dataset(args.dev)
    # the CUDA default batch sizes, so the batches are shaped as on the GPU
    eng = OCR(runtime="torch", device="cpu", det_batch_size=8, rec_batch_size=128,
              **{"gpu.bucket_step": args.step})
    sch = eng.gpu_scheduler()
    t = time.time()
    pages = list(sch.run([str(r.image) for r in recs]))
    sc = score_pages(recs, pages)["overall"]
    st = sch.stats
    print(json.dumps({"step": args.step, "cer": sc.get("cer"), "cer_aligned": sc.get("cer_aligned"),
                      "det_f1": sc.get("det_f1"), "det_mpx_run": st.det_mpx_run,
                      "det_mpx_used": st.det_mpx_used, "s": time.time() - t}))


if __name__ == "__main__":
    main()
