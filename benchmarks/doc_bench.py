"""Document benchmark (issue 21): reading order, headings, tables and text of document pages,
scored with the measures OmniDocBench uses, default engine with and without the layout stage.

    python benchmarks/doc_bench.py make DIR [--seed 700] [--pages 6] [--font F ...]   # generated pages
    python benchmarks/doc_bench.py score DATASET --cache pages.pkl [--ref-order labels] [--kinds document]

``make`` writes ``ocrforge synth`` document pages with a known reading order into DIR/<set>/:
2- and 3-column pages (``--kind columns``: spanning titles and section headings, figures with
captions, ruled and unruled tables, running headers and footers) and table pages (``--kind
tables``), each in Chinese and in English. ``score`` reads every page of a labeled data set once
(``layout_accuracy.capture``; ``--cache`` keeps the pages) and scores, per page, then averaged
over pages (as OmniDocBench averages its page-level scores):

- text edit distance: Levenshtein distance between the page text in the engine's order and the
  reference text in reading order (NFKC, whitespace collapsed), divided by the longer of the two;
  on real pages, whose labels cover part of the text, only the lines matched to a labeled line
  make the page text (synthetic pages label every line, so there all lines count);
- reading-order edit distance: the reference positions of the matched lines (IoU >= 0.5) taken in
  the engine's order, edit distance to the same positions sorted, divided by their number;
- headings: a reference line is a heading when its font size is >= 1.25 x the page's median
  size; found = matched to a line of a "title" block; F1 over the headings of all pages;
- tables: cell F1 (row, column, text) of each labeled table against the found table covering it
  (``layout_accuracy.table_scores``).

Dev-set document pages (OmniDocBench, labels in reading order except page furniture) get the
first two with ``--ref-order labels --kinds document``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz.distance import Levenshtein

sys.path.insert(0, str(Path(__file__).parent))
from layout_accuracy import capture, load_cached, table_scores  # noqa: E402

import ocrforge.layout as layout  # noqa: E402
from ocrforge.evaluation.dataset import Record, load_dataset  # noqa: E402
from ocrforge.evaluation.eval import reference_text  # noqa: E402
from ocrforge.evaluation.metrics import match_lines, normalize_text  # noqa: E402
from ocrforge.io.inputs import iter_pages  # noqa: E402

SETS = [("columns_zh", "columns", "zh"), ("columns_en", "columns", "en"),
        ("tables_zh", "tables", "zh"), ("tables_en", "tables", "en")]


def make(out: Path, seed: int, pages: int, fonts: list[str] | None = None) -> None:
    from ocrforge.evaluation.synth import generate

    merged = []
    for k, (name, kind, lang) in enumerate(SETS):
        generate(out / name, pages, seed + k, lang=lang, kind=kind, fonts=fonts)
        for line in (out / name / "labels.jsonl").read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            obj["image"] = f"{name}/{obj['image']}"
            merged.append(json.dumps(obj, ensure_ascii=False))
    (out / "labels.jsonl").write_text("\n".join(merged) + "\n", encoding="utf-8")
    print(f"wrote {len(merged)} pages ({pages} per set: {', '.join(n for n, _, _ in SETS)}) to {out}")


def label_sizes(dataset: str) -> dict[str, list]:
    """Font size of every labeled line, by image file name (synthetic labels carry "size")."""
    out = {}
    for line in (Path(dataset) / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        out[obj["image"]] = [ln.get("size") for ln in obj.get("lines") or []]
    return out


def page_scores(rec: Record, page: Any, ref_order: str, sizes: list | None = None) -> dict[str, Any]:
    ref = normalize_text(reference_text(rec, ref_order))
    out: dict[str, Any] = {"image": rec.name, "lang": rec.lang, "kind": rec.kind}
    if rec.lines is None:
        hyp = normalize_text(page.text)
        out["text_edit"] = Levenshtein.distance(ref, hyp) / max(len(ref), len(hyp), 1)
        return out
    care = [i for i, ln in enumerate(rec.lines) if not ln.ignore]
    m = match_lines([rec.lines[i].poly for i in care], [ln.poly for ln in page.lines])
    if rec.meta.get("source") == "ocrforge-synth":  # every text of the page is labeled
        hyp = normalize_text(page.text)
    else:  # labels of real pages cover part of the text: the lines matched to them, in the engine's order
        matched = sorted(h for _, h, _ in m.pairs)
        hyp = normalize_text("\n".join(page.lines[h].text for h in matched))
    out["text_edit"] = Levenshtein.distance(ref, hyp) / max(len(ref), len(hyp), 1)
    # positions of the matched reference lines in the labels' order, taken in the engine's order
    seq = [r for r, _ in sorted(((r, h) for r, h, _ in m.pairs), key=lambda t: t[1])]
    if ref_order != "labels" and not rec.meta.get("reading_order"):
        return out
    out["order_edit"] = Levenshtein.distance(seq, sorted(seq)) / len(seq) if seq else None
    if sizes and all(s is not None for s in sizes):
        med = float(np.median(sizes))
        heads = {care.index(i) for i, s in enumerate(sizes) if s >= 1.25 * med and i in care}
        title_lines = {i for b in page.blocks if b.kind == "title" for i in b.lines}
        hit_by_ref = {r for r, h, _ in m.pairs if h in title_lines}
        out.update(heads=len(heads), heads_found=len(heads & hit_by_ref),
                   titles=len(title_lines), titles_right=sum(1 for r, h, _ in m.pairs
                                                             if h in title_lines and r in heads))
    out.update(table_scores(rec, page))
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        v = [r[key] for r in rows if r.get(key) is not None]
        return statistics.mean(v) if v else None

    s: dict[str, Any] = {"pages": len(rows), "text_edit": mean("text_edit"), "order_edit": mean("order_edit")}
    heads = sum(r.get("heads", 0) for r in rows)
    if heads:
        found = sum(r["heads_found"] for r in rows)
        titles = sum(r["titles"] for r in rows)
        right = sum(r["titles_right"] for r in rows)
        p, rc = (right / titles if titles else 0.0), found / heads
        s["heading_f1"] = 2 * p * rc / (p + rc) if p + rc else 0.0
    hit = sum(r.get("cells_hit", 0) for r in rows)
    n_ref = sum(r.get("cells_ref", 0) for r in rows)
    n_hyp = sum(r.get("cells_hyp", 0) for r in rows)
    if n_ref:
        s["tables"] = sum(r.get("tables", 0) for r in rows)
        s["cell_f1"] = 2 * hit / (n_ref + n_hyp) if n_ref + n_hyp else 0.0
    return s


def score(args) -> int:
    records = load_dataset(args.dataset)
    if args.kinds:
        records = [r for r in records if r.kind in set(args.kinds.split(","))]
    captured = load_cached(Path(args.cache), records) if Path(args.cache).is_file() else None
    if captured is None:
        captured = capture(records)
        Path(args.cache).write_bytes(__import__("pickle").dumps(
            [{"name": r.name, "captured": c} for r, c in zip(records, captured, strict=True)]))
    sizes = label_sizes(args.dataset)
    result = {}
    for variant in ("off", "layout"):
        rows = []
        for r, c in zip(records, captured, strict=True):
            page = copy.deepcopy(c["page"])
            if variant == "layout":
                layout.analyze(page, image=next(iter_pages(str(r.image))).image, steps=c["steps"])
            rel = Path(r.image).resolve().relative_to(Path(args.dataset).resolve()).as_posix()
            rows.append(page_scores(r, page, args.ref_order, sizes.get(rel)))
        groups = {"all": rows}
        for key in ("kind", "lang"):
            for v in sorted({r[key] for r in rows}):
                groups[f"{key}={v}"] = [r for r in rows if r[key] == v]
        result[variant] = {g: summary(rs) for g, rs in groups.items()}
        print(f"{variant}:")
        for g, s in result[variant].items():
            parts = [f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items() if v is not None]
            print(f"  {g:16s} " + ", ".join(parts))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=700)
    m.add_argument("--pages", type=int, default=6)
    m.add_argument("--font", action="append", help="font file (repeatable), as `ocrforge synth --font`: "
                   "the pages depend on the fonts found, so name them to get the same pages")
    s = sub.add_parser("score")
    s.add_argument("dataset")
    s.add_argument("--cache", required=True)
    s.add_argument("--ref-order", default="auto", choices=["auto", "rule", "labels"])
    s.add_argument("--kinds")
    s.add_argument("--json")
    args = ap.parse_args()
    if args.cmd == "make":
        make(Path(args.out), args.seed, args.pages, args.font)
        return 0
    return score(args)


if __name__ == "__main__":
    raise SystemExit(main())
