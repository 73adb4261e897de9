"""Cutting detected boxes at column gutters: blank strips that run down several text rows.

The DB network joins the cells of a tight table row (0.8-1.2 em apart, no rule between them)
into one box, and a gap that narrow inside one box cannot be told from a wide word space
(``stages.detect.split_box`` leaves it). A table shows it by its columns: the same blank strip
recurs in the rows above and below. A box's blank run of at least ``gap`` box heights is cut
when a strip of at least ``common`` box heights inside it stays blank (no box's ink there) through
``rows`` consecutive text rows, counting the box's own row, with each next row within
``ROW_STEP`` box heights and spanning the strip, and when the run is at least ``SPACE_RATIO``
times the box's other word spaces (lines in a font with wide spaces that start with words of one
width line their spaces up too). A numbered list lines its numbers up; a narrow end piece stays
with its line (the same end rule as ``split_box``). Only boxes within ~3 degrees of horizontal
are considered. Settings chosen in docs/ACCURACY.md, "Column gutters".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ocrforge.stages.ink import box_ink

GUTTER_GAP = 0.7  # a box's blank run at least this many box heights wide is a candidate
GUTTER_COMMON = 0.4  # the strip blank in every row of the gutter, in box heights
GUTTER_ROWS = 4  # text rows the strip runs down, the cut box's row included
ROW_STEP = 2.5  # next row's centre at most this many box heights away
MIN_HEIGHT = 12  # detector pixels; lower boxes are left alone (as in split_box)
WORD_GAP = 0.2  # blank runs at least this many box heights wide count as word spaces ...
SPACE_RATIO = 2.0  # ... and a cut gap is at least this many times their median


@dataclass
class _Box:
    box: np.ndarray  # tl, tr, br, bl in detector pixels
    x0: float
    x1: float
    yc: float
    h: float
    blanks: list[tuple[float, float]]  # blank runs between its ink, in detector x
    inks: list[tuple[float, float]]  # its ink, in detector x (the whole box when not analysed)


def split_at_gutters(boxes: list[np.ndarray], gray: np.ndarray, gap: float = GUTTER_GAP,
                     common: float = GUTTER_COMMON, rows: int = GUTTER_ROWS,
                     cols: list[np.ndarray | None] | None = None) -> list[np.ndarray]:
    """``boxes`` (detector pixels) with every box cut where a column gutter runs through it.
    ``cols``: per box, the ink of its columns when known (``split_box_cols``), else sampled."""
    if len(boxes) < rows or gap <= 0:
        return boxes
    known = cols if cols is not None else [None] * len(boxes)
    items = [_describe(b, gray, c) for b, c in zip(boxes, known, strict=True)]
    lines = _rows(items)
    centres = [float(np.mean([b.yc for b in row])) for row in lines]
    out: list[np.ndarray] = []
    for r, row in enumerate(lines):
        for it in row:
            cuts = [g for g in _wide_blanks(it, gap)
                    if _gutter(lines, centres, r, g, common * it.h, rows, it.h)]
            out.extend(_cut(it, cuts) if cuts else [it.box])
    return out


def _describe(box: np.ndarray, gray: np.ndarray, cols: np.ndarray | None = None) -> _Box:
    tl, tr, bl = box[0], box[1], box[3]
    w, h = float(np.linalg.norm(tr - tl)), float(np.linalg.norm(bl - tl))
    xs, ys = box[:, 0], box[:, 1]
    whole = _Box(box, float(xs.min()), float(xs.max()), float(ys.mean()), max(h, 1.0), [],
                 [(float(xs.min()), float(xs.max()))])
    if h < MIN_HEIGHT or w < 2 * h or abs(float(tr[1] - tl[1])) > 0.05 * w:
        return whole
    if cols is None:
        ink = box_ink(box, gray, int(round(w)), int(round(h)))
        if ink is None:
            return whole
        cols = ink.any(0)
    if not cols.any():
        return whole
    scale = (float(tr[0]) - float(tl[0])) / len(cols)
    runs = _runs(cols)
    inks = [(float(tl[0]) + a * scale, float(tl[0]) + (b + 1) * scale) for a, b in runs]
    blanks = [(inks[k][1], inks[k + 1][0]) for k in range(len(inks) - 1)]
    return _Box(box, whole.x0, whole.x1, whole.yc, h, blanks, inks)


def _wide_blanks(it: _Box, gap: float) -> list[tuple[float, float]]:
    """The box's blank runs of at least ``gap`` box heights that are also clearly wider
    (SPACE_RATIO x) than its other word-like gaps: where every word space of a line is that wide
    (a font with wide spaces), lines starting with words of one width line their spaces up, and
    no space of theirs is a cell gap."""
    widths = [b - a for a, b in it.blanks]
    out = []
    for k, (a, b) in enumerate(it.blanks):
        if widths[k] < gap * it.h:
            continue
        others = [w for j, w in enumerate(widths) if j != k and w >= WORD_GAP * it.h]
        if not others or widths[k] >= SPACE_RATIO * float(np.median(others)):
            out.append((a, b))
    return out


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[a, b] index ranges (inclusive) of the True runs of a 1-D bool array."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), (np.flatnonzero(d == -1) - 1).tolist(), strict=True))


def _rows(items: list[_Box]) -> list[list[_Box]]:
    """Boxes grouped into text rows (centres within half a box height), top to bottom."""
    rows: list[list[_Box]] = []
    for it in sorted(items, key=lambda b: b.yc):
        if rows and abs(it.yc - np.mean([b.yc for b in rows[-1]])) <= 0.5 * it.h:
            rows[-1].append(it)
        else:
            rows.append([it])
    return rows


def _gutter(lines: list[list[_Box]], centres: list[float], r: int, strip: tuple[float, float],
            common: float, need: int, h: float) -> bool:
    """Whether a strip of at least ``common`` wide inside ``strip`` stays blank through ``need``
    consecutive rows around row ``r`` (whose box has the strip blank)."""
    found = 1
    for step in (-1, 1):
        lo, hi = strip
        k, yc = r + step, centres[r]
        while 0 <= k < len(lines) and found < need:
            row = lines[k]
            y = centres[k]
            if abs(y - yc) > ROW_STEP * h or not _spans(row, lo, hi):
                break
            lo, hi = _widest_blank(row, lo, hi)
            if hi - lo < common:
                break
            found += 1
            k, yc = k + step, y
        if found >= need:
            return True
    return False


def _spans(row: list[_Box], lo: float, hi: float) -> bool:
    """Whether the row has text on both sides of [lo, hi] (so a blank there is a gutter)."""
    return min(b.x0 for b in row) < lo and max(b.x1 for b in row) > hi


def _widest_blank(row: list[_Box], lo: float, hi: float) -> tuple[float, float]:
    """The widest part of [lo, hi] with no ink of the row's boxes."""
    inks = sorted((a, b) for it in row for a, b in it.inks if b > lo and a < hi)
    best, pos = (lo, lo), lo
    for a, b in inks:
        if a - pos > best[1] - best[0]:
            best = (pos, a)
        pos = max(pos, b)
    if hi - pos > best[1] - best[0]:
        best = (pos, hi)
    return best


def _cut(it: _Box, cuts: list[tuple[float, float]]) -> list[np.ndarray]:
    """The box in pieces between the cut blank runs; a first or last piece narrower than one
    box height (a list number, a lone digit) stays with its neighbour."""
    edges = [it.x0] + [v for g in cuts for v in g] + [it.x1]
    spans = [(edges[2 * k], edges[2 * k + 1]) for k in range(len(cuts) + 1)]
    while len(spans) > 1 and spans[-1][1] - spans[-1][0] < it.h:
        spans[-2:] = [(spans[-2][0], spans[-1][1])]
    while len(spans) > 1 and spans[0][1] - spans[0][0] < it.h:
        spans[:2] = [(spans[0][0], spans[1][1])]
    if len(spans) == 1:
        return [it.box]
    tl, tr, bl = it.box[0], it.box[1], it.box[3]
    ux, uy = (tr - tl) / max(float(tr[0] - tl[0]), 1e-6), bl - tl
    out = []
    for k, (a, b) in enumerate(spans):
        # pieces reach into the gap by a quarter of it on each side (the box's own margin)
        a = a if k == 0 else a - 0.25 * (a - spans[k - 1][1])
        b = b if k == len(spans) - 1 else b + 0.25 * (spans[k + 1][0] - b)
        p0, p1 = tl + ux * (a - float(tl[0])), tl + ux * (b - float(tl[0]))
        out.append(np.array([p0, p1, p1 + uy, p0 + uy], np.float32))
    return out
