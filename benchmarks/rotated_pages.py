"""Rotated pages: CER with and without whole-page orientation on copies of a labeled set turned
0/90/180/270 degrees clockwise, the orientation decisions, and what the stage costs.

    python benchmarks/rotated_pages.py /work/shared/data/ocr-dev --json out.json
    python benchmarks/rotated_pages.py synth40/ --time-reps 0

For every angle both engines (``page_orientation`` off / on, everything else default) read
the turned images through ``read_many``; the order of the two alternates between angles.
"CER" is the page text as a user gets it (``Page.text``, in the page's own frame and order)
against the reference text in reading order, scored as ``ocrforge eval`` does (casefold for
receipts, lines in don't-care regions left out); "det F1" matches the lines' boxes, mapped back
to the upright image (``Page.input_poly``, then the known turn undone), against the labels. At
0 degrees without page orientation both equal ``ocrforge eval``'s CER and detection F1. Cost: the orientation stage alone
(``PageRunner.upright_pages``) timed per upright page, against the whole page time of the
engine without it (sum of ``Page.timings``), plus ``--time-reps`` interleaved off/on
``read_many`` passes over the upright set (wall-clock ratio, median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter, defaultdict

import numpy as np


def score(rec, page, angle: int, in_w: int, in_h: int) -> tuple[tuple[int, int], np.ndarray]:
    """(edits, reference chars) of the page text and (tp, fp, fn) of its boxes in the upright
    frame; hypothesis lines in don't-care regions are left out of the text (as in eval)."""
    from ocrforge.evaluation.eval import reference_text, use_casefold
    from ocrforge.evaluation.metrics import char_errors, match_lines
    from ocrforge.result import Page
    from ocrforge.stages.page_orientation import to_input_frame

    text = page.text
    counts = np.zeros(3, np.int64)
    if rec.lines is not None:
        undo = (360 - angle) % 360  # the input is the upright page turned clockwise by angle
        up = [to_input_frame(np.array(page.input_poly(ln.poly)), undo, in_w, in_h).tolist()
              for ln in page.lines]
        m = match_lines([ln.poly for ln in rec.lines], up, [ln.ignore for ln in rec.lines])
        counts[:] = (m.tp, m.fp, m.fn)
        drop = set(m.ignored_hyp)
        if drop:
            text = Page([ln for j, ln in enumerate(page.lines) if j not in drop],
                        page.width, page.height).text
    return char_errors(reference_text(rec), text, use_casefold(rec.kind, "auto")), counts


def upright_record(rec, image: np.ndarray):
    """Synthetic pages may be stored turned (labels' ``transforms.rotate_cw``, polys in the
    stored frame): the truly upright image and labels, so that every angle is measured from
    upright. Other records are returned as they are."""
    from dataclasses import replace

    from ocrforge.evaluation.dataset import RefLine
    from ocrforge.stages.page_orientation import to_input_frame, upright

    rot = int((rec.meta.get("transforms") or {}).get("rotate_cw", 0) or 0)
    if not rot:
        return rec, image
    h, w = image.shape[:2]
    undo = (360 - rot) % 360
    lines = [RefLine(ln.text, to_input_frame(np.array(ln.poly), undo, w, h).tolist(), ln.ignore)
             for ln in rec.lines or []]
    return replace(rec, lines=lines if rec.lines is not None else None), upright(image, rot)


def decisions(recs, images, angles, per_page: bool = False) -> int:
    """What the stage decides for each turned copy, by kind: right / kept upright / wrong;
    ``per_page``: also one line per copy (angle, page, turn decided), to compare engines."""
    from ocrforge.engine import OCR
    from ocrforge.io.inputs import PageImage

    runner = OCR(page_orientation=True).runner
    table: dict = defaultdict(Counter)
    for angle in angles:
        for i, (rec, im) in enumerate(zip(recs, images, strict=True)):
            turned = np.ascontiguousarray(np.rot90(im, -angle // 90))
            got = runner.upright_pages([PageImage("t", i, turned)])[0].rotation
            verdict = "right" if got == angle else ("kept" if got == 0 else "wrong")
            if per_page:
                print(f"page {angle:3d} deg {rec.name} -> {got}")
            table[(angle, rec.kind)][verdict] += 1
            table[(angle, "all")][verdict] += 1
    for (angle, kind), c in sorted(table.items()):
        print(f"{angle:3d} deg {kind:10s} {dict(c)}")
    return 0


def main() -> int:
    from ocrforge.engine import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import aggregate, score_page
    from ocrforge.evaluation.metrics import prf
    from ocrforge.io.inputs import PageImage, load_image

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--angles", default="0,90,180,270")
    ap.add_argument("--time-reps", type=int, default=3)
    ap.add_argument("--only", choices=["off", "on"], help="one engine only (less memory)")
    ap.add_argument("--decisions-only", action="store_true",
                    help="only the orientation stage's decisions per angle (no OCR): fast")
    ap.add_argument("--per-page", action="store_true", help="with --decisions-only: every copy's decision")
    ap.add_argument("--json", help="results; also appended to, one line per pass, at JSON.lines")
    args = ap.parse_args()

    recs = load_dataset(args.dataset)[: args.limit]
    recs, images = zip(*(upright_record(r, load_image(str(r.image))) for r in recs), strict=True)
    angles = [int(a) for a in args.angles.split(",")]
    if args.decisions_only:
        return decisions(recs, images, angles, args.per_page)
    names = [args.only] if args.only else ["off", "on"]
    engines = {n: OCR(page_orientation=(n == "on")) for n in names}
    for e in engines.values():  # warm-up: sessions, arenas
        list(e.read_many(images[:1]))
    out: dict = {"dataset": str(args.dataset), "pages": len(recs), "angles": {}}
    for n, angle in enumerate(angles):
        turned = [np.ascontiguousarray(np.rot90(im, -angle // 90)) for im in images]
        order = names if n % 2 == 0 else names[::-1]
        res: dict = {}
        for name in order:
            t0 = time.perf_counter()
            pages = list(engines[name].read_many(turned))
            wall = time.perf_counter() - t0
            edits = chars = 0
            det = np.zeros(3, np.int64)
            by_kind: dict = defaultdict(lambda: [0, 0])
            turns = Counter()
            for rec, page, im in zip(recs, pages, turned, strict=True):
                (e, c), tpfpfn = score(rec, page, angle, im.shape[1], im.shape[0])
                det += tpfpfn
                edits += e
                chars += c
                by_kind[rec.kind][0] += e
                by_kind[rec.kind][1] += c
                turns["right" if page.rotation == angle else
                      ("kept" if page.rotation == 0 else "wrong")] += 1
            tp, fp, fn = (int(v) for v in det)
            r = {"cer": edits / max(chars, 1), "det_f1": prf(tp, tp + fp, tp + fn)[2],
                 "wall_s": wall, "orientation": dict(turns),
                 "cer_by_kind": {k: v[0] / max(v[1], 1) for k, v in sorted(by_kind.items())}}
            if angle == 0:
                agg = aggregate([score_page(rec, p) for rec, p in zip(recs, pages, strict=True)])
                r["eval"] = {"cer": agg["cer"], "det_f1": agg["det_f1"]}
            res[name] = r
            if args.json:
                with open(args.json + ".lines", "a", encoding="utf-8") as f:
                    f.write(json.dumps({"angle": angle, "engine": name, **r}) + "\n")
            print(f"{angle:3d} deg {name:3s}: CER {100 * r['cer']:6.2f} %  det F1 "
                  f"{100 * r['det_f1']:6.2f} %  orientation {dict(turns)}"
                  + (f"  eval CER {100 * r['eval']['cer']:.2f} % det F1 {100 * r['eval']['det_f1']:.2f} %"
                     if angle == 0 else ""), flush=True)
        out["angles"][angle] = res

    if args.only:
        if args.json:
            from ocrforge.config import atomic_write_text

            atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
        return 0
    # cost of the stage alone, per upright page, vs the whole page without it
    runner = engines["on"].runner
    stage_ms = []
    for i, im in enumerate(images):
        t0 = time.perf_counter()
        runner.upright_pages([PageImage("t", i, im)])
        stage_ms.append(1000 * (time.perf_counter() - t0))
    page_ms = [1000 * sum(p.timings.values()) for p in engines["off"].read_many(images)]
    out["cost"] = {"stage_ms_median": statistics.median(stage_ms),
                   "stage_ms_mean": statistics.fmean(stage_ms),
                   "page_ms_median_without": statistics.median(page_ms),
                   "page_ms_mean_without": statistics.fmean(page_ms)}
    ratios = []
    for _ in range(args.time_reps):
        t = {}
        for name in ("off", "on"):
            t0 = time.perf_counter()
            list(engines[name].read_many(images))
            t[name] = time.perf_counter() - t0
        ratios.append(t["on"] / t["off"])
    if ratios:
        out["cost"]["wall_ratio_on_off"] = ratios
        out["cost"]["wall_ratio_median"] = statistics.median(ratios)
    print(json.dumps(out["cost"], indent=2))
    if args.json:
        from ocrforge.config import atomic_write_text

        atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
