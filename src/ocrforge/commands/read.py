"""`ocrforge read`: OCR images, folders and PDFs to text, JSON, Markdown, hOCR, ALTO or PDF."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from ocrforge.cli import add_engine_options, engine_config_from_args, engine_from_args
from ocrforge.io.exporters import EXPORTERS, export_pages
from ocrforge.paths import OutputError, printable

STDIN = "-"
STDIN_SOURCE = "<stdin>"


def register(sub: argparse._SubParsersAction) -> None:
    from ocrforge.config import EngineConfig

    lim = EngineConfig().limits
    p = sub.add_parser("read", help="OCR images, folders of images and PDFs")
    p.add_argument("inputs", nargs="+", help="image files, folders, PDFs; - reads one input from stdin")
    p.add_argument("-f", "--format", choices=list(EXPORTERS), default="text",
                   help="output format (pdf: the page images with an invisible text layer)")
    p.add_argument("-o", "--output", help="write here (a file; or a folder, given with a trailing / "
                   "or existing: one file per input page, or per input document for the multi-page "
                   "formats hocr, alto and pdf, mirroring the input folders)")
    p.add_argument("--dpi", type=int, help=f"PDF render resolution (default {lim.pdf_dpi})")
    p.add_argument("--pages", help="pages of PDFs and multi-page TIFFs to read, 1-based: 1-5,8,10- "
                   "(default all)")
    p.add_argument("--max-pixels", type=int,
                   help=f"largest image or rendered page in pixels (default {lim.max_pixels:,})")
    p.add_argument("--max-pdf-pages", type=int,
                   help=f"largest number of PDF pages read (default {lim.max_pdf_pages})")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_options(p)
    p.set_defaults(func=run)


def _render(pages: list, fmt: str, cfg, failures: list[str]) -> bytes | None:
    """The output of some pages; a page that cannot be exported is left out and named in
    ``failures`` (None: no page could be)."""
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
    data, failed = export_pages(pages, fmt, images=images)
    failures += failed
    return data


def _write_document(target: Path, pages: list, fmt: str, cfg, failures: list[str]) -> None:
    from ocrforge.config import atomic_write_bytes

    if target.resolve() == Path(pages[0].source).resolve():
        raise SystemExit(f"ocrforge: error: {target} would overwrite its input; pick another -o folder")
    data = _render(pages, fmt, cfg, failures)
    if data is not None:
        atomic_write_bytes(target, data)


def _write_stdout(data: bytes, binary: bool) -> None:
    try:
        if binary:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
    except OSError as e:  # stdout redirected to a full disk
        raise OutputError("<stdout>", e) from None


def output_names(files: list[str], roots: list[str]) -> dict[str, Path]:
    """Output path stem (relative to the output folder) of each input, mirroring the input tree
    below the common folder of the arguments, so ``c/x/doc.png`` and ``c/y/doc.png`` become
    ``x/doc`` and ``y/doc``. Inputs that would still share a stem in one folder (``doc.png``
    and ``doc.pdf``) keep their extension: ``doc.png``, ``doc.pdf``."""
    import os

    real = [f for f in files if f != STDIN]
    bases = [str(Path(r).resolve()) if Path(r).is_dir() else str(Path(r).resolve().parent)
             for r in roots if r != STDIN]
    common = Path(os.path.commonpath(bases)) if bases else Path.cwd()
    rel = {f: Path(os.path.relpath(Path(f).resolve(), common)) for f in real}
    stems: dict[Path, list[str]] = {}
    for f, r in rel.items():
        stems.setdefault(r.with_suffix(""), []).append(f)
    out: dict[str, Path] = {}
    for stem, owners in stems.items():
        for f in owners:
            out[f] = rel[f] if len(owners) > 1 else stem
    if STDIN in files:
        out[STDIN] = Path("stdin")
    return out


class _Outputs:
    """Where each page goes in an output folder; a name is never used twice in one run."""

    def __init__(self, out_dir: Path, names: dict[str, Path], ext: str,
                 pages: dict[str, int] | None = None):
        self.out_dir = out_dir
        self.names = names
        self.ext = ext
        self.pages = pages or {}  # input -> page count (page numbers are padded to its digits)
        self.used: set[Path] = set()
        self.taken_stems = {n.as_posix() for n in names.values()}

    def document_path(self, item: str) -> Path:
        return self.out_dir / (self.names[item].as_posix() + self.ext)

    def document(self, item: str) -> Path:
        """The one output file of a whole input (multi-page formats)."""
        path = self.document_path(item)
        self.used.add(path)
        return path

    def path(self, item: str, page_index: int) -> Path:
        from ocrforge.jobs.naming import page_suffix

        name = self.names[item].as_posix()
        suffix = page_suffix(page_index, self.pages.get(item, 1))
        if suffix:
            # "doc.pdf" page 2 vs an input named "doc.p2.png": keep the first one's extension
            name = (f"{name}{suffix}" if f"{name}{suffix}" not in self.taken_stems
                    else f"{name}{Path(item).suffix}{suffix}")
        path = self.out_dir / (name + self.ext)
        if path in self.used:
            raise FileExistsError(f"output {path} would be written twice in this run")
        self.used.add(path)
        return path


def _count_inputs(files: list[str], pages: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Page counts of the input files from their headers, and the InputError of each input that
    cannot be read (missing, empty, not an image or PDF): checked before any model is loaded.
    stdin is in neither (it can be read only once)."""
    from ocrforge.io.inputs import InputError, count_pages

    counts: dict[str, Any] = {}
    bad: dict[str, Any] = {}
    for f in files:
        if f == STDIN:
            continue
        try:
            counts[f] = count_pages(f, pages=pages)
        except InputError as e:
            bad[f] = e
    return counts, bad


def _overwritten_input(files: list[str], args: argparse.Namespace, outputs: _Outputs | None,
                       multi_page: bool) -> str | None:
    """The output path that would overwrite one of the inputs, if any (checked before OCR)."""
    inputs = {Path(f).resolve() for f in files if f != STDIN}
    if outputs is None:
        targets = [Path(args.output)] if args.output else []
    else:
        targets = [outputs.document_path(f) for f in files if multi_page and f != STDIN]
    return next((str(t) for t in targets if t.resolve() in inputs), None)


def _pages(args: Any, cfg: Any, files: list[str], bad: dict[str, Any]) -> Iterator[Any]:
    """Pages of every input in order; when no input can be read, their error pages, without
    loading any model."""
    if bad and len(bad) == len(files):
        from ocrforge.result import Page

        for f in files:
            yield Page([], 0, 0, source=f, error=bad[f].reason)
        return
    yield from engine_from_args(args, cfg).read_many(files)


def _owner(files: list[str], k: int, page) -> int:
    """Index of the input a page from read_many belongs to (pages come in input order; an
    error page's source may carry a page suffix)."""
    while k < len(files):
        src = STDIN_SOURCE if files[k] == STDIN else files[k]
        if page.source == src or page.source.startswith(src + " [page "):
            return k
        k += 1
    raise RuntimeError(f"page of unknown input {page.source!r}")


def _page_index(page) -> int:
    """0-based page number; an error page carries it only in its source ("doc.pdf [page 3]")."""
    m = re.search(r" \[page (\d+)\]$", page.source) if not page.ok else None
    return int(m.group(1)) - 1 if m else page.page_index


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ocrforge.config import atomic_write_bytes
    from ocrforge.io.inputs import expand_paths, parse_page_range

    cfg = engine_config_from_args(args)
    limits = {"pdf_dpi": args.dpi, "max_pixels": args.max_pixels,
              "max_pdf_pages": args.max_pdf_pages, "pages": args.pages}
    limits = {k: v for k, v in limits.items() if v is not None}
    if limits:
        cfg = cfg.with_(**limits)
    if cfg.limits.pages:
        parse_page_range(cfg.limits.pages)  # a bad range is an error before any work
    if args.inputs.count(STDIN) > 1:
        print("ocrforge: error: stdin (-) can be read only once", file=sys.stderr)
        return 2
    files = expand_paths(args.inputs)
    if not files:
        print("ocrforge: error: no input files found", file=sys.stderr)
        return 2
    err = Console(stderr=True)
    if EXPORTERS[args.format].needs_structure and not cfg.layout.enabled:
        cfg = cfg.with_(use_layout=True)  # blocks, tables and words are what the format is made of
    counts, bad = _count_inputs(files, cfg.limits.pages)
    out_dir = Path(args.output) if args.output and (Path(args.output).is_dir() or args.output.endswith("/")) else None
    exporter = EXPORTERS[args.format]
    outputs = None
    if out_dir is not None:
        outputs = _Outputs(out_dir, output_names(files, args.inputs), exporter.extension,
                           pages={f: c.total for f, c in counts.items()})
    clash = _overwritten_input(files, args, outputs, exporter.multi_page)
    if clash:
        print(f"ocrforge: error: {clash} would overwrite its input; pick another -o", file=sys.stderr)
        return 2
    pages = []
    document: list = []  # pages of the current input, for multi-page formats into a folder
    document_owner = 0
    failed = 0
    failures: list[str] = []  # pages left out of an export
    multi = len(files) > 1 or Path(files[0]).suffix.lower() in (".pdf", ".tif", ".tiff")
    show = not args.no_progress and multi
    # closing: an output error (disk full) stops the engine's threads before it propagates
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("pages"), TimeRemainingColumn(), console=err, disable=not show,
                  transient=False) as progress, closing(_pages(args, cfg, files, bad)) as stream:
        # pages, not inputs (a 40-page PDF is 40 steps); an unreadable input or stdin is one
        total = sum(c.selected for c in counts.values()) + len(files) - len(counts)
        task = progress.add_task("OCR", total=total)
        k = done = 0
        for page in stream:
            k = _owner(files, k, page)
            done += 1
            progress.update(task, completed=done, total=max(total, done))  # stdin: any pages
            if not page.ok:
                failed += 1
                err.print(f"[red]error[/]: {escape(printable(page.source))}: "
                          f"{escape(printable(page.error))}", highlight=False, soft_wrap=True)
                if args.format != "json":
                    continue
                # in JSON the failed page keeps its place: source = the input, page = its number
                page.page_index = _page_index(page)
                page.source = STDIN_SOURCE if files[k] == STDIN else files[k]
            if outputs is not None and exporter.multi_page:
                if document and document_owner != k:
                    _write_document(outputs.document(files[document_owner]), document, args.format,
                                    cfg, failures)
                    document = []
                document_owner = k
                document.append(page)
            elif outputs is not None:
                try:
                    path = outputs.path(files[k], page.page_index)
                except FileExistsError as e:
                    failed += 1
                    err.print(f"[red]error[/]: {escape(printable(e))}", highlight=False,
                              soft_wrap=True)
                    continue
                data = _render([page], args.format, cfg, failures)
                if data is not None:
                    atomic_write_bytes(path, data)
            else:
                pages.append(page)
        progress.update(task, completed=max(total, done))  # pages an input's failure cut off
    if document and outputs is not None:
        _write_document(outputs.document(files[document_owner]), document, args.format, cfg, failures)
    if out_dir is None:
        data = _render(pages, args.format, cfg, failures) if pages else b""
        if data is None:  # no page could be exported: nothing written (errors below)
            pass
        elif args.output:
            atomic_write_bytes(args.output, data)
        else:
            _write_stdout(data, exporter.binary)
    for msg in failures:
        err.print(f"[red]error[/]: {escape(msg)} (left out of the {args.format} output)",
                  highlight=False)
    failed += len(failures)
    if failed:
        err.print(f"{failed} input(s) failed", highlight=False)
        return 1
    return 0
