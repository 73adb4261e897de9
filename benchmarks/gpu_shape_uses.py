"""How often each network input shape is used by the GPU scheduler's code (torch on the CPU,
the CUDA batch sizes) over the dev images read N times, and what a capture policy would cost:
with CUDA graphs a shape runs eagerly until its use number capture_after + 1, then is captured
once (0.3-1.5 s of the driver thread each on the H100/H200) and replayed.

    python benchmarks/gpu_shape_uses.py [default|lesspad|step256|pow2] [--times 2] [--out F]
"""

from __future__ import annotations

import argparse
import glob
import json
import time
from collections import Counter

import torch

from ocrforge import OCR
from ocrforge.runtimes.torch import TorchRuntime

CONFIGS = {"default": {}, "step256": {"gpu.bucket_step": 256}, "pow2": {"gpu.rec_pow2_rows": True},
           "lesspad": {"gpu.bucket_step": 256, "gpu.rec_pow2_rows": True}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", choices=sorted(CONFIGS), nargs="?", default="default")
    ap.add_argument("--dev", default="/work/shared/data/ocr-dev")
    ap.add_argument("--times", type=int, default=2, help="read the dev images this many times")
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(1)
    uses: Counter = Counter()
    forward = TorchRuntime.forward

    def counting(self, x, post=None):
        uses[(self.label, tuple(x.shape))] += 1
        return forward(self, x, post)

    TorchRuntime.forward = counting
    imgs = sorted(glob.glob(f"{args.dev}/images/*"))
    eng = OCR(runtime="torch", device="cpu", det_batch_size=8, rec_batch_size=128,
              **CONFIGS[args.config])
    sch = eng.gpu_scheduler()
    t = time.time()
    for _ in range(args.times):
        list(sch.run(imgs))
    policy = {}
    for k in (1, 2, 4, 8, 16, 32):
        policy[k] = {net: {"captures": sum(n > k for (lb, _), n in uses.items() if lb == net),
                           "eager_calls": sum(min(n, k) for (lb, _), n in uses.items() if lb == net)}
                     for net in sorted({lb for lb, _ in uses})}
    res = {"config": args.config, "pages": len(imgs) * args.times, "s": round(time.time() - t, 1),
           "shapes": {f"{lb} {list(s)}": n for (lb, s), n in uses.most_common()},
           "capture_after": policy}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res["capture_after"]))


if __name__ == "__main__":
    main()
