"""Blocks: running headers and footers, and lines in reading order grouped into paragraphs,
titles and lists. Boxes are in the deskewed frame (``layout.rows``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ocrforge.layout.rows import group_rows
from ocrforge.layout.small_stats import small_median
from ocrforge.layout.words import char_width

_BULLET = re.compile(r"^\s*([•·▪◦●○■□\-–—*]|\(?\d{1,2}[.)]|\(?[a-zA-Z][.)]|[（(][一二三四五六七八九十\d]+[)）]|[一二三四五六七八九十]+、)\s*")


def headers_footers(boxes: np.ndarray, ids: Sequence[int], page_height: float,
                    body_height: float) -> tuple[list[int], list[int]]:
    """The first (last) row of the page when it lies in a thin band at the top (bottom), is in
    text no larger than the body's and is set apart from the rest by a clear gap: a running
    header (footer, page number)."""
    ids = list(ids)
    if len(ids) < 4 or page_height <= 0:
        return [], []
    h = body_height
    rows = group_rows(boxes, ids)

    def band(row: list[int], rest: list[int], top: bool) -> list[int]:
        if len(row) > 4 or len(rest) < 3:
            return []
        if top:
            inside = boxes[row, 3].max() <= 0.12 * page_height
            gap = boxes[rest, 1].min() - boxes[row, 3].max()
        else:
            inside = boxes[row, 1].min() >= 0.88 * page_height
            gap = boxes[row, 1].min() - boxes[rest, 3].max()
        small = small_median(boxes[row, 3] - boxes[row, 1]) <= 1.25 * h
        return list(row) if inside and small and gap >= 0.8 * h else []

    head = band(rows[0], [i for r in rows[1:] for i in r], True)
    foot = band(rows[-1], [i for r in rows[:-1] for i in r], False) if len(rows) > 1 else []
    return head, [i for i in foot if i not in head]


def typical_line_gap(boxes: np.ndarray, order: Sequence[int], h: float) -> float:
    """Median vertical gap between a line and the next one read below it in the same column."""
    gaps = []
    for a, b in zip(order, order[1:], strict=False):
        g = boxes[b, 1] - boxes[a, 3]
        if -0.5 * h <= g <= 2 * h and _x_overlap(boxes[a], boxes[b]) > 0:
            gaps.append(g)
    return float(small_median(gaps)) if gaps else 0.3 * h


def paragraphs(boxes: np.ndarray, order: Sequence[int], texts: Sequence[str], body_height: float,
               line_gap: float, text_lines: Sequence[int] | None = None,
               ems: np.ndarray | None = None) -> list[tuple[str, list[int]]]:
    """Consecutive lines (in reading order) grouped into (kind, lines) blocks: a block ends at a
    wider gap, a change of column or of text size, or an indented first line. ``text_lines``: the
    page's running-text lines (not in tables, headers or footers); a title is large against
    those of them outside its own block (else against ``body_height``). ``ems``: line_ems of
    the page's lines."""
    h = body_height
    if ems is None:  # callers with several runs of lines on one page compute it once
        ems = line_ems(boxes, texts)
    out: list[list[int]] = []
    for i in order:
        if out and _continues(boxes, out[-1], i, h, line_gap, ems):
            out[-1].append(i)
        else:
            out.append([i])
    heights = boxes[:, 3] - boxes[:, 1]
    text = np.zeros(len(boxes), bool)
    text[list(text_lines if text_lines is not None else [])] = True
    em_all = float(small_median(ems[list(order)])) if len(order) else 0.0
    return [(_kind(boxes, blk, texts, _outside(heights, text, blk, h), ems,
                   _outside(ems, text, blk, em_all)), blk) for blk in out]


def line_ems(boxes: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """Each line's font size in pixels, from its length and its characters' typical advances
    (words.char_width): unlike the box height, not inflated by the detector's padding of
    small print."""
    out = np.zeros(len(boxes))
    for i, t in enumerate(texts):
        adv = sum(0.28 if c.isspace() else char_width(c) for c in t.strip())
        length = max(boxes[i, 2] - boxes[i, 0], boxes[i, 3] - boxes[i, 1])
        out[i] = length / adv if adv > 0 else 0.0
    return out


def _outside(values: np.ndarray, text: np.ndarray, blk: list[int], default: float) -> float:
    """Median of the running-text lines outside ``blk`` (``default`` when there are none): on a
    page of a title and a table, the table's cells must not set the scale of the title."""
    others = text.copy()
    others[blk] = False
    return float(small_median(values[others])) if others.any() else default


def _continues(boxes: np.ndarray, block: list[int], i: int, h: float, line_gap: float,
               ems: np.ndarray) -> bool:
    p = block[-1]
    a, b = boxes[p], boxes[i]
    ha, hb = a[3] - a[1], b[3] - b[1]
    if _y_overlap(a, b) > 0.5 * min(ha, hb):
        return True  # same row (e.g. an item and its price)
    if abs(ha - hb) > 0.3 * max(ha, hb):
        return False  # text size changes: title / body
    if _size_changes(ha, hb, ems[p], ems[i]):
        return False
    gap = b[1] - a[3]
    if gap < -0.5 * min(ha, hb) or gap > line_gap + 0.5 * h:
        return False
    if _x_overlap(a, b) <= 0:
        return False
    left = boxes[block, 0].min()
    if b[0] > left + 1.2 * h:
        return False  # indented: a new paragraph starts
    if b[0] < left - 1.2 * h and not (len(block) == 1 and b[0] >= left - 4.5 * h):
        return False  # starts left of the block, beyond a first-line indent
    return True


def _size_changes(ha: float, hb: float, ea: float, eb: float) -> bool:
    """A title over body text whose boxes differ by less than 30 % in height: a large title
    split into word boxes is boxed tightly, body text with the detector's padding (a 40 px title
    read 33 px tall over 27 px body lines). The font sizes (line_ems) must then differ by 1.4x,
    the heights by 15 %, the same way round."""
    if min(ha, hb, ea, eb) <= 0:
        return False
    big, small = (ha, hb) if ha >= hb else (hb, ha)
    ebig, esmall = (ea, eb) if ha >= hb else (eb, ea)
    return big >= 1.15 * small and ebig >= 1.4 * esmall


# a title's line height or its font size (line_ems) against running text's: on the generated
# document pages of seed 700 (docs/ACCURACY.md, "Document benchmark") the height rule alone
# found 28 of 48 headings, with the size rule 45; the size estimate is rough on short Latin
# lines (narrow letters), so the height rule stays beside it
TITLE_HEIGHT = 1.35
TITLE_EM = 1.3


def _kind(boxes: np.ndarray, blk: list[int], texts: Sequence[str], h: float, ems: np.ndarray,
          em: float) -> str:
    heights = boxes[blk, 3] - boxes[blk, 1]
    if len(blk) <= 3 and (small_median(heights) >= TITLE_HEIGHT * h
                          or (TITLE_EM and em > 0 and small_median(ems[blk]) >= TITLE_EM * em)):
        return "title"
    if len(blk) >= 2 and sum(1 for i in blk if _BULLET.match(texts[i])) >= max(2, 0.5 * len(blk)):
        return "list"
    return "paragraph"


def _x_overlap(a: np.ndarray, b: np.ndarray) -> float:
    return min(a[2], b[2]) - max(a[0], b[0])


def _y_overlap(a: np.ndarray, b: np.ndarray) -> float:
    return min(a[3], b[3]) - max(a[1], b[1])
