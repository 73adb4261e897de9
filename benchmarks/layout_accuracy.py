"""Accuracy of the layout stage: word spaces, reading order and tables, from one OCR pass.

    python benchmarks/layout_accuracy.py DATASET --cache pages.pkl [--ref-order auto|rule|labels]
                                         [--kinds document,columns] [--limit N] [--json OUT]

Each page is read once (default engine, layout stage on so the CTC steps are produced); the
assembled page, its image and its steps are kept (``--cache``: reused by later runs, so rules can
be compared without reading again). The same pages are then scored four ways with
``ocrforge.evaluation.eval.score_pages``:

    off     the page as the engine assembles it without the layout stage
    spaces  words and missing spaces only (no reordering, no tables)
    order   reading order, blocks and tables only (no added spaces)
    layout  the whole layout stage (what ``OCR.layout = {}`` gives)

Records with ``tables`` labels (``ocrforge synth --kind columns|tables``) also get table scores:
a labeled table is matched to the found table whose box covers most of it; cell F1 as in
``metrics.cell_f1``; "shape" = matched tables with the labeled rows x cols.
"""

from __future__ import annotations

import argparse
import copy
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

import ocrforge.layout as layout
from ocrforge import OCR
from ocrforge.evaluation.dataset import Record, load_dataset
from ocrforge.evaluation.eval import score_pages
from ocrforge.evaluation.metrics import cell_f1
from ocrforge.io.inputs import iter_pages
from ocrforge.layout.words import SpaceRule

VARIANTS = {
    "off": None,
    "spaces": {"order": False, "tables": False},
    "order": {"spaces": SpaceRule(enabled=False)},
    "layout": {},
}


def capture(records: list[Record]) -> list[dict[str, Any]]:
    """Read every record once; keep the page before layout, its image and its CTC steps."""
    engine = OCR()
    engine.layout = {}
    real = layout.analyze
    kept: list[dict[str, Any]] = []

    def keep(page, *, image=None, steps=None, **_):
        kept.append({"page": copy.deepcopy(page), "steps": steps})  # the image is decoded again later
        return page

    layout.analyze = keep
    out = []
    try:
        for k, r in enumerate(records):
            kept.clear()
            engine.read(str(r.image))
            out.append(kept[0])
            print(f"  read {k + 1}/{len(records)} {r.name}", file=sys.stderr, flush=True)
    finally:
        layout.analyze = real
    return out


def load_cached(cache: Path, records: list[Record]) -> list[dict[str, Any]] | None:
    """The captured pages of ``records`` from a cache file (None: it lacks some of them)."""
    by_name = {d["name"]: d["captured"] for d in pickle.loads(cache.read_bytes())}
    if any(r.name not in by_name for r in records):
        return None
    return [by_name[r.name] for r in records]


TABLE_GROUPS = {"ruled": True, "unruled": False}


def table_scores(rec: Record, page, ruled: bool | None = None) -> dict[str, int]:
    """Table counts of one page; ``ruled``: only the labeled tables drawn ruled (True) or
    unruled (False); None: all. (An unruled table may have rules above and below its header.)"""
    refs = [t for t in rec.meta.get("tables") or [] if ruled is None or bool(t.get("ruled")) == ruled]
    found = [(b.bbox, b.table) for b in page.blocks if b.table is not None]
    hit = n_ref = n_hyp = shape = matched = 0
    for ref in refs:
        p = np.asarray(ref["poly"], np.float64)
        rx0, ry0, rx1, ry1 = p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()
        best, best_cover = None, 0.0
        for (x0, y0, x1, y1), t in found:
            inter = max(0.0, min(x1, rx1) - max(x0, rx0)) * max(0.0, min(y1, ry1) - max(y0, ry0))
            cover = inter / max((rx1 - rx0) * (ry1 - ry0), 1.0)
            if cover > best_cover:
                best, best_cover = t, cover
        ref_cells = [(c["row"], c["col"], c["text"]) for c in ref["cells"]]
        hyp_cells = [(c.row, c.col, c.text) for c in best.cells] if best is not None and best_cover > 0.5 else []
        h, nr, nh = cell_f1(ref_cells, hyp_cells)
        hit, n_ref, n_hyp = hit + h, n_ref + nr, n_hyp + nh
        if hyp_cells:
            matched += 1
            shape += (best.rows, best.cols) == (ref["rows"], ref["cols"])
    return {"tables": len(refs), "tables_found": len(found), "tables_matched": matched, "tables_shape": shape,
            "cells_hit": hit, "cells_ref": n_ref, "cells_hyp": n_hyp}


def run_variant(records: list[Record], captured: list[dict[str, Any]], options: dict | None,
                ref_order: str) -> dict[str, Any]:
    pages = []
    for r, c in zip(records, captured, strict=True):
        page = copy.deepcopy(c["page"])
        if options is not None:
            image = next(iter_pages(str(r.image))).image
            layout.analyze(page, image=image, steps=c["steps"], **options)
        pages.append(page)
    res = score_pages(records, pages, ref_order=ref_order)
    tot = _table_totals(records, pages, None)
    if tot.get("tables"):
        res["tables"] = tot
        for name, ruled in TABLE_GROUPS.items():
            res[f"tables_{name}"] = _table_totals(records, pages, ruled)
    return res


def _table_totals(records: list[Record], pages: list, ruled: bool | None) -> dict[str, Any]:
    tabs = [table_scores(r, p, ruled) for r, p in zip(records, pages, strict=True)]
    tot: dict[str, Any] = {k: sum(t[k] for t in tabs) for k in tabs[0]} if tabs else {}
    if tot.get("tables"):
        p = tot["cells_hit"] / tot["cells_hyp"] if tot["cells_hyp"] else 0.0
        r = tot["cells_hit"] / tot["cells_ref"] if tot["cells_ref"] else 0.0
        tot["cell_f1"] = 2 * p * r / (p + r) if p + r else 0.0
    return tot


def _table_text(t: dict[str, Any], found: str = "tables_found") -> str:
    return (f"{t[found]}/{t['tables']}, {t['tables_shape']}/{t['tables']}, {100 * t['cell_f1']:.1f} %"
            if t.get("tables") else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--cache", required=True, help="pickle of the captured pages (written if missing)")
    ap.add_argument("--ref-order", default="auto", choices=["auto", "rule", "labels"])
    ap.add_argument("--kinds", help="only records of these kinds (comma-separated)")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--upright", action="store_true",
                    help="leave out synthetic pages turned by 90/180/270 degrees (page orientation is "
                         "another stage's job); the cache still holds every page")
    ap.add_argument("--json", help="write the summaries here")
    args = ap.parse_args()
    records = load_dataset(args.dataset)
    if args.kinds:
        records = [r for r in records if r.kind in set(args.kinds.split(","))]
    records = records[: args.limit]
    cache = Path(args.cache)
    if cache.is_file():
        captured = load_cached(cache, records)
        if captured is None:
            print(f"{cache} holds other pages; delete it or pick another", file=sys.stderr)
            return 2
    else:
        captured = capture(records)
        cache.write_bytes(pickle.dumps([{"name": r.name, "captured": c} for r, c in zip(records, captured, strict=True)]))
    if args.upright:
        keep = [k for k, r in enumerate(records) if not (r.meta.get("transforms") or {}).get("rotate_cw")]
        records, captured = [records[k] for k in keep], [captured[k] for k in keep]
    out = {}
    print(f"{args.dataset}: {len(records)} pages{' (upright only)' if args.upright else ''}, "
          f"reference order {args.ref_order}")
    print(f"{'variant':8s} {'CER %':>7s} {'aligned %':>9s} {'word acc %':>10s} {'tau':>6s}  tables (found/labeled, shape, cell F1)")
    print("(ruled / unruled rows: matched/labeled, shape, cell F1 of the tables drawn that way)")
    for name, options in VARIANTS.items():
        res = run_variant(records, captured, options, args.ref_order)
        o = res["overall"]
        tau = "n/a" if o["order_tau"] is None else f"{o['order_tau']:.3f}"
        tt = _table_text(res.get("tables") or {})
        wa = "n/a" if o["word_acc"] is None else f"{100 * o['word_acc']:.2f}"
        print(f"{name:8s} {100 * o['cer']:7.2f} {100 * o['cer_aligned']:9.2f} {wa:>10s} {tau:>6s}  {tt}")
        for group in TABLE_GROUPS:
            if (res.get(f"tables_{group}") or {}).get("tables"):
                print(f"  tables {group:9s} {_table_text(res[f'tables_{group}'], 'tables_matched')}")
        groups = [(f"kind={k}", g) for k, g in res["by_kind"].items()] + [(f"lang={k}", g) for k, g in res["by_lang"].items()]
        for kind, g in groups:
            gt = "n/a" if g["order_tau"] is None else f"{g['order_tau']:.3f}"
            gw = "n/a" if g["word_acc"] is None else f"{100 * g['word_acc']:.2f}"
            print(f"  {kind:16s} pages {g['pages']:3d}  CER {100 * g['cer']:6.2f}  aligned {100 * g['cer_aligned']:6.2f}  "
                  f"word acc {gw:>6s}  tau {gt}")
        out[name] = {k: v for k, v in res.items() if k != "pages"}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
