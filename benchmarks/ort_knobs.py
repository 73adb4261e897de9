"""ONNX Runtime session knobs on this machine: network time of det and rec per setting.

Inputs are the engine's real ones (DetPreprocessor tensors of synthetic pages, RecPreprocessor
batches of their detected crops). Settings are measured interleaved (rep 1: A, B, C...; rep 2:
...) and the median of ``--repeat`` is reported with its ratio to the first setting.

    python benchmarks/ort_knobs.py [--precision int8] [--repeat 5] [--out knobs.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from ocrforge.config import EngineConfig, atomic_write_text

SETTINGS: dict[str, dict] = {
    "default (threads=all, opt=all, spin, sequential)": {},
    "intra_op_threads=1": {"intra_op_threads": 1},
    "no spinning": {"allow_spinning": False},
    "graph_optimization=basic": {"graph_optimization": "basic"},
    "graph_optimization=extended": {"graph_optimization": "extended"},
    "execution_mode=parallel": {"execution_mode": "parallel"},
    "mem pattern off": {"enable_mem_pattern": False},
    "cpu arena off": {"enable_cpu_mem_arena": False},
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="fp32", help="fp32 or int8 (artifacts from `ocrforge build`)")
    ap.add_argument("--pages", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()

    from ocrforge.engine import OCR
    from ocrforge.optimize.artifacts import synth_dir
    from ocrforge.optimize.samples import det_inputs, detected_crops, load_pages, rec_inputs
    from ocrforge.runtimes.factory import build_runtime

    base = EngineConfig(det_precision=args.precision, rec_precision=args.precision)
    ref = OCR(EngineConfig())
    images, _ = load_pages(str(synth_dir(1001, 16)), args.pages)
    inputs = {"det": det_inputs(ref, images), "rec": rec_inputs(ref, detected_crops(ref, images, 96))}
    rts = {}
    for name, ch in SETTINGS.items():
        cfg = base.with_(**ch)
        for role in ("det", "rec"):
            rts[(name, role)] = build_runtime(role, getattr(ref.models, role), cfg)
            rts[(name, role)].run(inputs[role][0])
    times: dict[tuple[str, str], list[float]] = {k: [] for k in rts}
    for _ in range(args.repeat):
        for (name, role), rt in rts.items():
            t0 = time.perf_counter()
            for x in inputs[role]:
                rt.run(x)
            times[(name, role)].append(time.perf_counter() - t0)
    rows = []
    first = next(iter(SETTINGS))
    for (name, role), ts in times.items():
        med = statistics.median(ts)
        rows.append({"setting": name, "role": role, "seconds": round(med, 4),
                     "vs_default": round(statistics.median(times[(first, role)]) / med, 3)})
    print(f"{'setting':52s} {'net':4s} {'s':>8s} {'speed vs default':>16s}")
    for r in sorted(rows, key=lambda r: (r["role"], list(SETTINGS).index(r["setting"]))):
        print(f"{r['setting']:52s} {r['role']:4s} {r['seconds']:8.3f} {r['vs_default']:15.2f}x")
    if args.out:
        atomic_write_text(args.out, json.dumps({"precision": args.precision, "repeat": args.repeat,
                                                "pages": args.pages, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
