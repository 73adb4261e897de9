"""Page orientation's three-crop decision: what it costs, and what a line vote would add.

    python benchmarks/orientation_crops.py cost SET [SET ...]
    python benchmarks/orientation_crops.py line-vote SET [SET ...]

``cost``: CPU time (``time.process_time``, min of 7) per page of the centre-crop step and of the
end-crop step that ``PageRunner.upright_pages`` adds for a page whose centre crop is unsure,
and how many pages are unsure. ``line-vote``: every page put upright from its labels and
turned by 0 and 180 degrees; for each copy whose centre crop is unsure, the three-crop decision
and the share of the lines detected on the copy as given (page orientation off) that the 0/180
line classifier (``stages/classify.py``, ``cls.thresh``) flags as upside down.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.io.inputs import PageImage, load_image
from ocrforge.stages import classify
from ocrforge.stages import page_orientation as po


def _best(f, reps: int = 7) -> float:
    b = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        f()
        b = min(b, time.process_time() - t0)
    return b


def cost(sets: list[str]) -> None:
    rt = OCR().runner.page_orientation_runtime()
    imgs = [load_image(str(r.image)) for ds in sets for r in load_dataset(ds)]
    imgs = [im for im in imgs if po.applies(*im.shape[:2])]
    rt.run(po.prepare(imgs[:1]))
    rt.run(po.prepare(imgs[:1], po.ENDS))
    centre, extra = [], []
    for im in imgs:
        centre.append(_best(lambda im=im: rt.run(po.prepare([im]))))
        if po.unsure(rt.run(po.prepare([im])), po.THRESH):
            extra.append(_best(lambda im=im: rt.run(po.prepare([im], po.ENDS))))
    print(f"{len(imgs)} pages, {len(extra)} unsure; centre step mean {1000 * statistics.mean(centre):.2f} ms; "
          f"end crops per unsure page mean {1000 * statistics.mean(extra or [0.0]):.2f} ms; "
          f"extra per page, all pages: {1000 * sum(extra) / len(imgs):.2f} ms (CPU time)")


def line_vote(sets: list[str]) -> None:
    from rotated_pages import upright_record

    runner = OCR(page_orientation=False).runner
    rt = OCR().runner.page_orientation_runtime()
    cls = runner.cls_runtime()
    s = runner.settings(None)
    for ds in sets:
        for r in load_dataset(ds):
            _, im = upright_record(r, load_image(str(r.image)))
            for angle in (0, 180):
                t = np.ascontiguousarray(np.rot90(im, -angle // 90))
                if not po.applies(*t.shape[:2]):
                    continue
                c = rt.run(po.prepare([t]))
                if not po.unsure(c, po.THRESH):
                    continue
                three = po.decide(c, po.THRESH, rt.run(po.prepare([t], po.ENDS)))[0]
                crops = runner.detect([PageImage("t", 0, t)], s)[0].crops
                flips = classify.decide(cls.run(classify.prepare(crops)), runner.config.cls.thresh) if crops else []
                share = float(np.mean(flips)) if len(flips) else 0.0
                print(f"{ds} {r.name} {r.kind:10s} given at {angle:3d}: three crops say {three:3d}; "
                      f"{len(crops)} lines, flagged 180: {share:.2f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] in ("cost", "line-vote"):
        (cost if sys.argv[1] == "cost" else line_vote)(sys.argv[2:])
    else:
        print(__doc__)
        raise SystemExit(2)
