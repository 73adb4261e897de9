"""`ocrforge read`: OCR images, folders and PDFs to text, JSON, Markdown, hOCR, ALTO or PDF."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ocrforge.cli import add_engine_options, engine_config_from_args
from ocrforge.io.exporters import EXPORTERS, export


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("read", help="OCR images, folders of images and PDFs")
    p.add_argument("inputs", nargs="+", help="image files, folders, PDFs")
    p.add_argument("-f", "--format", choices=list(EXPORTERS), default="text",
                   help="output format (pdf: the page images with an invisible text layer)")
    p.add_argument("-o", "--output", help="write here (a file; or a folder: one file per input "
                   "page, or per input document for the multi-page formats hocr, alto and pdf)")
    p.add_argument("--dpi", type=int, help="PDF render resolution (default 200)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_options(p)
    p.set_defaults(func=run)


def _render(pages: list, fmt: str, cfg) -> bytes:
    if fmt == "text" and len(pages) > 1:  # several pages on one stream: name each one
        from ocrforge.io.exporters.structure import page_text

        parts = []
        for p in pages:
            parts.append(f"==> {p.source}" + (f" [page {p.page_index + 1}]" if p.page_index else "") + " <==")
            parts.append(page_text(p))
        return ("\n".join(parts) + "\n").encode("utf-8")
    images = None
    if EXPORTERS[fmt].needs_images:
        from ocrforge.io.exporters.images import load_page_images

        images = load_page_images(pages, pdf_dpi=cfg.limits.pdf_dpi, max_pixels=cfg.limits.max_pixels)
    return export(pages, fmt, images=images)


def _write_document(out_dir: Path, pages: list, fmt: str, cfg) -> None:
    from ocrforge.config import atomic_write_bytes

    target = out_dir / (Path(pages[0].source).stem + EXPORTERS[fmt].extension)
    if target.resolve() == Path(pages[0].source).resolve():
        raise SystemExit(f"ocrforge: error: {target} would overwrite its input; pick another -o folder")
    atomic_write_bytes(target, _render(pages, fmt, cfg))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ocrforge.config import atomic_write_bytes
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
    exporter = EXPORTERS[args.format]
    pages = []
    document: list = []  # pages of the current input, for multi-page formats into a folder
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
            if out_dir is not None and exporter.multi_page:
                if document and document[0].source != page.source:
                    _write_document(out_dir, document, args.format, cfg)
                    document = []
                document.append(page)
            elif out_dir is not None:
                stem = Path(page.source).stem + (f".p{page.page_index + 1}" if page.page_index else "")
                atomic_write_bytes(out_dir / (stem + exporter.extension), _render([page], args.format, cfg))
            else:
                pages.append(page)
        progress.advance(task)
    if document:
        _write_document(out_dir, document, args.format, cfg)
    if out_dir is None:
        data = _render(pages, args.format, cfg) if pages else b""
        if args.output:
            atomic_write_bytes(args.output, data)
        elif exporter.binary:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data.decode("utf-8"))
    if failed:
        err.print(f"{failed} input(s) failed", highlight=False)
        return 1
    return 0
