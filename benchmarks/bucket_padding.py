"""The GPU scheduler's page buckets against ONNX Runtime, on the CPU (accuracy only): the
scheduler's code with torch on the CPU reads dev pages with zero-filled buckets (the default),
without buckets, and with the padding filled by replicating the page's edge, or white.

    python benchmarks/bucket_padding.py --dev /work/shared/data/ocr-dev --pages 14
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages
from ocrforge.stages.detect import DetPreprocessor

_ORIG = DetPreprocessor.prepare_torch


def _replicate(self, img, rh, rw, out):
    _ORIG(self, img, rh, rw, out)
    if out.shape[1] > rh:
        out[:, rh:, :rw] = out[:, rh - 1 : rh, :rw]
    if out.shape[2] > rw:
        out[:, :, rw:] = out[:, :, rw - 1 : rw]


def _white(self, img, rh, rw, out):
    sc, of = torch.tensor(self.scale).view(3, 1, 1), torch.tensor(self.offset).view(3, 1, 1)
    out[:] = (255.0 * sc + of).to(out.dtype)
    _ORIG(self, img, rh, rw, out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--pages", type=int, default=14)
    a = ap.parse_args()
    torch.set_num_threads(2)
    recs = load_dataset(Path(a.dev))
    recs = recs[:: max(1, len(recs) // a.pages)][: a.pages]  # the pages gpu_diag.py reads
    files = [str(r.image) for r in recs]

    def show(name, pages):
        sc = score_pages(recs, pages)["overall"]
        print(name, {k: round(sc[k], 4) for k in ("cer", "det_f1", "line_acc")}, flush=True)

    show("onnxruntime", list(OCR().read_many(files)))
    for name, kw, prep in [("zero fill", {}, _ORIG), ("no buckets", {"gpu.page_buckets": [(0.03125, 0.03125)]}, _ORIG),
                           ("replicate", {}, _replicate), ("white", {}, _white)]:
        DetPreprocessor.prepare_torch = prep
        show(name, list(OCR(runtime="torch", device="cpu", **kw).gpu_scheduler().run(files)))
    DetPreprocessor.prepare_torch = _ORIG


if __name__ == "__main__":
    main()
