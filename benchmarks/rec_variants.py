"""Recognition variants on one detection pass: each page of a labeled set is detected once, then
recognised with every variant (rec min_width, batch size); rec CPU seconds (process_time, ORT
spinning off) and CER per variant, variant order alternating per page. CPU time and counts, not
wall time, so it means something on a loaded machine.

    python benchmarks/rec_variants.py DATASET '[{"name":"base"},{"name":"mw160","min_width":160}]' [threads]
"""

from __future__ import annotations

import copy
import json
import sys
import time

from ocrforge.engine import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages
from ocrforge.stages.recognize import RecPreprocessor


def main() -> int:
    ds, variants = sys.argv[1], json.loads(sys.argv[2])
    eng = OCR(allow_spinning=False, intra_op_threads=int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    r = eng.runner
    base_cfg = r.config
    names = [v["name"] for v in variants]
    cpu = dict.fromkeys(names, 0.0)
    cols = dict.fromkeys(names, 0)
    pages: dict[str, list] = {n: [] for n in names}
    orig_run = r.rec_rt.run
    cur = [names[0]]

    def run(b):
        t = time.process_time()
        o = orig_run(b)
        cpu[cur[0]] += time.process_time() - t
        cols[cur[0]] += b.shape[0] * b.shape[3]
        return o

    r.rec_rt.run = run
    recs = load_dataset(ds)
    for i, rec in enumerate(recs):
        s = r.settings(None)
        det = r.detect(list(eng.decode(str(rec.image))), s)
        for v in variants if i % 2 == 0 else variants[::-1]:
            cur[0] = v["name"]
            r.rec_prep = RecPreprocessor(eng.models.model_set.rec_constants, base_cfg.rec.max_width,
                                         base_cfg.rec.width_step, v.get("min_width"))
            r.config = base_cfg.with_(**{"rec.batch_size": v.get("batch", 16)})
            pages[v["name"]] += r.recognize(copy.copy(det), s)
    for n in names:
        acc = score_pages(recs, pages[n], dataset=ds)["overall"]
        print(n, json.dumps({"rec_cpu_s_per_page": cpu[n] / len(recs), "cols_per_page": cols[n] / len(recs),
                             "cer": acc["cer"], "cer_aligned": acc["cer_aligned"], "det_f1": acc["det_f1"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
