"""Plain text in reading order; pages separated by a form feed, as pdftotext does."""

from __future__ import annotations

from typing import Any

from ocrforge.io.exporters.structure import page_text
from ocrforge.result import Page

PAGE_SEPARATOR = "\f"


def render(pages: list[Page], images: Any = None) -> bytes:
    return (PAGE_SEPARATOR.join(page_text(p) for p in pages) + "\n").encode("utf-8")
