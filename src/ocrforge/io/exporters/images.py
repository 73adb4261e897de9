"""Page images for exporters that embed them (PDF), decoded again from the pages' sources."""

from __future__ import annotations

from typing import Any

import numpy as np

from ocrforge.io.inputs import InputError, iter_pages, sniff
from ocrforge.result import Page


def given_size(page: Page) -> tuple[int, int]:
    """(width, height) of the image as it was given: the upright page's size turned back by
    ``page.rotation``."""
    if page.rotation in (90, 270):
        return page.height, page.width
    return page.width, page.height


def load_page_images(pages: list[Page], *, pdf_dpi: int = 200,
                     max_pixels: int = 80_000_000) -> list[np.ndarray | InputError]:
    """The image of every page as it was given (before page orientation turned it), decoded
    from ``page.source`` (a path) exactly as the engine decoded it. A page whose image cannot
    be had gets an InputError naming it in its place, so the other pages still export. PDF
    pages without ``dpi`` get ``pdf_dpi`` (the resolution they were rendered at), so their
    PDF keeps the input's page size."""
    out: list[np.ndarray | InputError] = []
    source, decoded, is_pdf, failed = None, {}, False, None  # one document in memory at a time
    for p in pages:
        if p.source != source:
            source, is_pdf, failed = p.source, _is_pdf(p.source), None
            wanted = {q.page_index for q in pages if q.source == p.source}
            try:
                decoded = {pi.index: pi.image for pi in iter_pages(
                    p.source, pdf_dpi=pdf_dpi, max_pixels=max_pixels, max_pdf_pages=max(wanted) + 1,
                    pages=",".join(str(i + 1) for i in sorted(wanted)))}
            except (InputError, OSError, ValueError) as e:
                decoded, failed = {}, e
        if failed is not None:
            out.append(InputError(p.source, f"page {p.page_index + 1}: cannot decode it again "
                                  f"for the export ({failed})"))
            continue
        img = decoded.get(p.page_index)
        w, h = given_size(p)
        if img is None or img.shape[:2] != (h, w):
            got = "no such page" if img is None else f"{img.shape[1]}x{img.shape[0]}"
            out.append(InputError(p.source, f"page {p.page_index + 1} no longer decodes to the "
                                  f"{w}x{h} image that was read ({got}; file changed?)"))
            continue
        if is_pdf and not p.dpi:
            p.dpi = float(pdf_dpi)
        out.append(img)
    return out


def _is_pdf(source: Any) -> bool:
    try:
        with open(source, "rb") as f:
            return sniff(f.read(1024)) == "pdf"
    except OSError:
        return False
