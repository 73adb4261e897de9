"""Why OpenVINO BF16 was slower than ONNX Runtime FP32 on the 16-core Intel host (AMX) while it
was 1.4-1.8x faster on the AMD VM: per-network timings at fixed shapes, the threads and precision
OpenVINO chose, and the default engine end to end with OpenVINO's per-shape kernel cache at 100
(the runtime's setting) and 5000 (OpenVINO's own default).

    taskset -c 0,1 python benchmarks/ov_probe.py --models DIR --dev DEVSET [--warmup-pages 10]

Run it where nothing else runs; it prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

SHAPES = {"det": [(1, 3, 960, 736), (1, 3, 1600, 1216)],
          "rec": [(16, 3, 48, 320), (8, 3, 48, 640), (6, 3, 48, 800)]}


def _median_ms(fn, x: np.ndarray, reps: int) -> float:
    for _ in range(2):
        fn(x)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(x)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def networks(models: Path, reps: int) -> None:
    import onnxruntime as ort
    import openvino as ov

    core = ov.Core()
    caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    print(json.dumps({"openvino": ov.__version__, "onnxruntime": ort.__version__,
                      "cpu_caps": list(caps), "affinity": sorted(os.sched_getaffinity(0))}), flush=True)
    files = {"det": models / "ppocrv6/small/det/det.onnx", "rec": models / "ppocrv6/small/rec/rec.onnx"}
    threads = len(os.sched_getaffinity(0))
    for net, path in files.items():
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        runners = {"ort-fp32": lambda x, s=sess, n=name: s.run(None, {n: x})}
        for prec in ("f32", "bf16"):
            for nt in (0, threads):
                props = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": prec}
                if nt:
                    props["INFERENCE_NUM_THREADS"] = nt
                cm = core.compile_model(core.read_model(str(path)), "CPU", props)
                req = cm.create_infer_request()
                used = cm.get_property("INFERENCE_NUM_THREADS")
                runners[f"ov-{prec}-threads{nt or 'auto'}({used})"] = lambda x, r=req: r.infer({0: x})
        for shape in SHAPES[net]:
            x = np.random.default_rng(0).random(shape, dtype=np.float32)
            row = {"net": net, "shape": shape}
            for rname, fn in runners.items():
                t0 = time.perf_counter()
                fn(x)
                row[f"{rname} first ms"] = round((time.perf_counter() - t0) * 1e3, 1)
                row[f"{rname} ms"] = round(_median_ms(fn, x, reps), 1)
            print(json.dumps(row), flush=True)


def engines(dev: Path, warmup_pages: int, names: list[str]) -> None:
    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    recs = load_dataset(dev)
    imgs = [str(r.image) for r in recs]
    warm, timed = imgs[:warmup_pages], imgs
    configs = {"ort": ({}, None), "ov-c100": ({"runtime": "openvino"}, None),
               "ov-c5000": ({"runtime": "openvino"}, "5000"),
               "ov-f32": ({"runtime": "openvino", "runtime.openvino_precision": "f32"}, None)}
    for rnd in range(2):
        for name in names:
            kw, cache = configs[name]
            if cache:
                os.environ["OCRFORGE_OV_CACHE"] = cache
            else:
                os.environ.pop("OCRFORGE_OV_CACHE", None)
            eng = OCR(**kw)
            list(eng.read_many(warm))
            c0, t0 = os.times(), time.perf_counter()
            pages = list(eng.read_many(timed))
            el, c1 = time.perf_counter() - t0, os.times()
            sc = score_pages(recs, pages)["overall"]
            import resource

            print(json.dumps({"round": rnd, "engine": name, "runtime": str(eng.det_rt.name),
                              "pages": len(timed), "pages_per_s": round(len(timed) / el, 3),
                              "cpu_s_per_page": round((c1.user + c1.system - c0.user - c0.system) / len(timed), 3),
                              "cer": sc.get("cer"), "det_f1": sc.get("det_f1"),
                              "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}),
                  flush=True)
            eng.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--dev", type=Path)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--warmup-pages", type=int, default=10)
    ap.add_argument("--engines", default="ort,ov-c100,ov-c5000")
    a = ap.parse_args()
    networks(a.models, a.reps)
    if a.dev:
        engines(a.dev, a.warmup_pages, a.engines.split(","))


if __name__ == "__main__":
    main()
