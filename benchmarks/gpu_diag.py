"""Which GPU setting garbles real pages: the default GPU engine and variants with one setting
changed each, on a spread of dev-set pages, two passes each, against ONNX Runtime on the CPU.

    python benchmarks/gpu_diag.py --dev DEVSET --model-dir MODELS [--pages 14] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

VARIANTS: dict[str, dict] = {
    "default": {},
    "no_nvjpeg": {"gpu.decode": False},
    "no_graphs": {"cuda_graphs": False},
    "fp32": {"torch_precision": "fp32"},
    "no_orient": {"page_orientation": False},
    "no_db_procs": {"gpu.post_processes": 0},
    "no_layout": {"layout.enabled": False},
    "all_off": {"gpu.decode": False, "cuda_graphs": False, "torch_precision": "fp32",
                "gpu.post_processes": 0},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--pages", type=int, default=14)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    recs = load_dataset(Path(a.dev))
    step = max(1, len(recs) // a.pages)
    recs = recs[::step][: a.pages]
    files = [str(r.image) for r in recs]
    kw = {"model_dir": a.model_dir} if a.model_dir else {}
    ref = list(OCR(**kw).read_many(files))
    res: dict = {"pages": [r.image.name for r in recs],
                 "ort": score_pages(recs, ref)["overall"]}
    print("ort cpu", _brief(res["ort"]), flush=True)
    for name in a.variants.split(","):
        t0 = time.perf_counter()
        try:
            eng = OCR(device="cuda", **VARIANTS[name], **kw)
            gp = eng.gpu_scheduler()
            row: dict = {"gpu_decode": gp.gpu_decode, "post_processes": gp.post_processes}
            for k in ("pass1", "pass2"):
                got = list(gp.run(files))
                row[k] = score_pages(recs, got)["overall"]
                row[k + "_rot"] = [p.rotation for p in got]
                row[k + "_diff"] = _diffs(ref, got)
            eng.close()
        except Exception as e:  # report and go on with the next variant
            row = {"error": f"{type(e).__name__}: {e}"}
        row["seconds"] = time.perf_counter() - t0
        res[name] = row
        print(name, {k: _brief(v) if isinstance(v, dict) else v for k, v in row.items()
                     if not k.endswith("_diff")}, flush=True)
        for d in row.get("pass2_diff", [])[:6]:
            print("    ", d, flush=True)
        if a.out:
            a.out.write_text(json.dumps(res, indent=1, ensure_ascii=False), encoding="utf-8")


def _brief(sc: dict) -> dict:
    return {k: round(sc[k], 4) for k in ("cer", "det_f1", "line_acc") if k in sc}


def _diffs(ref: list, got: list) -> list:
    out = []
    for k, (a, b) in enumerate(zip(ref, got, strict=True)):
        ta, tb = [ln.text for ln in a.lines], [ln.text for ln in b.lines]
        bad = sorted(set(tb) - set(ta))
        if bad:
            out.append((k, len(ta), len(tb), bad[:3], sorted(set(ta) - set(tb))[:3]))
    return out


if __name__ == "__main__":
    sys.exit(main())
