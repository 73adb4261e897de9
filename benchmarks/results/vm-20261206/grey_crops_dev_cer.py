"""Dev-set CER of the GPU scheduler on the CPU (torch, FP32), line crops as grey levels
against crops in the network's dtype (dev VM, 2026-12-06; the log beside it). It ran while the
grey crops were the default and OCRFORGE_CROPS_NETWORK_DTYPE=1 chose the other; the switch is
now OCRFORGE_CROPS_GREY=1, as below. Run: python grey_crops_dev_cer.py (DEV=path to the set)."""
import os
import time

import torch

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages

torch.set_num_threads(2)
recs = load_dataset(os.environ.get("DEV", "../shared/data/ocr-dev"))
out = {}
for name, env in (("grey", "1"), ("network", "0")):
    os.environ["OCRFORGE_CROPS_GREY"] = env
    eng = OCR(runtime="torch", device="cpu")
    t0 = time.time()
    pages = list(eng.gpu_scheduler().run([str(r.image) for r in recs]))
    sc = score_pages(recs, pages)["overall"]
    out[name] = {k: sc.get(k) for k in ("cer", "cer_aligned", "det_f1")}
    out[name]["texts"] = [[ln.text for ln in p.lines] for p in pages]
    print(name, out[name]["cer"], out[name]["cer_aligned"], out[name]["det_f1"], time.time() - t0, flush=True)
    eng.close()
diff = sum(a != b for pa, pb in zip(out["grey"]["texts"], out["network"]["texts"], strict=True) for a, b in zip(pa, pb, strict=False))
nl = sum(len(p) for p in out["grey"]["texts"])
print("lines differing", diff, "of", nl, flush=True)
