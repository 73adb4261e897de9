"""Where the CPU engine's time goes on a labeled set: seconds inside each network's runtime
(detection, recognition, page orientation) against the whole read_many, plus CER and det F1.

    python benchmarks/cpu_network_split.py /tmp/synth5150 [section.key=value ...]

e.g. ``rec.width_step=64``; one JSON line. Two warm-up pages are not counted. Time it only
where nothing else runs (docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.eval import score_pages


def _value(v: str) -> Any:
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def _timed(name: str, rt: Any, secs: Counter, calls: Counter, elems: Counter) -> None:
    run = rt.run

    def timed_run(batch):
        t = time.perf_counter()
        out = run(batch)
        secs[name] += time.perf_counter() - t
        calls[name] += 1
        elems[name] += batch.size
        return out

    rt.run = timed_run


def main() -> None:
    options = {k: _value(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])}
    eng = OCR(**options)
    recs = load_dataset(sys.argv[1])
    files = [str(r.image) for r in recs]
    secs, calls, elems = Counter(), Counter(), Counter()
    r = eng.runner
    _timed("det", r.det_rt, secs, calls, elems)
    _timed("rec", r.rec_rt, secs, calls, elems)
    ori = r.page_orientation_runtime() if eng.config.cls.page_orientation else None
    if ori is not None:
        _timed("orient", ori, secs, calls, elems)
    list(eng.read_many(files[:2]))
    for c in (secs, calls, elems):
        c.clear()
    t0 = time.perf_counter()
    c0 = time.process_time()
    pages = list(eng.read_many(files))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sc = score_pages(recs, pages)["overall"]
    print(json.dumps({
        "options": options, "pages": len(pages), "pages_per_s": round(len(pages) / wall, 3),
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "network_s": {k: round(v, 2) for k, v in secs.items()}, "calls": dict(calls),
        "M_elements": {k: round(v / 1e6, 1) for k, v in elems.items()},
        "rest_s": round(wall - sum(secs.values()), 2),
        "cer": round(sc["cer"] * 100, 2), "det_f1": round(sc["det_f1"] * 100, 2)}))


if __name__ == "__main__":
    main()
