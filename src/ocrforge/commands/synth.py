"""`ocrforge synth`: deterministic synthetic labeled pages (dev-set labels.jsonl format)."""

from __future__ import annotations

import argparse
import time


def register(sub: argparse._SubParsersAction) -> None:
    from ocrforge.evaluation.synth import EXTRA_KINDS, KINDS

    p = sub.add_parser("synth", help="generate labeled synthetic pages (documents, receipts, tables, forms, UI, columns)")
    p.add_argument("out", help="output folder (images/ and labels.jsonl are written there)")
    p.add_argument("--pages", type=int, default=100, help="number of pages (default 100)")
    p.add_argument("--seed", type=int, default=0, help="random seed: same seed + same fonts = same bytes")
    p.add_argument("--lang", choices=["zh", "en", "mixed", "all"], default="all")
    p.add_argument("--kind", choices=[*KINDS, *EXTRA_KINDS, "all"], default="all",
                   help="page kind; 'all' mixes the first five; columns (multi-column documents) and "
                        "tables carry the true reading order and table cells in their labels")
    p.add_argument("--min-lines", type=int, default=1, help="re-draw pages with fewer labeled lines")
    p.add_argument("--clean", action="store_true",
                   help="no degradations or rotation, text >= 16 px (sanity checks)")
    p.add_argument("--font", action="append", dest="fonts", metavar="PATH",
                   help="use these font files only (repeatable); default: simfang.ttf + Debian fonts found")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from ocrforge.evaluation.synth import find_fonts, generate

    err = Console(stderr=True)
    fonts = find_fonts(args.fonts)
    err.print(escape("fonts: " + ", ".join(f.name for f in fonts)), highlight=False)
    t0 = time.perf_counter()
    with Progress(TextColumn("synth"), BarColumn(), MofNCompleteColumn(), console=err) as prog:
        task = prog.add_task("synth", total=args.pages)
        generate(args.out, args.pages, args.seed, lang=args.lang, kind=args.kind, min_lines=args.min_lines,
                 clean=args.clean, fonts=args.fonts,
                 progress=lambda n: prog.update(task, completed=n))
    err.print(escape(f"wrote {args.pages} pages to {args.out} in {time.perf_counter() - t0:.1f} s"),
              highlight=False)
    return 0
