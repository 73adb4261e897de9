"""Per-network FP32 vs FP16 vs INT8 (static QDQ, dynamic) on the engine's real inputs.

Output error (max/mean abs, cosine) and speed come from ``optimize.compare.compare_models``
(same process, interleaved repetitions, median). Inputs: DetPreprocessor tensors of 3
synthetic pages (det), RecPreprocessor batches of their detected crops (rec), classify.prepare
batches of the same crops (cls). Artifacts: built here with the default recipe (no guard).

    python benchmarks/cpu_models.py [--roles det,rec,cls] [--out cpu_models.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ocrforge.config import atomic_write_text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--roles", default="det,rec,cls")
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()

    from ocrforge.engine import OCR
    from ocrforge.models.registry import sha256_of
    from ocrforge.optimize import int8, samples
    from ocrforge.optimize.artifacts import KEEP_FLOAT, synth_dir
    from ocrforge.optimize.compare import compare_models
    from ocrforge.optimize.fp16 import convert_fp16

    eng = OCR(use_cls=True)
    calib_imgs, _ = samples.load_pages(str(synth_dir(1001, 16)), 16)
    test_imgs, _ = samples.load_pages(str(synth_dir(2001, 30)), args.pages)
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for role in args.roles.split(","):
            src = getattr(eng.models, role)
            cal = samples.calibration_inputs(role, eng, calib_imgs, "calib").inputs
            test = samples.calibration_inputs(role, eng, test_imgs, "test").inputs[:8]
            pre = int8.preprocess(src, Path(tmp) / f"{role}-pre.onnx")
            v = {"fp16": convert_fp16(src, Path(tmp) / f"{role}-fp16.onnx"),
                 "int8": int8.quantize_static(pre, Path(tmp) / f"{role}-int8.onnx", cal,
                                              exclude=KEEP_FLOAT.get(sha256_of(src), [])),
                 "int8-dynamic": int8.quantize_dynamic(pre, Path(tmp) / f"{role}-dyn.onnx")}
            rep = compare_models(src, v, test, repeats=args.repeat)
            out[role] = rep
            print(f"{role}: {len(test)} inputs, first {test[0].shape}")
            for k, r in rep["variants"].items():
                print(f"  {k:13s} max|err| {r['max_abs_err']:.4g}  mean|err| {r['mean_abs_err']:.3g}  "
                      f"cos {r['cosine']:.5f}  {r['ms_per_input']:8.1f} ms  x{r['speedup']}", flush=True)
    if args.out:
        atomic_write_text(args.out, json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
