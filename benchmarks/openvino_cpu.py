"""ONNX Runtime vs OpenVINO (runtime "openvino", precision auto and f32) on the CPU: pages/s,
CER and det F1 on the dev set and on synthetic pages, engines interleaved per set.

Each engine first reads warm-up pages of another set (OpenVINO compiles kernels for the shapes
it meets; that cost is paid once per process), then every page of the set, timed.

    python benchmarks/openvino_cpu.py --dev /work/shared/data/ocr-dev --synth DIR \
        --warmup DIR2 [--engines ort,ov-auto,ov-f32] [--out FILE.json]

Run it where nothing else runs (speed on a shared machine is meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

ENGINES = {"ort": {}, "ov-auto": {"runtime": "openvino"},
           "ov-f32": {"runtime": "openvino", "runtime.openvino_precision": "f32"},
           "ov-bf16": {"runtime": "openvino", "runtime.openvino_precision": "bf16"},
           # detection resolution (issue 22): no enlarging of small pages; a lower cap
           "ort-up1": {"det.max_upscale": 1.0}, "ort-1280": {"det_limit_side": 1280},
           "ov-up1": {"runtime": "openvino", "det.max_upscale": 1.0}}


def main() -> None:
    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", type=Path)
    ap.add_argument("--synth", type=Path)
    ap.add_argument("--warmup", type=Path, required=True)
    ap.add_argument("--warmup-pages", type=int, default=10)
    ap.add_argument("--engines", default="ort,ov-auto")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    warm = [str(r.image) for r in load_dataset(a.warmup)[: a.warmup_pages]]
    rows = []
    for set_name, d in (("dev", a.dev), ("synth", a.synth)):
        if d is None:
            continue
        recs = load_dataset(d)
        imgs = [str(r.image) for r in recs]
        for name in a.engines.split(","):
            eng = OCR(**ENGINES[name])
            list(eng.read_many(warm))
            c0, t0 = os.times(), time.perf_counter()
            pages = list(eng.read_many(imgs))
            el, c1 = time.perf_counter() - t0, os.times()
            sc = score_pages(recs, pages)["overall"]
            rows.append({"set": set_name, "engine": name, "runtime": str(eng.det_rt.name),
                         "pages": len(imgs), "pages_per_s": len(imgs) / el,
                         "cpu_s_per_page": (c1.user + c1.system - c0.user - c0.system) / len(imgs),
                         "cer": sc.get("cer"), "cer_aligned": sc.get("cer_aligned"),
                         "det_f1": sc.get("det_f1")})
            print(json.dumps(rows[-1]), flush=True)
            eng.close()
    if a.out:
        a.out.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
