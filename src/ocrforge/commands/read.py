"""`ocrforge read`: OCR images, folders and PDFs to text, JSON, Markdown, hOCR, ALTO or PDF."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ocrforge.cli import add_engine_options, engine_config_from_args, engine_from_args
from ocrforge.io.exporters import EXPORTERS, export

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


def _write_document(target: Path, pages: list, fmt: str, cfg) -> None:
    from ocrforge.config import atomic_write_bytes

    if target.resolve() == Path(pages[0].source).resolve():
        raise SystemExit(f"ocrforge: error: {target} would overwrite its input; pick another -o folder")
    atomic_write_bytes(target, _render(pages, fmt, cfg))


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

    def __init__(self, out_dir: Path, names: dict[str, Path], ext: str):
        self.out_dir = out_dir
        self.names = names
        self.ext = ext
        self.used: set[Path] = set()
        self.taken_stems = {n.as_posix() for n in names.values()}

    def document(self, item: str) -> Path:
        """The one output file of a whole input (multi-page formats)."""
        path = self.out_dir / (self.names[item].as_posix() + self.ext)
        self.used.add(path)
        return path

    def path(self, item: str, page_index: int) -> Path:
        base = self.names[item]
        name = base.as_posix()
        if page_index:
            cand = f"{name}.p{page_index + 1}"
            # "doc.pdf" page 2 vs an input named "doc.p2.png": keep the first one's extension
            if cand in self.taken_stems:
                cand = f"{name}{Path(item).suffix}.p{page_index + 1}"
            name = cand
        path = self.out_dir / (name + self.ext)
        if path in self.used:
            raise FileExistsError(f"output {path} would be written twice in this run")
        self.used.add(path)
        return path


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
    engine = engine_from_args(args, cfg)
    out_dir = Path(args.output) if args.output and (Path(args.output).is_dir() or args.output.endswith("/")) else None
    exporter = EXPORTERS[args.format]
    outputs = None
    if out_dir is not None:
        outputs = _Outputs(out_dir, output_names(files, args.inputs), exporter.extension)
    pages = []
    document: list = []  # pages of the current input, for multi-page formats into a folder
    document_owner = 0
    failed = 0
    multi = len(files) > 1 or Path(files[0]).suffix.lower() in (".pdf", ".tif", ".tiff")
    show = not args.no_progress and multi
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("inputs"), TimeRemainingColumn(), console=err, disable=not show,
                  transient=False) as progress:
        task = progress.add_task("OCR", total=len(files))
        k = 0
        for page in engine.read_many(files):
            owner = _owner(files, k, page)
            if owner != k:
                progress.advance(task, owner - k)
                k = owner
            if not page.ok:
                failed += 1
                err.print(f"[red]error[/]: {escape(page.source)}: {escape(str(page.error))}",
                          highlight=False)
                if args.format != "json":
                    continue
                # in JSON the failed page keeps its place: source = the input, page = its number
                page.page_index = _page_index(page)
                page.source = STDIN_SOURCE if files[k] == STDIN else files[k]
            if outputs is not None and exporter.multi_page:
                if document and document_owner != k:
                    _write_document(outputs.document(files[document_owner]), document, args.format, cfg)
                    document = []
                document_owner = k
                document.append(page)
            elif outputs is not None:
                try:
                    path = outputs.path(files[k], page.page_index)
                except FileExistsError as e:
                    failed += 1
                    err.print(f"[red]error[/]: {escape(str(e))}", highlight=False)
                    continue
                atomic_write_bytes(path, _render([page], args.format, cfg))
            else:
                pages.append(page)
        progress.advance(task, len(files) - k)
    if document and outputs is not None:
        _write_document(outputs.document(files[document_owner]), document, args.format, cfg)
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
