"""Markdown: titles as headings, paragraphs as running text, lists, tables as pipe tables.

Running headers and footers (page furniture) are left out, as docling does; they remain in
the text, hOCR, ALTO and PDF outputs. Figures without text are left out. Without blocks from
the layout stage, each row of the page (lines sharing a row joined, as in the text output)
is its own paragraph. Pages are separated by a horizontal rule.
"""

from __future__ import annotations

import re
from typing import Any

from ocrforge.io.exporters.structure import join_lines, regions, table_grid
from ocrforge.result import Page

PAGE_RULE = "\n\n---\n\n"
SKIPPED_KINDS = ("header", "footer")

_MD_INLINE = re.compile(r"([\\`*_\[\]<>|])")
# only what would start a heading, a list item or a rule (CommonMark needs the space after
# "#", "-", "+" and "1."), so "6.32", "-5.00" and "#1" stay as written, in cells and elsewhere
_MD_BLOCK = re.compile(r"^(\s*)([#+-])(?=\s|$|-+\s*$)")
_MD_ORDERED = re.compile(r"^(\s*\d{1,9})([.)])(?=\s|$)")
_BULLET = re.compile(r"^\s*(?:[-*+•·▪◦●○■□–—]|\d{1,3}[.)]|[(（]?\d{1,3}[)）]|[a-zA-Z][.)])\s*")


def escape(text: str) -> str:
    """Markdown special characters escaped so OCR text renders as written."""
    text = _MD_INLINE.sub(r"\\\1", text)
    text = _MD_BLOCK.sub(r"\1\\\2", text)
    return _MD_ORDERED.sub(r"\1\\\2", text)


def render(pages: list[Page], images: Any = None) -> bytes:
    return (PAGE_RULE.join(page_markdown(p) for p in pages) + "\n").encode("utf-8")


def page_markdown(page: Page) -> str:
    if not page.blocks:
        return "\n\n".join(escape(row) for row in page.text.split("\n") if row.strip())
    parts: list[str] = []
    for r in regions(page):
        texts = [page.lines[i].text for i in r.lines]
        if r.kind in SKIPPED_KINDS:
            continue
        if r.table is not None:
            parts.append(_table(table_grid(r.table, page)))
        elif r.kind == "title" and texts:
            parts.append("## " + escape(join_lines(texts)))
        elif r.kind == "list" and texts:
            parts.append(_list(texts))
        elif texts:
            parts.append(escape(join_lines(texts)))
    return "\n\n".join(p for p in parts if p)


def _list(texts: list[str]) -> str:
    """A line starting with a bullet or number starts an item; other lines continue it."""
    items: list[list[str]] = []
    for t in texts:
        m = _BULLET.match(t)
        if m or not items:
            items.append([t[m.end():] if m else t])
        else:
            items[-1].append(t)
    return "\n".join("- " + escape(join_lines(it)) for it in items)


def _table(grid: list[list[str]]) -> str:
    if not grid or not grid[0]:
        return ""

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(_cell(c) for c in cells) + " |"

    lines = [row(grid[0]), "|" + "|".join(" --- " for _ in grid[0]) + "|"]
    lines += [row(r) for r in grid[1:]]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return escape(" ".join(text.split()))
