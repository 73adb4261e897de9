"""Response bodies: the JSON envelope, and every other format through the exporter registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ocrforge.io.exporters import EXPORTERS, export, get_exporter
from ocrforge.io.exporters.text import PAGE_SEPARATOR
from ocrforge.result import Page

RESPONSE_SCHEMA = "ocrforge.response/1"
FORMATS = ("json", *(f for f in EXPORTERS if f != "json"))  # json here is the envelope


def joined_text(pages: list[Page]) -> str:
    return PAGE_SEPARATOR.join(p.text for p in pages)


def envelope(request_id: str, source: str, kind: str, pages: list[Page],
             timings_ms: dict[str, float], batch: dict[str, int]) -> dict[str, Any]:
    return {
        "schema": RESPONSE_SCHEMA,
        "request_id": request_id,
        "source": source,
        "content_type": kind,
        "pages": [p.to_dict() for p in pages],
        "text": joined_text(pages),
        "timings_ms": {k: round(v, 3) for k, v in timings_ms.items()},
        "batch": batch,
    }


def markdown(pages: list[Page]) -> str:
    return export(pages, "markdown").decode("utf-8")


def render(pages: list[Page], fmt: str, images: Sequence[Any], pdf_dpi: float | None) -> tuple[bytes, str]:
    """A non-JSON response body and its media type. ``pdf_dpi``: the resolution PDF input was
    rendered at (None for images), so a PDF response keeps the input's page size."""
    exporter = get_exporter(fmt)
    if pdf_dpi:
        for p in pages:
            p.dpi = p.dpi or float(pdf_dpi)
    return export(pages, fmt, images=images if exporter.needs_images else None), exporter.media_type
