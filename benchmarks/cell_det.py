"""Detection F1 of the DB box stage against one-box-per-cell labels, for decoder variants.

    python benchmarks/cell_det.py collect DATASET maps.pkl        # det network once per page
    python benchmarks/cell_det.py score maps.pkl [maps2.pkl ...] [--variants base,split]
                                         [--grid] [--json OUT]

``collect`` runs the default engine's detection network (ONNX Runtime CPU, the engine's own
page orientation and resize) once per page and keeps the probability map as uint8 (prob * 255,
as the GPU scheduler hands it to its DB workers), the resize ratios and the page's rotation.
``score`` decodes the kept maps with ``stages.detect.DBDecoder`` under each variant and scores
the boxes with ``evaluation.metrics.match_lines`` (IoU >= 0.5, one-to-one), as ``ocrforge eval``
does: precision, recall, F1 per page kind. Only the box stage changes between variants, so the
numbers isolate it; recognition and page CER are measured with ``ocrforge eval``.

``ocrforge synth --kind table`` and ``--kind screenshot`` label every table cell, button and
field as its own line, so F1 there is F1 against one box per cell.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.metrics import match_lines, prf
from ocrforge.io.inputs import iter_pages
from ocrforge.result import to_input_frame
from ocrforge.stages.detect import DBDecoder, DetInput


def collect(dataset: str, out: str) -> None:
    engine = OCR()
    runner = engine.runner
    pages = []
    records = load_dataset(dataset)
    for n, rec in enumerate(records):
        page = next(iter(iter_pages(str(rec.image))))
        up = runner.upright_pages([page])[0]
        d = runner.det_prep(up.image, runner.config.det.limit_side)
        prob = runner.det_rt.run(d.tensor)[0, 0]
        h, w = d.size()
        pages.append({"name": rec.name, "kind": rec.kind, "lang": rec.lang,
                      "prob": np.round(prob[:h, :w] * 255).astype(np.uint8), "gray": d.gray,
                      "orig": (d.orig_h, d.orig_w), "rotation": int(getattr(up, "rotation", 0)),
                      "ref": [ln.poly for ln in rec.lines or []],
                      "ignore": [ln.ignore for ln in rec.lines or []]})
        print(f"\r{n + 1}/{len(records)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    Path(out).write_bytes(pickle.dumps(pages))


def decode(dec: DBDecoder, pg: dict[str, Any]) -> list[np.ndarray]:
    prob = pg["prob"].astype(np.float32) * (1.0 / 255.0)
    oh, ow = pg["orig"]
    rh, rw = prob.shape
    d = DetInput(np.empty((1, 3, 1, 1), np.float32), rh / oh, rw / ow, oh, ow, pg.get("gray"))
    boxes = dec(prob, d)
    if pg["rotation"]:
        boxes = [np.asarray(to_input_frame(b, pg["rotation"], ow, oh), np.float32) for b in boxes]
    return boxes


def score(pages: list[dict[str, Any]], dec: DBDecoder) -> dict[str, dict[str, float]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pg in pages:
        boxes = decode(dec, pg)
        m = match_lines(pg["ref"], [b.tolist() for b in boxes], pg["ignore"])
        for key in (pg["kind"], "all"):
            c = counts[key]
            c[0] += m.tp
            c[1] += m.n_hyp
            c[2] += m.n_ref
    out = {}
    for key, (tp, nh, nr) in counts.items():
        p, r, f = prf(tp, nh, nr)
        out[key] = {"tp": tp, "hyp": nh, "ref": nr, "precision": p, "recall": r, "f1": f}
    return out


def diagnose(pages: list[dict[str, Any]], dec: DBDecoder) -> dict[str, int]:
    """Why reference boxes were missed: merged (the box covering most of it also covers another
    reference box), split (two or more boxes each cover a part), missed (nothing covers half of
    it; also counted as faint, weak or on a turned page, ``_missed_kinds``), other (one box
    covers it but IoU < 0.5: too loose or too tight, e.g. a whole button around its label)."""
    from ocrforge.evaluation.metrics import to_polygon

    why: dict[str, int] = defaultdict(int)
    for pg in pages:
        boxes = [b.tolist() for b in decode(dec, pg)]
        m = match_lines(pg["ref"], boxes, pg["ignore"])
        got = {r for r, _, _ in m.pairs}
        rp = [to_polygon(p) for p in pg["ref"]]
        hp = [to_polygon(b) for b in boxes]
        for i, r in enumerate(rp):
            if i in got or pg["ignore"][i] or r.area <= 0:
                continue
            cover = sorted(((h.intersection(r).area / r.area, j) for j, h in enumerate(hp)), reverse=True)
            cover = [(c, j) for c, j in cover if c > 0.1]
            if not cover or sum(c for c, _ in cover) < 0.5:
                why["missed"] += 1
                for key in _missed_kinds(pg, pg["ref"][i]):
                    why[key] += 1
            elif len(cover) >= 2 and cover[1][0] > 0.2:
                why["split"] += 1
            elif any(k != i and hp[cover[0][1]].intersection(o).area > 0.3 * o.area
                     for k, o in enumerate(rp)):
                why["merged"] += 1
            else:
                why["other"] += 1
    return dict(why)


def _missed_kinds(pg: dict[str, Any], poly: list) -> list[str]:
    """Of a missed reference box on an unturned page: "missed, faint" when the detector's grey
    page spans < 25 grey levels over it (5th to 95th percentile), "missed, weak" when the
    probability map stays under 0.5 there; "missed, turned page" on a turned page (not sampled)."""
    if pg["rotation"] or pg.get("gray") is None:
        return ["missed, turned page"]
    oh, ow = pg["orig"]
    rh, rw = pg["prob"].shape
    p = np.asarray(poly, np.float64)
    x0, y0 = (p.min(0) * (rw / ow, rh / oh)).astype(int)
    x1, y1 = np.ceil(p.max(0) * (rw / ow, rh / oh)).astype(int)
    x0, y0 = max(x0, 0), max(y0, 0)
    gray, prob = pg["gray"][y0:y1 + 1, x0:x1 + 1], pg["prob"][y0:y1 + 1, x0:x1 + 1]
    if gray.size == 0:
        return []
    lo, hi = np.percentile(gray, (5, 95))
    return (["missed, faint"] if hi - lo < 25 else []) + (["missed, weak"] if prob.max() < 128 else [])


def variants(grid: bool, splits: list[str], gutters: list[str]) -> dict[str, dict[str, Any]]:
    v: dict[str, dict[str, Any]] = {}
    for g, u in itertools.product(splits, gutters):  # "gap[:thin[:wide]]", "gap[:common[:rows]]"
        names = ("split_gap", "split_thin", "split_wide")
        kw = {k: float(x) for k, x in zip(names, g.split(":"), strict=False)}
        gut = [float(x) for x in u.split(":")]
        kw.update(zip(("gutter_gap", "gutter_common", "gutter_rows"), gut, strict=False))
        if "gutter_rows" in kw:
            kw["gutter_rows"] = int(kw["gutter_rows"])
        v[f"split={g} gutter={u}"] = kw
    if grid:
        for t, bt, u in itertools.product((0.2, 0.3), (0.45, 0.6), (1.2, 1.4, 1.6)):
            v[f"t{t}_b{bt}_u{u}"] = {"thresh": t, "box_thresh": bt, "unclip_ratio": u, "split_gap": 0.0,
                                     "gutter_gap": 0.0}
    return v


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("dataset")
    c.add_argument("out")
    s = sub.add_parser("score")
    s.add_argument("maps", nargs="+")
    s.add_argument("--grid", action="store_true", help="thresh x box_thresh x unclip_ratio grid")
    s.add_argument("--split", default="0,1.0", help="split_gap or split_gap:split_thin values, comma separated (0: off)")
    s.add_argument("--gutter", default="0", help="gutter_gap[:common[:rows]] values, comma separated (0: off)")
    s.add_argument("--json")
    s.add_argument("--why", action="store_true", help="also count why reference boxes were missed")
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        collect(a.dataset, a.out)
        return
    engine_det = OCR().config.resolved_det()
    results = {}
    for path in a.maps:
        pages = pickle.loads(Path(path).read_bytes())
        for name, kw in variants(a.grid, a.split.split(','), a.gutter.split(',')).items():
            p = {"thresh": engine_det["thresh"], "box_thresh": engine_det["box_thresh"],
                 "unclip_ratio": engine_det["unclip_ratio"],
                 "max_candidates": engine_det["max_candidates"], **kw}
            dec = DBDecoder(float(p.pop("thresh")), float(p.pop("box_thresh")),
                            float(p.pop("unclip_ratio")), int(p.pop("max_candidates")), 3, None, **p)
            r = score(pages, dec)
            results[f"{path}:{name}"] = r
            row = "  ".join(f"{k} {v['f1']:.4f} (P {v['precision']:.3f} R {v['recall']:.3f})"
                            for k, v in sorted(r.items()))
            print(f"{Path(path).stem:12s} {name:34s} {row}", flush=True)
            if a.why:
                print(f"{'':18s} {'':22s} missed refs: {diagnose(pages, dec)}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

