"""One engine process: 2 warm-up pages, then one pass of a labeled set; pages/s, CER, the number
of distinct network input shapes and peak RSS as one JSON line (quiet machine only; run the
settings one after another, alternating, to compare them).

    [OCRFORGE_OV_CACHE=N | OCRFORGE_OV_CACHE_REC=N | OCRFORGE_OV_CACHE_DET=N] [RECPAD=1] \\
        [DETPAD=128] [DET_ORT=1] python benchmarks/ov_shape_cache.py DATASET [section.key=value ...]

RECPAD=1 pads each recognition batch to a power of two lines and DETPAD=Q each detector input to
multiples of Q pixels (fewer distinct shapes for OpenVINO to prepare); outputs are cut back.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages

SHAPES: set[tuple[str, tuple[int, ...]]] = set()


def pad_rec(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    m = 1 << (n - 1).bit_length() if os.environ.get("RECPAD") else n
    return x if m == n else np.concatenate([x, np.zeros((m - n, *x.shape[1:]), x.dtype)])


def pad_det(x: np.ndarray) -> np.ndarray:
    q = int(os.environ.get("DETPAD", "0"))
    h, w = x.shape[2:]
    if not q or (h % q == 0 and w % q == 0):
        return x
    out = np.zeros((*x.shape[:2], -(-h // q) * q, -(-w // q) * q), x.dtype)
    out[:, :, :h, :w] = x
    return out


def wrap(rt, name: str, pad) -> None:
    run = rt.run

    def padded(x: np.ndarray) -> np.ndarray:
        xp = pad(x)
        SHAPES.add((name, xp.shape))
        y = run(xp)
        if name == "det":
            return y[:, :, : x.shape[2], : x.shape[3]]
        return tuple(a[: x.shape[0]] for a in y) if isinstance(y, tuple) else y[: x.shape[0]]

    rt.run = padded


def main() -> None:
    recs = load_dataset(sys.argv[1])
    imgs = [str(r.image) for r in recs]
    opts = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in (a.split("=", 1) for a in sys.argv[2:])}
    eng = OCR(**opts)
    if os.environ.get("DET_ORT"):  # detection in ONNX Runtime (no per-shape preparation)
        from ocrforge.runtimes.factory import open_onnx

        rc = eng.config.runtime.model_copy(update={"backend": "onnxruntime", "shrink_arena": False})
        eng.runner.det_rt = open_onnx(eng.models.det, rc)
    wrap(eng.runner.rec_rt, "rec", pad_rec)
    wrap(eng.runner.det_rt, "det", pad_det)
    list(eng.read_many(imgs[:2]))
    t0 = time.perf_counter()
    pages = list(eng.read_many(imgs))
    el = time.perf_counter() - t0
    sc = score_pages(recs, pages)["overall"]
    env = {k: v for k, v in os.environ.items() if k.startswith("OCRFORGE_OV_CACHE") or k in ("RECPAD", "DETPAD", "DET_ORT")}
    print(json.dumps({"opts": opts, "env": env, "pages_s": round(len(imgs) / el, 3),
                      "cer": round(100 * sc["cer"], 2), "aligned": round(100 * sc["cer_aligned"], 2),
                      "det_f1": round(100 * sc["det_f1"], 2), "shapes": len(SHAPES),
                      "det_shapes": sum(1 for k in SHAPES if k[0] == "det"),
                      "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}), flush=True)


if __name__ == "__main__":
    main()
