"""Which operators of the GPU networks own the device time (issue 19): each network of the
default GPU engine (FP16, channels_last) runs eagerly at one typical shape of the scheduler, five
times under torch.profiler, and the operators are listed by their own device time with the full
kernel names; then the per-network totals again with cuDNN autotuning and with TF32 matmuls
(the recognition head stays FP32). CUDA graphs are off here so that every kernel is seen with the operator that
launched it (a graph replay shows as one launch).

    python benchmarks/gpu_ops.py [--out ops.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.profiler import ProfilerActivity, profile

from ocrforge import OCR


def _shapes(gp) -> dict[str, tuple[object, tuple[int, ...]]]:
    hb, wb = gp.page_buckets[len(gp.page_buckets) // 2]
    rp = gp.runner.rec_prep
    out = {"det": (gp.det, (gp.det_batch_for((hb, wb)), 3, hb, wb))}
    for w in (320, 640):
        out[f"rec{w}"] = (gp.rec, (gp.rec_batch_for(w), 3, rp.height, w))
    ori = gp.orient_runtime()
    if ori is not None:
        from ocrforge.stages import page_orientation as po

        out["orient"] = (ori, (max(gp.orient_shapes), 3, po.SIZE, po.SIZE))
    return out


def _sync(rt) -> None:
    if rt.cuda:
        torch.cuda.synchronize(rt.dev)


def _profile(rt, shape: tuple[int, ...], iters: int) -> dict:
    x = torch.rand(shape, device=rt.dev, dtype=rt.dtype)
    for _ in range(3):
        rt.forward(x)
    _sync(rt)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            rt.forward(x)
        _sync(rt)
    ops = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    ops.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in ops if e.device_type.name == "CPU")
    rows = [{"op": e.key, "calls": e.count // iters, "device_ms_per_call": e.self_device_time_total / iters / 1e3,
             "kind": e.device_type.name} for e in ops[:30]]
    return {"shape": list(shape), "device_ms_per_call": total / iters / 1e3, "ops": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    eng = OCR(runtime="torch", device=args.device, torch_precision="fp16", cuda_graphs=False)
    gp = eng.gpu_scheduler()
    res = {}
    for name, (rt, shape) in _shapes(gp).items():
        t0 = time.perf_counter()
        res[name] = r = _profile(rt, shape, args.iters)
        print(f"== {name} {shape}: {r['device_ms_per_call']:.2f} ms device per call "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
        for o in r["ops"][:22]:
            print(f"  {o['device_ms_per_call']:8.3f} ms x{o['calls']:<4d} {o['kind'][:4]} {o['op'][:150]}")
    if args.device.startswith("cuda"):
        # the same shapes with two process-wide switches the engine leaves off by default
        for label, switch in (("cudnn.benchmark", "cudnn"), ("+ TF32 matmul", "tf32")):
            if switch == "cudnn":
                torch.backends.cudnn.benchmark = True
            else:
                torch.backends.cuda.matmul.allow_tf32 = True
            res[label] = {n: _profile(rt, shp, args.iters)["device_ms_per_call"]
                          for n, (rt, shp) in _shapes(gp).items()}
            print(f"== {label}: " + ", ".join(f"{n} {v:.2f} ms" for n, v in res[label].items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
