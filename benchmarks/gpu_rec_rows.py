"""Recognition rows and pixels the GPU scheduler's code runs (torch on the CPU, the CUDA batch
sizes) over the dev images, with or without ``gpu.rec_pow2_rows``; the page texts go to a JSON
file so two runs can be compared.

    python benchmarks/gpu_rec_rows.py 0|1 [--dev /work/shared/data/ocr-dev] [--texts FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import time

import torch

from ocrforge import OCR


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pow2", type=int, choices=(0, 1))
    ap.add_argument("--dev", default="/work/shared/data/ocr-dev")
    ap.add_argument("--texts", help="write the page texts here (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    imgs = sorted(glob.glob(f"{args.dev}/images/*"))
    eng = OCR(runtime="torch", device="cpu", det_batch_size=8, rec_batch_size=128,
              **{"gpu.rec_pow2_rows": bool(args.pow2)})
    sch = eng.gpu_scheduler()
    t = time.time()
    pages = list(sch.run(imgs))
    st = sch.stats
    if args.texts:
        with open(args.texts, "w", encoding="utf-8") as f:
            json.dump([p.text for p in pages], f, ensure_ascii=False)
    print(json.dumps({"pow2": bool(args.pow2), "lines": st.lines, "rec_batches": st.rec_batches,
                      "rec_rows_run": st.rec_rows_run, "rec_mpx_run": st.rec_mpx_run,
                      "rec_mpx_used": st.rec_mpx_used, "s": time.time() - t}))


if __name__ == "__main__":
    main()
