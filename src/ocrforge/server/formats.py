"""Response bodies: the JSON envelope, plain text and Markdown."""

from __future__ import annotations

import re
from typing import Any

from ocrforge.result import Page

RESPONSE_SCHEMA = "ocrforge.response/1"
PAGE_SEPARATOR = "\f"  # between pages in "text", as pdftotext does

_MD_INLINE = re.compile(r"([\\`*_\[\]<>|])")
_MD_BLOCK = re.compile(r"^(\s*)([#+-])")  # would start a heading or list
_MD_ORDERED = re.compile(r"^(\s*\d+)\.")


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
    """Each page's rows as Markdown lines (special characters escaped), pages split by rules."""
    parts = []
    for p in pages:
        rows = [_escape(row) for row in p.text.split("\n") if row.strip()]
        parts.append("  \n".join(rows))
    return "\n\n---\n\n".join(parts) + "\n"


def _escape(row: str) -> str:
    row = _MD_INLINE.sub(r"\\\1", row)
    row = _MD_BLOCK.sub(r"\1\\\2", row)
    return _MD_ORDERED.sub(r"\1\\.", row)
