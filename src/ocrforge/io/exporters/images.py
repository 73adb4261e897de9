"""Page images for exporters that embed them (PDF), decoded again from the pages' sources."""

from __future__ import annotations

from typing import Any

import numpy as np

from ocrforge.io.inputs import InputError, iter_pages, sniff
from ocrforge.result import Page


def load_page_images(pages: list[Page], *, pdf_dpi: int = 200,
                     max_pixels: int = 80_000_000) -> list[np.ndarray]:
    """The image of every page, decoded from ``page.source`` (a path) exactly as the engine
    decoded it. PDF pages without ``dpi`` get ``pdf_dpi`` (the resolution they were rendered
    at), so their PDF keeps the input's page size."""
    out = []
    source, decoded, is_pdf = None, {}, False  # one document in memory at a time
    for p in pages:
        if p.source != source:
            source, is_pdf = p.source, _is_pdf(p.source)
            decoded = {pi.index: pi.image for pi in iter_pages(
                p.source, pdf_dpi=pdf_dpi, max_pixels=max_pixels)}
        img = decoded.get(p.page_index)
        if img is None or img.shape[:2] != (p.height, p.width):
            raise InputError(p.source, f"page {p.page_index + 1} no longer decodes to the "
                             f"{p.width}x{p.height} image that was read (file changed?)")
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
