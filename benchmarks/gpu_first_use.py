"""What the first runs of a new input shape cost the calling thread on the GPU (issue 19).

For detection at a middle page bucket and recognition at widths 320 and 640 (the scheduler's
batch sizes, FP16, eager, GPU otherwise idle), each in a fresh thread: host seconds of calls
1-3 (enqueue, then the wait for the device), then the same shape's first call in a second fresh
thread (PyTorch keeps cuDNN's execution plans per thread), and the device time per call once
warm (CUDA events, 10 calls). Once with cuDNN's depthwise convolutions and once with
OCRFORGE_TORCH_DEPTHWISE=native. (Device times before 2026-12-06 04:40 UTC included the timing
thread's plan build: ~1/10 of it per call.)

    python benchmarks/gpu_first_use.py --out first_use.json
    TORCH_CUDNN_V8_API_DISABLED=1 python benchmarks/gpu_first_use.py --modes cudnn --out v7.json
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import torch

from ocrforge import OCR


def _in_thread(fn):
    box: dict = {}

    def run() -> None:
        with torch.inference_mode():
            box["v"] = fn()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return box["v"]


def _calls(rt, x, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        rt.fn(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out.append({"enqueue_s": round(t1 - t0, 4), "total_s": round(time.perf_counter() - t0, 4)})
    return out


def _device_ms(rt, x, n: int = 10) -> float:
    rt.fn(x)  # this thread's first call builds its plans: not device time
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        rt.fn(x)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


def measure(mode: str) -> dict:
    os.environ["OCRFORGE_TORCH_DEPTHWISE"] = mode
    eng = OCR(device="cuda")
    gp = eng.gpu_scheduler()
    hb, wb = gp.page_buckets[len(gp.page_buckets) // 2]
    rp = gp.runner.rec_prep
    shapes = {"det": (gp.det, (gp.det_batch_for((hb, wb)), 3, hb, wb))}
    for w in (320, 640):
        shapes[f"rec{w}"] = (gp.rec, (gp.rec_batch_for(w), 3, rp.height, w))
    res: dict = {"depthwise_replaced": {"det": gp.det.depthwise, "rec": gp.rec.depthwise}}
    for name, (rt, shp) in shapes.items():
        x = rt._prepare(torch.rand(shp, device=rt.dev))
        first = _in_thread(lambda rt=rt, x=x: _calls(rt, x, 3))
        again = _in_thread(lambda rt=rt, x=x: _calls(rt, x, 1))
        dev = _in_thread(lambda rt=rt, x=x: _device_ms(rt, x))
        res[name] = {"shape": shp, "first_thread": first, "second_thread": again, "device_ms": dev}
        print(mode, name, shp, res[name], flush=True)
    eng.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--modes", default="cudnn,native", help="depthwise modes, comma-separated")
    args = ap.parse_args()
    out = {m: measure(m) for m in args.modes.split(",")}
    out["env"] = {k: v for k, v in os.environ.items() if k.startswith(("TORCH_CUDNN", "OCRFORGE"))}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
