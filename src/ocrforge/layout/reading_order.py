"""Reading order of a page's text units: recursive XY-cut over column chains, with page-wide
elements masked first.

The units are axis-aligned boxes in the deskewed frame (text lines, or whole tables).

1. Chains: a line and the line right below it are linked when each is the other's only neighbour
   in that direction (overlapping horizontally, similar height, gap up to about a line). Chains
   are the pieces of text columns: they never reach across a gutter, because a title or caption
   over two columns has two neighbours below or above it, and never join the parts of a row.
2. XY-cut on the chains (Nagy and Seth), top level first:
   a. page-wide chains cut the region into horizontal bands, each read on its own, so that text
      above a spanning title is read, column by column, before it. A chain is page-wide (a title,
      caption or table over several columns; the masking step of XY-Cut++, arXiv 2504.10258) when
      nothing stands beside it and its nearest neighbours right below (or above) it include two
      chains of some width lying apart side by side, their near ends level;
   b. a vertical gap through the region (a gutter, Breuel's whitespace column finding in its
      simplest form) cuts it into columns, left to right, when the sides read as columns: running
      text (several long lines, or lines of some length filling their side), or short lines that
      do not pair up row by row with a side that is not running text. Receipt items and prices,
      form labels and values pair up and are read row by row; a menu or sidebar of short items
      beside paragraphs is a column of its own;
   c. a horizontal gap cuts it into bands, top to bottom (wide gaps first, so that a title block
      whose long title crosses the gutter below it is cut off before the columns are looked for);
   d. what is left is read row by row, left to right.

``sort_reading_order`` / ``top_to_bottom`` is the simple rule for raw lines (the layout stage off,
peers, the "rule" reference of ``ocrforge eval``): top to bottom, left to right within a row.
This module is the one place that orders text; the detector's boxes come out in this order
because the runner hands ``sort_reading_order`` to ``stages.detect.DBDecoder``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ocrforge.layout.rows import group_rows

# narrowest gutter between columns, in line heights: detected line boxes are padded, so the
# visible whitespace between two columns of small text can be well under a line height
GUTTER = 0.4


def reading_order(boxes: np.ndarray, line_height: float | None = None) -> list[int]:
    """Indices of ``boxes`` (N x 4: x0, y0, x1, y1, deskewed) in reading order."""
    n = len(boxes)
    if n == 0:
        return []
    boxes = np.asarray(boxes, np.float64)
    h = line_height or float(max(np.median(boxes[:, 3] - boxes[:, 1]), 1.0))
    chains = column_chains(boxes, h)
    cb = np.array([[boxes[c, 0].min(), boxes[c, 1].min(), boxes[c, 2].max(), boxes[c, 3].max()] for c in chains])
    return _order(_Region(boxes, chains, cb, h), list(range(len(chains))), 0)


def column_chains(boxes: np.ndarray, h: float) -> list[list[int]]:
    """Lines linked top to bottom with their only neighbour below (and it with its only one above)."""
    n = len(boxes)
    heights = boxes[:, 3] - boxes[:, 1]
    widths = boxes[:, 2] - boxes[:, 0]
    order = np.argsort(boxes[:, 1], kind="stable")
    down = np.full(n, -1)
    up = np.full(n, -1)
    below: list[list[int]] = [[] for _ in range(n)]
    above: list[list[int]] = [[] for _ in range(n)]
    for ka, a in enumerate(order):
        ha = heights[a]
        for b in order[ka + 1 :]:
            gap = boxes[b, 1] - boxes[a, 3]
            if gap > 1.6 * max(ha, h):
                break
            if b == a or gap < -0.5 * min(ha, heights[b]):
                continue
            ov = min(boxes[a, 2], boxes[b, 2]) - max(boxes[a, 0], boxes[b, 0])
            if ov <= min(0.3 * min(widths[a], widths[b]), 2 * h):
                continue
            below[a].append(int(b))
            above[int(b)].append(int(a))
    for a in range(n):
        # the next row below: the candidates starting within half a line of the nearest one
        if below[a]:
            top = min(boxes[b, 1] for b in below[a])
            nxt = [b for b in below[a] if boxes[b, 1] < top + 0.5 * h]
            if len(nxt) == 1 and abs(heights[nxt[0]] - heights[a]) <= 0.35 * max(heights[a], heights[nxt[0]]):
                down[a] = nxt[0]
        if above[a]:
            bottom = max(boxes[b, 3] for b in above[a])
            prv = [b for b in above[a] if boxes[b, 3] > bottom - 0.5 * h]
            if len(prv) == 1:
                up[a] = prv[0]
    chains: list[list[int]] = []
    seen = np.zeros(n, bool)
    for a in order:
        if seen[a] or (up[a] >= 0 and down[up[a]] == a):
            continue  # not the head of a chain
        chain = [int(a)]
        seen[a] = True
        while down[chain[-1]] >= 0 and up[down[chain[-1]]] == chain[-1] and not seen[down[chain[-1]]]:
            chain.append(int(down[chain[-1]]))
            seen[chain[-1]] = True
        chains.append(chain)
    for a in range(n):  # cycles cannot happen (links go down), but never lose a line
        if not seen[a]:
            chains.append([a])
    return [piece for c in chains for piece in _detach_ends(boxes, c, h)]


def _detach_ends(boxes: np.ndarray, chain: list[int], h: float) -> list[list[int]]:
    """A chain's first or last line that reaches sideways beyond the rest of the chain (a caption
    or title wider than the column it sits on) becomes a chain of its own."""
    head: list[list[int]] = []
    tail: list[list[int]] = []
    body = list(chain)
    while len(body) >= 3:
        inner = boxes[body[1:-1]]
        x0, x1 = inner[:, 0].min(), inner[:, 2].max()
        first, last = boxes[body[0]], boxes[body[-1]]
        if first[2] > x1 + 1.5 * h or first[0] < x0 - 3 * h:
            head.append([body.pop(0)])
        elif last[2] > x1 + 1.5 * h or last[0] < x0 - 3 * h:
            tail.insert(0, [body.pop()])
        else:
            break
    return head + [body] + tail


class _Region:
    def __init__(self, boxes: np.ndarray, chains: list[list[int]], cb: np.ndarray, h: float):
        self.boxes, self.chains, self.cb, self.h = boxes, chains, cb, h

    def lines(self, ids: Sequence[int]) -> list[int]:
        return [i for c in ids for i in self.chains[c]]


def _order(r: _Region, ids: list[int], depth: int) -> list[int]:
    """Line indices of the chains ``ids`` in reading order."""
    if len(ids) == 1:
        return list(r.chains[ids[0]])
    if depth > 50:  # pathological nesting
        return [i for row in group_rows(r.boxes, r.lines(ids)) for i in row]
    b, h = r.cb, r.h
    spanning = _spanning(b, ids, h)
    if spanning:
        bands = _bands_at(b, ids, spanning)
        if len(bands) > 1:
            return [i for band in bands for i in _order(r, band, depth + 1)]
    cols = _split(b, ids, axis=0, min_gap=GUTTER * h)
    if len(cols) > 1 and _text_columns(r, cols):
        return [i for c in cols for i in _order(r, c, depth + 1)]
    # no columns here: cut at wide horizontal gaps first (a title block above columns that a long
    # title keeps from being cut into columns), then between any rows
    for gap in (1.5 * h, -0.25 * h):
        bands = _split(b, ids, axis=1, min_gap=gap)
        if len(bands) > 1:
            return [i for band in bands for i in _order(r, band, depth + 1)]
    return [i for row in group_rows(r.boxes, r.lines(ids)) for i in row]


def _split(b: np.ndarray, ids: list[int], axis: int, min_gap: float) -> list[list[int]]:
    """Groups of ids separated by gaps (> min_gap; a negative min_gap lets neighbours overlap that
    much) in the projection on x (axis 0) or y (axis 1), in increasing order."""
    lo, hi = b[ids, axis], b[ids, axis + 2]
    groups: list[list[int]] = []
    reach = -np.inf
    for k in np.argsort(lo, kind="stable"):
        if groups and lo[k] - reach <= min_gap:
            groups[-1].append(ids[k])
        else:
            groups.append([ids[k]])
        reach = max(reach, hi[k])
    return groups


def _spanning(b: np.ndarray, ids: list[int], h: float) -> list[int]:
    """Chains with nothing beside them whose nearest neighbours right below (or right above) them
    include two chains lying apart from each other side by side (their near ends level within one
    line height): a title, caption or table set over two or more columns."""
    out = []
    for s in ids:
        if _beside(b, ids, s):
            continue  # text beside it shares its rows: a column itself, not something over columns
        for below in (True, False):
            # pieces of text of some width only (a lone "。" at a line's start is no column)
            near = [c for c in _nearest(b, ids, s, below, h) if b[c, 2] - b[c, 0] >= 3 * h]
            edge = b[near, 1] if below else b[near, 3]
            if any(b[p, 2] + GUTTER * h <= b[q, 0] and abs(edge[i] - edge[j]) <= h
                   for i, p in enumerate(near) for j, q in enumerate(near)):
                out.append(s)
                break
    return out


def _beside(b: np.ndarray, ids: list[int], s: int) -> bool:
    """Whether another chain lies beside chain s (no horizontal overlap) across most of the
    height of either of them."""
    for c in ids:
        if c == s or min(b[s, 2], b[c, 2]) > max(b[s, 0], b[c, 0]):
            continue
        ov = min(b[s, 3], b[c, 3]) - max(b[s, 1], b[c, 1])
        if ov > 0.5 * min(b[s, 3] - b[s, 1], b[c, 3] - b[c, 1]):
            return True
    return False


def _nearest(b: np.ndarray, ids: list[int], s: int, below: bool, h: float) -> list[int]:
    """The chains seen first when looking from chain s straight down (or up): each overlaps s by
    a line height and is not hidden behind chains nearer to s."""
    x0, x1 = b[s, 0], b[s, 2]
    if below:
        cand = [c for c in ids if c != s and b[c, 1] >= b[s, 3] - 0.25 * h]
        cand.sort(key=lambda c: b[c, 1])
    else:
        cand = [c for c in ids if c != s and b[c, 3] <= b[s, 1] + 0.25 * h]
        cand.sort(key=lambda c: -b[c, 3])
    seen: list[tuple[float, float]] = []
    out = []
    for c in cand:
        lo, hi = max(x0, b[c, 0]), min(x1, b[c, 2])
        if hi - lo < h:
            continue
        hidden = sum(max(0.0, min(hi, e1) - max(lo, e0)) for e0, e1 in seen)
        if hidden < 0.5 * (hi - lo):
            out.append(c)
        seen.append((lo, hi))
        if sum(e1 - e0 for e0, e1 in _union(seen)) >= 0.95 * (x1 - x0):
            break
    return out


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, z in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return out


def _text_columns(r: _Region, parts: Sequence[list[int]]) -> bool:
    """Whether the parts are columns to be read one after the other rather than the sides of rows
    that belong together (receipt items and prices, form labels and values, table cells).

    A part of running text (several long lines, or lines of some length that fill it) is a column.
    A part of short lines is one too, unless its lines pair up row by row with a neighbouring part
    that is not long running text, and a narrow strip of short items (numbers, labels, menu
    entries) only beside running text: short items beside paragraphs are a sidebar (unless, right of them,
    they pair up with most of their lines: amounts beside long labels), beside other short items they
    are a table.
    """
    b, h = r.boxes, r.h
    lines = [r.lines(p) for p in parts]
    # a page number or mark in the margin beside the columns does not decide anything
    lines = [p for p in lines if len(p) > 2 or (b[p, 2] - b[p, 0]).max() >= 3 * h]
    if len(lines) < 2 or any(len(p) < 2 for p in lines):
        return False
    kind = []  # 2: long running text, 1: lines that fill their column, 0: short lines
    for p in lines:
        pw = b[p, 2].max() - b[p, 0].min()
        widths = b[p, 2] - b[p, 0]
        med = float(np.median(widths))
        long = int((widths >= 12 * h).sum())
        if np.percentile(widths, 75) >= 12 * h or (long >= 3 and long >= 0.1 * len(p)):
            kind.append(2)  # running text, whatever else is set beside it (formulas, figures)
            continue
        if pw < 4 * h or med < 3 * h:
            kind.append(-1)  # a narrow strip of short items: numbers, prices, labels, menu items
        else:
            kind.append(1 if med / pw >= 0.7 and med >= 6 * h else 0)
    for k, p in enumerate(lines):
        if kind[k] > 0:
            continue
        near = [i for i in (k - 1, k + 1) if 0 <= i < len(lines)]
        if kind[k] < 0 and any(kind[i] < 2 for i in near):
            return False  # a strip of short items is a column only beside running text
        if kind[k] < 0 and k > 0 and _row_partners(b[p], b[lines[k - 1]]):
            return False  # amounts right of totals whose labels are long, not a sidebar
        others = [j for i in near if kind[i] < 2 for j in lines[i]]
        if _paired(b[p], b[others]) > 0.4 * len(p):
            return False
    return True


def _row_partners(strip: np.ndarray, text: np.ndarray) -> bool:
    """Whether nearly every line of a strip of short items shares a row with a line of the text
    left of it, and most of that text's lines have one: a receipt's amounts beside their labels.
    Margin notes stand beside a few lines of their paragraphs only; a menu on the left of a
    screenshot can share rows with the content by chance, so only strips on the right count."""
    return _paired(strip, text) >= 0.8 * len(strip) and _paired(text, strip) >= 0.5 * len(text)


def _paired(a: np.ndarray, c: np.ndarray) -> int:
    """How many boxes of ``a`` share a row (vertical overlap over half the lower one) with a box
    of ``c``."""
    if not len(a) or not len(c):
        return 0
    ov = np.minimum(a[:, None, 3], c[None, :, 3]) - np.maximum(a[:, None, 1], c[None, :, 1])
    low = np.minimum((a[:, 3] - a[:, 1])[:, None], (c[:, 3] - c[:, 1])[None, :])
    return int((ov > 0.5 * low).any(axis=1).sum())


def _overlap_y(a: np.ndarray, c: np.ndarray) -> bool:
    return min(a[3], c[3]) - max(a[1], c[1]) > 0.5 * min(a[3] - a[1], c[3] - c[1])


def _bands_at(b: np.ndarray, ids: list[int], spanning: list[int]) -> list[list[int]]:
    """The region cut into horizontal bands, top to bottom: each page-wide chain, with whatever
    shares its rows, is a band of its own; the chains between two of them form a band."""
    span_set = set(spanning)
    bands: list[tuple[bool, list[int]]] = []
    for i in sorted(ids, key=lambda i: ((b[i, 1] + b[i, 3]) * 0.5, b[i, 0])):
        if bands and bands[-1][0] and _overlap_y(b[i], b[bands[-1][1][0]]):
            bands[-1][1].append(i)  # in the rows of the page-wide chain before
        elif i in span_set:
            bands.append((True, [i]))
        elif bands and not bands[-1][0]:
            bands[-1][1].append(i)
        else:
            bands.append((False, [i]))
    return [band for _, band in bands]


def sort_reading_order(boxes: list[np.ndarray], row_tol: float = 10.0) -> list[np.ndarray]:
    """Top-to-bottom, then left-to-right for boxes whose tops are within row_tol pixels."""
    boxes = sorted(boxes, key=lambda b: (b[0][1], b[0][0]))
    for i in range(len(boxes) - 1):
        for j in range(i, -1, -1):
            if abs(boxes[j + 1][0][1] - boxes[j][0][1]) < row_tol and boxes[j + 1][0][0] < boxes[j][0][0]:
                boxes[j], boxes[j + 1] = boxes[j + 1], boxes[j]
            else:
                break
    return boxes


def top_to_bottom(polys: Sequence) -> list[int]:
    """Indices of line polygons (first corner = top-left) in ``sort_reading_order``'s order."""
    boxes = [np.asarray(p, dtype=np.float32).reshape(-1, 2)[:4] for p in polys]
    by_id = {id(b): i for i, b in enumerate(boxes)}
    return [by_id[id(b)] for b in sort_reading_order(list(boxes))]
