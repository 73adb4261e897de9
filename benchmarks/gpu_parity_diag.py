"""Which part of the CUDA path reads the parity pages (tests/test_core_paths.py) with other line
counts than ONNX Runtime: one page set, the CUDA scheduler with one setting changed each.

    python3 benchmarks/gpu_parity_diag.py [PAGES]     (on a CUDA machine; default pages 3,4,5)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    import cv2
    from test_core_paths import make_page

    from ocrforge import OCR

    idx = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "3,4,5").split(",")]
    gen = [make_page(i) for i in idx]
    jpegs = [cv2.imencode(".jpg", g[0], [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes() for g in gen]
    ort = OCR(det_limit_side=1280)
    ref = list(ort.read_many(jpegs))
    print("ort", [len(p.lines) for p in ref], flush=True)
    variants = {"cuda": {}, "post0": {"gpu.post_processes": 0}, "layout0": {"gpu.layout_processes": 0},
                "nolayout": {"layout.enabled": False}, "cpu-torch": {"device": "cpu"},
                "nosplit": {"det.split_gap": 0.0}}
    for name, ch in variants.items():
        kw = {"runtime": "torch", "device": "cuda", "torch_precision": "fp32", "cuda_graphs": True,
              "det_batch_size": 4, "gpu.warmup": False, "gpu.decode": False, **ch}
        if kw["device"] == "cpu":
            kw.update(torch_precision="fp32", cuda_graphs=False)
        try:
            eng = OCR(ort.config.with_(**kw))
            got = list(eng.gpu_scheduler().run(jpegs))
        except Exception as e:  # a setting this version lacks
            print(name, "failed:", e, flush=True)
            continue
        print(name, [len(p.lines) for p in got], flush=True)
        if name == "cuda":
            for r, g in zip(ref, got, strict=True):
                a, b = [ln.text for ln in r.lines], [ln.text for ln in g.lines]
                if a != b:
                    print("  ort :", a[:40], "\n  cuda:", b[:40], flush=True)
        eng.close()


if __name__ == "__main__":
    main()
