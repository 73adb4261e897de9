"""Response bodies: the JSON envelope, and every other format through the exporter registry."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ocrforge.io.exporters import EXPORTERS, export, get_exporter
from ocrforge.io.exporters.text import PAGE_SEPARATOR
from ocrforge.result import Page

try:
    import orjson as _orjson
except ImportError:  # optional: json.dumps gives the same bytes, slower
    _orjson = None

RESPONSE_SCHEMA = "ocrforge.response/1"
FORMATS = ("json", *(f for f in EXPORTERS if f != "json"))  # json here is the envelope


def joined_text(texts: Iterable[str]) -> str:
    """The pages' texts as one, as the response's ``text``."""
    return PAGE_SEPARATOR.join(texts)


def envelope(request_id: str, source: str, kind: str, pages: list[Page],
             timings_ms: dict[str, float], batch: dict[str, int]) -> dict[str, Any]:
    page_dicts = [p.to_dict() for p in pages]
    return {
        "schema": RESPONSE_SCHEMA,
        "request_id": request_id,
        "source": source,
        "content_type": kind,
        "pages": page_dicts,
        "text": joined_text(d["text"] for d in page_dicts),  # each page's text built once
        "timings_ms": {k: round(v, 3) for k, v in timings_ms.items()},
        "batch": batch,
    }


def json_body(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON, as Starlette's JSONResponse writes it; by orjson
    where it is installed (the serve extra): the same bytes for a response envelope (floats
    in their shortest form either way), ~7x faster, and the server's JSON shares the
    interpreter lock with a GPU engine's driver thread."""
    if _orjson is not None:
        return _orjson.dumps(content)
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


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
