import json, os, sys, time
import torch
from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages
torch.set_num_threads(2)
recs = load_dataset("/work/shared/data/ocr-dev")
out = {}
for name, env in (("grey", None), ("network", "1")):
    if env: os.environ["OCRFORGE_CROPS_NETWORK_DTYPE"] = env
    eng = OCR(runtime="torch", device="cpu")
    t0 = time.time()
    pages = list(eng.gpu_scheduler().run([str(r.image) for r in recs]))
    sc = score_pages(recs, pages)["overall"]
    out[name] = {k: sc.get(k) for k in ("cer", "cer_aligned", "det_f1")}
    out[name]["texts"] = [[l.text for l in p.lines] for p in pages]
    print(name, out[name]["cer"], out[name]["cer_aligned"], out[name]["det_f1"], time.time() - t0, flush=True)
    eng.close()
diff = sum(a != b for pa, pb in zip(out["grey"]["texts"], out["network"]["texts"]) for a, b in zip(pa, pb))
nl = sum(len(p) for p in out["grey"]["texts"])
print("lines differing", diff, "of", nl, flush=True)
json.dump(out, open("/tmp/cer/out.json", "w"))
