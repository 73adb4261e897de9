"""Exporters: one registry of output formats for the CLI (`ocrforge read -f`) and the server.

>>> from ocrforge.io.exporters import EXPORTERS, export
>>> data = export(pages, "hocr")                       # bytes
>>> pdf = export(pages, "pdf", images=[img, ...])      # the PDF needs the page images
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ocrforge.io.exporters import alto, hocr, jsondoc, markdown, pdf, text
from ocrforge.result import Page


@dataclass(frozen=True)
class Exporter:
    """An output format.

    ``multi_page``: one file holds a whole document (the CLI writes one file per input
    document into an output folder; otherwise one file per page). ``needs_images``: render()
    takes the page images (BGR or grey uint8 arrays), one per page. ``needs_structure``: the
    format is built from blocks, tables and words, so the layout stage runs for it whatever the
    engine's ``layout.enabled`` (``--no-layout`` gives raw lines only in text and JSON).
    """

    name: str
    extension: str
    media_type: str
    render: Callable[[list[Page], Sequence[Any] | None], bytes]
    multi_page: bool = False
    needs_images: bool = False
    binary: bool = False
    # every page on its own: (output or None, messages naming the pages left out)
    render_pages: Callable[[list[Page], Sequence[Any] | None], tuple[bytes | None, list[str]]] | None = None
    needs_structure: bool = False


EXPORTERS: dict[str, Exporter] = {
    e.name: e
    for e in (
        Exporter("text", ".txt", "text/plain; charset=utf-8", text.render),
        Exporter("json", ".json", "application/json", jsondoc.render),
        Exporter("markdown", ".md", "text/markdown; charset=utf-8", markdown.render,
                 needs_structure=True),
        Exporter("hocr", ".hocr", "application/xhtml+xml", hocr.render, multi_page=True,
                 needs_structure=True),
        Exporter("alto", ".xml", "application/xml", alto.render, multi_page=True,
                 needs_structure=True),
        Exporter("pdf", ".pdf", "application/pdf", pdf.render, multi_page=True,
                 needs_images=True, binary=True, render_pages=pdf.render_pages,
                 needs_structure=True),
    )
}
ALIASES = {"md": "markdown", "txt": "text", "xml": "alto"}


def get_exporter(fmt: str) -> Exporter:
    """The exporter for a format name (or alias), with a clear error for unknown names."""
    key = ALIASES.get(fmt.strip().lower(), fmt.strip().lower())
    try:
        return EXPORTERS[key]
    except KeyError:
        raise ValueError(f"unknown output format {fmt!r}; choose one of "
                         f"{', '.join(EXPORTERS)}") from None


def export(pages: list[Page], fmt: str, *, images: Sequence[Any] | None = None) -> bytes:
    """Render pages in a format; ``images`` (one per page) is required for "pdf"."""
    exporter = get_exporter(fmt)
    if exporter.needs_images:
        if images is None:
            raise ValueError(f"the {exporter.name} export needs the page images (images=...)")
        if len(images) != len(pages):
            raise ValueError(f"{len(pages)} pages but {len(images)} page images")
    return exporter.render(list(pages), images if exporter.needs_images else None)


def export_pages(pages: list[Page], fmt: str, *,
                 images: Sequence[Any] | None = None) -> tuple[bytes | None, list[str]]:
    """Like export(), but a page that cannot be exported (for "pdf": its entry in ``images``
    is an exception, or its image does not fit the page) is left out with a message naming
    it and the others are written. Returns (output, or None when no page was; messages)."""
    exporter = get_exporter(fmt)
    if exporter.render_pages is None:
        return export(pages, fmt, images=images), []
    if images is None or len(images) != len(pages):
        raise ValueError(f"the {exporter.name} export needs one page image per page")
    return exporter.render_pages(list(pages), images)


__all__ = ["ALIASES", "EXPORTERS", "Exporter", "export", "export_pages", "get_exporter"]
