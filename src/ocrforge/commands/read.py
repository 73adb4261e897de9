"""`ocrforge read`: OCR images, folders and PDFs to text or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ocrforge.cli import add_engine_options, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("read", help="OCR images, folders of images and PDFs")
    p.add_argument("inputs", nargs="+", help="image files, folders, PDFs")
    p.add_argument("-f", "--format", choices=["text", "json"], default="text")
    p.add_argument("-o", "--output", help="write here (a file; or a folder: one file per input page)")
    p.add_argument("--dpi", type=int, help="PDF render resolution (default 200)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_options(p)
    p.set_defaults(func=run)


def _render(pages: list, fmt: str) -> str:
    if fmt == "json":
        docs = [p.to_dict() for p in pages]
        return json.dumps(docs[0] if len(docs) == 1 else docs, ensure_ascii=False, indent=2) + "\n"
    parts = []
    for p in pages:
        if len(pages) > 1:
            parts.append(f"==> {p.source}" + (f" [page {p.page_index + 1}]" if p.page_index else "") + " <==")
        parts.append(p.text)
    return "\n".join(parts) + "\n"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ocrforge.config import atomic_write_text
    from ocrforge.engine import OCR
    from ocrforge.io.inputs import expand_paths

    cfg = engine_config_from_args(args)
    if args.dpi:
        cfg = cfg.with_(pdf_dpi=args.dpi)
    files = expand_paths(args.inputs)
    if not files:
        print("ocrforge: error: no input files found", file=sys.stderr)
        return 2
    err = Console(stderr=True)
    engine = OCR(cfg)
    out_dir = Path(args.output) if args.output and (Path(args.output).is_dir() or args.output.endswith("/")) else None
    pages = []
    failed = 0
    show = not args.no_progress and (len(files) > 1 or Path(files[0]).suffix.lower() in (".pdf", ".tif", ".tiff"))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("inputs"), TimeRemainingColumn(), console=err, disable=not show,
                  transient=False) as progress:
        task = progress.add_task("OCR", total=len(files))
        last_source = None
        for page in engine.read_many(files):
            if page.source != last_source:
                if last_source is not None:
                    progress.advance(task)
                last_source = page.source
            if not page.ok:
                failed += 1
                err.print(f"[red]error[/]: {page.source}: {page.error}", highlight=False)
                continue
            if out_dir is not None:
                stem = Path(page.source).stem + (f".p{page.page_index + 1}" if page.page_index else "")
                ext = ".json" if args.format == "json" else ".txt"
                atomic_write_text(out_dir / (stem + ext), _render([page], args.format))
            else:
                pages.append(page)
        progress.advance(task)
    if out_dir is None:
        text = _render(pages, args.format) if pages else ""
        if args.output:
            atomic_write_text(args.output, text)
        else:
            sys.stdout.write(text)
    if failed:
        err.print(f"{failed} input(s) failed", highlight=False)
        return 1
    return 0
