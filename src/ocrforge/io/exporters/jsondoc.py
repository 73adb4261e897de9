"""JSON in the page schema (``ocrforge.page/1``, Page.to_dict): one object for one page, a
list for several."""

from __future__ import annotations

import json
from typing import Any

from ocrforge.result import Page


def render(pages: list[Page], images: Any = None) -> bytes:
    docs = [p.to_dict() for p in pages]
    body = docs[0] if len(docs) == 1 else docs
    return (json.dumps(body, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
