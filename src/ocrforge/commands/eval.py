"""`ocrforge eval`: accuracy (CER, detection P/R/F1, line accuracy) on a labeled data set."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ocrforge.cli import add_engine_options, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="accuracy of an engine configuration on a labeled data set")
    p.add_argument("dataset", help="folder with labels.jsonl and images/ (dev-set format)")
    p.add_argument("--limit", type=int, help="only the first N records")
    p.add_argument("--json", metavar="OUT", help="write the full result (per page too) as JSON here")
    p.add_argument("--casefold", choices=["auto", "always", "never"], default="auto",
                   help="case-insensitive comparison: auto = receipts only (SROIE labels are upper-case)")
    p.add_argument("--single", action="store_true",
                   help="one read() per image instead of the read_many pipeline")
    p.add_argument("--per-page", action="store_true", help="also print one row per page")
    p.add_argument("--ref-order", choices=["auto", "rule", "labels"], default="auto",
                   help="reading order of the reference page text: the labels' line order, the "
                        "top-to-bottom rule, or auto (labels for documents and where a record says "
                        "they are in reading order, e.g. ocrforge synth pages; the rule otherwise)")
    add_engine_options(p)
    p.set_defaults(func=run)


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{100.0 * v:.2f}"


def results_table(res: dict[str, Any], title: str):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title))
    for col in ("group", "pages", "ref lines", "CER %", "CER aligned %", "CER no-space %", "word acc %",
                "order tau", "det P %", "det R %", "det F1 %", "line acc %"):
        t.add_column(col, justify="left" if col == "group" else "right")

    def row(name: str, g: dict[str, Any], style: str | None = None) -> None:
        tau = g.get("order_tau")
        t.add_row(escape(name), str(g["pages"]), str(g["lines"]), _pct(g["cer"]), _pct(g["cer_aligned"]),
                  _pct(g["cer_nospace"]), _pct(g.get("word_acc")), "n/a" if tau is None else f"{tau:.3f}",
                  _pct(g["det_precision"]), _pct(g["det_recall"]), _pct(g["det_f1"]),
                  _pct(g["line_acc"]), style=style)

    row("overall", res["overall"], "bold")
    for key, label in (("by_lang", "lang"), ("by_kind", "kind")):
        t.add_section()
        for name, g in res[key].items():
            row(f"{label}={name}", g)
    return t


def _console(table: Any) -> Any:
    """A console at least 120 wide; when stdout is not a terminal (a pipe, a file) as wide as
    the table needs, so group labels and numbers are never cut."""
    from rich.console import Console
    from rich.measure import Measurement

    term = Console()
    width = max(term.width, 120)
    if not term.is_terminal:
        probe = Console(width=10_000)
        width = max(width, Measurement.get(probe, probe.options, table).maximum)
    return Console(width=width)


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from ocrforge.config import atomic_write_text
    from ocrforge.engine import OCR
    from ocrforge.evaluation.eval import evaluate

    cfg = engine_config_from_args(args)
    engine = OCR(cfg)
    res = evaluate(engine, args.dataset, args.limit, casefold=args.casefold,
                   batch=not args.single, ref_order=args.ref_order)
    table = results_table(res, f"ocrforge eval {args.dataset}")
    con = _console(table)
    desc = res["config"]
    con.print("[bold]configuration[/] " + escape(f"(ocrforge {desc['ocrforge']}, onnxruntime {desc['onnxruntime']}):"))
    con.print(escape(json.dumps(desc["engine_config"], sort_keys=True)), highlight=False, soft_wrap=True)
    con.print(escape("model files: " + ", ".join(f"{k}={v}" for k, v in desc["model_files"].items())),
              highlight=False, soft_wrap=True)
    o = res["options"]
    con.print(escape(f"scoring: {o['normalisation']}; case-insensitive: {o['casefold']} "
              f"(auto = kinds {', '.join(o['casefold_kinds'])}); detection IoU >= {o['iou']}; "
              f"reference order: {o['ref_order']}; layout stage: {'on' if cfg.layout.enabled else 'off'}; "
              f"{'read_many' if not args.single else 'read()'}; {res['elapsed_s']:.1f} s"),
              highlight=False)
    con.print(table)
    if args.per_page:
        t = Table(title="per page")
        for col in ("image", "lang", "kind", "CER %", "ref chars", "TP", "FP", "FN", "correct", "error"):
            t.add_column(col)
        for s in res["pages"]:
            t.add_row(escape(s["image"]), escape(s["lang"]), escape(s["kind"]), _pct(s["cer"]), str(s["ref_chars"]),
                      *(str(s.get(k, "-")) for k in ("tp", "fp", "fn", "correct_lines")),
                      escape(s["error"] or ""))
        con.print(t)
    if args.json:
        atomic_write_text(args.json, json.dumps(res, ensure_ascii=False, indent=2) + "\n")
        con.print(escape(f"wrote {args.json}"), highlight=False)
    return 1 if res["overall"]["errors"] else 0
