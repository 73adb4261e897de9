"""Tables: ruled ones from the drawn lines of the page image, unruled ones from aligned columns of
text; cells filled with the OCR lines (or words) inside them; Markdown and HTML renderings.

All geometry is in the deskewed frame of ``layout.rows`` (boxes x0, y0, x1, y1).

Ruled: the page is binarised, turned by the page's skew, and opened with long thin horizontal and
vertical kernels (text strokes do not survive them, rules do). A connected set of rules with at
least two rows and two columns of them is a grid; its cell edges are the rules that run across
most of it. Unruled: runs of at least three rows, each split into two or more pieces of text by
wide gaps, whose pieces line up in the same columns; columns of running text (wide and filled, as
on a two-column page) are not tables.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from ocrforge.layout.rows import group_rows
from ocrforge.result import Cell, Line, Page, Table


@dataclass
class Grid:
    """Row and column edges of a table (deskewed frame), and whether rules were drawn."""

    ys: list[float]
    xs: list[float]
    ruled: bool
    units: list[int] = field(default_factory=list)  # the line indices inside it

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        return self.xs[0], self.ys[0], self.xs[-1], self.ys[-1]

    @property
    def rows(self) -> int:
        return len(self.ys) - 1

    @property
    def cols(self) -> int:
        return len(self.xs) - 1


# ------------------------------------------------------------------------------------ ruled
# a piece of a broken rule counts towards the rule when at least this many line heights long
RULE_PIECE = 6.0


def find_ruled_grids(image: np.ndarray, angle: float, line_height: float) -> list[Grid]:
    """Grids of drawn rules on the page image (BGR or grey), in the frame turned by ``angle``."""
    gray = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    h = max(line_height, 8.0)
    # work at a scale where a text line is about 16 px high: cheaper, and rules stay >= 1 px
    scale = min(1.0, 16.0 / h)
    if scale < 1.0:
        gray = cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    shift = np.zeros(2)
    if abs(angle) > 0.003:  # turn the grey image (not the binary one: thin rules would break up)
        gray, shift = _turn(gray, -angle)
    ink = cv2.adaptiveThreshold(gray, 255, cv2.ADAPTIVE_THRESH_MEAN_C, cv2.THRESH_BINARY_INV, 15, 10)
    hs = h * scale
    # text strokes are shorter than these kernels, rules longer; a rule that is not quite level
    # comes out as steps one pixel apart, each longer than the kernel up to about 1.5 degrees
    hk = max(int(2 * hs), 10)
    vk = max(int(1.5 * hs), 8)
    horiz = cv2.morphologyEx(ink, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (hk, 1)))
    vert = cv2.morphologyEx(ink, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (1, vk)))
    horiz = cv2.dilate(horiz, np.ones((3, 3), np.uint8))  # joins the steps
    vert = cv2.dilate(vert, np.ones((3, 3), np.uint8))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(horiz | vert)
    grids = []
    for k in range(1, n):
        x, y, w, hh = stats[k, :4]
        if w < 4 * hs or hh < 1.5 * hs:
            continue
        region = labels[y : y + hh, x : x + w] == k
        ys = _rules(horiz[y : y + hh, x : x + w] & region.astype(np.uint8) * 255, axis=0, need=0.5 * w,
                    merge=0.4 * hs, piece=RULE_PIECE * hs)
        xs = _rules(vert[y : y + hh, x : x + w] & region.astype(np.uint8) * 255, axis=1, need=0.5 * hh,
                    merge=0.4 * hs, piece=RULE_PIECE * hs)
        if len(ys) < 3 or len(xs) < 3:
            continue
        # back to page pixels of the deskewed frame
        grids.append(Grid([float(v + y - shift[1]) / scale for v in ys],
                          [float(v + x - shift[0]) / scale for v in xs], True))
    return grids


def _rules(mask: np.ndarray, axis: int, need: float, merge: float, piece: float = 0.0) -> list[float]:
    """Positions of the rules in a mask, horizontal (axis 0: their mean y) or vertical (axis 1:
    their mean x). Pieces whose positions are closer than ``merge`` are one rule, kept when the
    pieces together cover at least ``need`` along it: a rule faded in places by blur, low
    contrast or JPEG comes out of the binarised page as collinear pieces, none long enough.
    Only pieces at least ``piece`` long (or ``need``) count: the strokes of large type in a
    heading line up too, each far shorter."""
    n, _, stats, centroids = cv2.connectedComponentsWithStats(mask)
    start = stats[1:, cv2.CC_STAT_LEFT if axis == 0 else cv2.CC_STAT_TOP]
    length = stats[1:, cv2.CC_STAT_WIDTH if axis == 0 else cv2.CC_STAT_HEIGHT]
    pieces = sorted((float(c[1 - axis]), int(a), int(a + ln))
                    for c, a, ln in zip(centroids[1:], start, length, strict=True)
                    if ln >= min(need, piece or need))
    groups: list[list[tuple[float, int, int]]] = []
    for item in pieces:
        if groups and item[0] - groups[-1][-1][0] < merge:
            groups[-1].append(item)
        else:
            groups.append([item])
    return [float(np.mean([p for p, _, _ in g])) for g in groups if _covered(g) >= need]


def _covered(pieces: list[tuple[float, int, int]]) -> int:
    """Length of the union of the pieces' extents [a, b)."""
    total, end = 0, -1
    for _, a, b in sorted(pieces, key=lambda p: p[1]):
        total += max(0, b - max(a, end))
        end = max(end, b)
    return total


def _turn(img: np.ndarray, angle: float) -> tuple[np.ndarray, np.ndarray]:
    """The image turned by ``angle`` (radians) about the origin, as layout.rows turns points, on a
    canvas large enough; returns it and the shift added to turned coordinates."""
    h, w = img.shape[:2]
    c, s = math.cos(angle), math.sin(angle)
    rot = np.array([[c, -s], [s, c]])
    corners = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64) @ rot.T
    shift = -corners.min(axis=0)
    size = np.ceil(corners.max(axis=0) + shift).astype(int)
    m = np.hstack([rot, shift[:, None]])
    return cv2.warpAffine(img, m, (int(size[0]), int(size[1])), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REPLICATE), shift


# ------------------------------------------------------------------------------------ unruled
def find_unruled_grids(boxes: np.ndarray, ids: Sequence[int], line_height: float) -> list[Grid]:
    """Tables made of aligned columns of text among the units ``ids``: runs of three or more
    table-like rows (two or more pieces of text apart from each other, at least two of them short;
    lines longer than 15 line heights are running text, not cells) whose pieces line up in
    columns."""
    h = line_height
    grids: list[Grid] = []
    run: list[list[int]] = []
    above: list[int] = []  # the row just above the run, when that is no table row

    def close() -> None:
        if len(run) < 3:
            return
        parts = split_at_gutters(boxes, run, h)
        for part in parts:
            g = _grid_of(boxes, part, h) if len(part) >= 3 else None
            if g is not None and len(parts) == 1 and above and _heads(boxes, g, above, part, h):
                g = _grid_of(boxes, [above, *part], h) or g
            if g is not None:
                grids.append(g)

    prev: list[int] = []
    for row in group_rows(boxes, ids):
        # a line of running text beside a table (a sidebar's table next to the main column) is
        # no cell: leave long lines out
        row = [i for i in row if boxes[i, 2] - boxes[i, 0] < 15 * h]
        pieces = _pieces(boxes, row, h)
        widths = sorted(float(boxes[p, 2].max() - boxes[p, 0].min()) for p in pieces)
        tablelike = len(pieces) >= 2 and widths[1] < 8 * h
        if tablelike and (not run or _same_table(boxes, run, row, h)):
            if not run:
                above = prev
            run.append(row)
            prev = row
            continue
        close()
        run, above = ([row], []) if tablelike else ([], [])
        prev = row
    close()
    return grids


HEAD_CLEAR = 1.4  # a header has no line this many row pitches above it in its column


def _heads(boxes: np.ndarray, grid: Grid, row: list[int], run: list[list[int]], h: float) -> bool:
    """Whether ``row``, no table row by itself, is the header of the table ``grid`` made of
    ``run`` whose other header cells were not detected (faint bold text): its top lies above the
    first row's by the rows' pitch (within a quarter of it) and each of its lines sits inside one
    column, starting where that column's text starts (a caption or a paragraph line above is set
    further apart, or wider; a sidebar's lines beside a table keep a pitch of their own). A line
    above it in the same column within ``HEAD_CLEAR`` pitches makes it one of a side menu's
    items lined up beside the table (their pitch varies), not a header: a header is the top of
    its column."""
    tops = [float(boxes[r, 1].min()) for r in run]
    pitch = float(np.median(np.diff(tops)))
    gap = float(boxes[run[0], 1].min() - boxes[row, 3].max())
    if gap <= -0.25 * h or abs(tops[0] - float(boxes[row, 1].min()) - pitch) > 0.25 * pitch:
        return False
    for i in row:
        k = int(np.searchsorted(grid.xs, (boxes[i, 0] + boxes[i, 2]) * 0.5)) - 1
        if not 0 <= k < grid.cols or boxes[i, 0] < grid.xs[k] or boxes[i, 2] > grid.xs[k + 1]:
            return False
        starts = [float(boxes[j, 0]) for r in run for j in r if grid.xs[k] <= boxes[j, 0] < grid.xs[k + 1]]
        if not starts or abs(boxes[i, 0] - min(starts)) > 0.5 * h:
            return False
        over = (boxes[:, 2] > grid.xs[k]) & (boxes[:, 0] < grid.xs[k + 1]) \
            & (boxes[:, 1] < boxes[i, 1]) & (boxes[i, 1] - boxes[:, 1] <= HEAD_CLEAR * pitch)
        if over.any():
            return False
    return True


def _pieces(boxes: np.ndarray, row: list[int], h: float) -> list[list[int]]:
    """A row's units (left to right) grouped where the gap between them is under 0.8 line heights."""
    out: list[list[int]] = []
    for i in row:
        if out and boxes[i, 0] - boxes[out[-1][-1], 2] < 0.8 * h:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _same_table(boxes: np.ndarray, run: list[list[int]], row: list[int], h: float) -> bool:
    """Whether ``row`` continues the table-like rows ``run``: close below it, at about the run's
    row pitch (two tables one under the other are set further apart than their rows)."""
    gap = boxes[row, 1].min() - boxes[run[-1], 3].max()
    if gap >= 2.5 * h:
        return False
    if len(run) >= 2:
        gaps = [boxes[b, 1].min() - boxes[a, 3].max() for a, b in zip(run, run[1:], strict=False)]
        return gap <= max(1.5 * float(np.median(gaps)), float(np.median(gaps)) + 0.5 * h)
    return True


GUTTER_NEAR = 6.0  # line heights above and below a table-like run searched for page columns
LONG_LINE = 8.0  # line heights: a line this wide is running text, no cell


def split_at_gutters(boxes: np.ndarray, run: list[list[int]], h: float) -> list[list[list[int]]]:
    """``run``'s rows split where a gap between its columns is a gutter between two columns of
    the page: no line near the run crosses it, running text lies on both sides of it, and fewer
    than half of the rows have text on both sides (rows of two page columns that happen to share
    a height; a table spanning the gutter fills both sides of most rows)."""
    units = [i for r in run for i in r]
    top, bottom = float(boxes[units, 1].min()), float(boxes[units, 3].max())
    inside = set(units)
    near = [i for i in range(len(boxes)) if i not in inside
            and boxes[i, 3] > top - GUTTER_NEAR * h and boxes[i, 1] < bottom + GUTTER_NEAR * h]
    long = [i for i in near if boxes[i, 2] - boxes[i, 0] >= LONG_LINE * h]
    segs = _columns(boxes, units, h)
    for a, b in zip(segs, segs[1:], strict=False):
        x = _free_x(boxes[near], a[1], b[0], 0.25 * h)
        if x is None or not any(boxes[i, 2] <= x for i in long) or not any(boxes[i, 0] >= x for i in long):
            continue
        left = [[i for i in r if boxes[i, 2] <= x] for r in run]
        right = [[i for i in r if boxes[i, 0] >= x] for r in run]
        if sum(bool(lt) and bool(rt) for lt, rt in zip(left, right, strict=True)) >= 0.5 * len(run):
            continue
        return [p for side in (left, right) for p in split_at_gutters(boxes, [r for r in side if r], h)]
    return [run]


def _free_x(spans: np.ndarray, lo: float, hi: float, need: float) -> float | None:
    """The middle of the widest stretch of ``(lo, hi)`` that no span ``[x0, _, x1, _]`` covers,
    if it is at least ``need`` wide."""
    best, at = need, None
    x = lo
    for x0, x1 in sorted((float(s[0]), float(s[2])) for s in spans if s[2] > lo and s[0] < hi):
        if x0 - x >= best:
            best, at = x0 - x, (x + x0) * 0.5
        x = max(x, x1)
    if hi - x >= best:
        at = (x + hi) * 0.5
    return at


def _columns(boxes: np.ndarray, units: list[int], h: float) -> list[list[float]]:
    """The x extents of a table's columns: the union of the units' x extents, split at gaps of
    half a line height or more."""
    segs: list[list[float]] = []
    for i in sorted(units, key=lambda i: boxes[i, 0]):
        if segs and boxes[i, 0] < segs[-1][1] + 0.5 * h:
            segs[-1][1] = max(segs[-1][1], boxes[i, 2])
        else:
            segs.append([boxes[i, 0], boxes[i, 2]])
    return segs


def _grid_of(boxes: np.ndarray, rows: list[list[int]], h: float) -> Grid | None:
    units = [i for r in rows for i in r]
    segs = _columns(boxes, units, h)
    if len(segs) < 2 or (len(segs) == 2 and len(rows) < 4):
        return None
    # most rows must put their pieces into different columns, two or more of them
    good = 0
    for r in rows:
        cols = [_seg_of(segs, boxes[p[0]]) for p in _pieces(boxes, r, h)]
        good += len(cols) >= 2 and len(set(cols)) == len(cols)
    if good < 0.75 * len(rows):
        return None
    xs = [segs[0][0] - 0.25 * h] + [(a[1] + b[0]) * 0.5 for a, b in zip(segs, segs[1:], strict=False)] + [segs[-1][1] + 0.25 * h]
    tops = [float(boxes[r, 1].min()) for r in rows]
    bottoms = [float(boxes[r, 3].max()) for r in rows]
    ys = [tops[0] - 0.25 * h] + [(b + t) * 0.5 for b, t in zip(bottoms, tops[1:], strict=False)] + [bottoms[-1] + 0.25 * h]
    return Grid(ys, xs, False, units)


def _seg_of(segs: list[list[float]], box: np.ndarray) -> int:
    cx = (box[0] + box[2]) * 0.5
    return min(range(len(segs)), key=lambda k: 0 if segs[k][0] <= cx <= segs[k][1] else min(abs(cx - segs[k][0]), abs(cx - segs[k][1])))


# ------------------------------------------------------------------------------------ cells
def units_inside(grid: Grid, boxes: np.ndarray, ids: Sequence[int]) -> list[int]:
    """The units whose centre lies inside the grid."""
    x0, y0, x1, y1 = grid.bbox
    cx, cy = (boxes[:, 0] + boxes[:, 2]) * 0.5, (boxes[:, 1] + boxes[:, 3]) * 0.5
    return [i for i in ids if x0 <= cx[i] <= x1 and y0 <= cy[i] <= y1]


def fill_table(grid: Grid, lines: Sequence[Line], boxes: np.ndarray, word_boxes: dict[int, np.ndarray],
               units: Sequence[int]) -> tuple[Table, list[int]]:
    """The table of a grid with its cells' lines and texts, and its units in reading order (row by
    row, left to right, top to bottom inside a cell). A line spanning several cells is split by
    its words when it has them, else it goes to the cells it covers (colspan)."""
    R, C = grid.rows, grid.cols
    texts: dict[tuple[int, int], list[tuple[np.ndarray, str]]] = {}  # (box, text) of cell parts
    owners: dict[tuple[int, int], list[int]] = {}
    spans: dict[tuple[int, int], int] = {}

    def col_of(x: float) -> int:
        return int(np.clip(np.searchsorted(grid.xs, x) - 1, 0, C - 1))

    def row_of(y: float) -> int:
        return int(np.clip(np.searchsorted(grid.ys, y) - 1, 0, R - 1))

    for i in units:
        b = boxes[i]
        r = row_of((b[1] + b[3]) * 0.5)
        c0, c1 = col_of(b[0] + 0.25 * (b[3] - b[1])), col_of(b[2] - 0.25 * (b[3] - b[1]))
        wb = word_boxes.get(i)
        if c1 > c0 and wb is not None and len(wb) == len(lines[i].words) and len(wb) > 1:
            for w, bb in zip(lines[i].words, wb, strict=True):
                c = col_of((bb[0] + bb[2]) * 0.5)
                texts.setdefault((r, c), []).append((bb, w.text))
                if i not in owners.setdefault((r, c), []):
                    owners[(r, c)].append(i)
            continue
        texts.setdefault((r, c0), []).append((b, lines[i].text))
        owners.setdefault((r, c0), []).append(i)
        if c1 > c0:
            spans[(r, c0)] = max(spans.get((r, c0), 1), c1 - c0 + 1)
    cells = []
    covered: set[tuple[int, int]] = set()
    for r in range(R):
        for c in range(C):
            if (r, c) in covered:
                continue
            span = spans.get((r, c), 1)
            for k in range(span):
                covered.add((r, c + k))
            parts = texts.get((r, c), [])
            text = " ".join(parts[k][1] for k in _rows_order(np.array([p[0] for p in parts]).reshape(-1, 4)))
            bbox = (grid.xs[c], grid.ys[r], grid.xs[c + span], grid.ys[r + 1])
            cells.append(Cell(r, c, bbox, list(owners.get((r, c), [])), text, 1, span))
    order: list[int] = []
    for cell in cells:
        for k in _rows_order(boxes[cell.lines].reshape(-1, 4)):
            if cell.lines[k] not in order:
                order.append(cell.lines[k])
    return Table(R, C, cells, grid.ruled), order


def _rows_order(b: np.ndarray) -> list[int]:
    """Indices of boxes row by row, left to right in a row."""
    return [i for row in group_rows(b) for i in row]


# ------------------------------------------------------------------------------------ rendering
def _grid_texts(table: Table, page: Page | None) -> list[list[str]]:
    out = [["" for _ in range(table.cols)] for _ in range(table.rows)]
    for c in table.cells:
        text = c.text
        if not text and page is not None and c.lines:
            text = " ".join(page.lines[i].text for i in c.lines if 0 <= i < len(page.lines))
        if 0 <= c.row < table.rows and 0 <= c.col < table.cols:
            out[c.row][c.col] = text
    return out


def table_to_markdown(table: Table, page: Page | None = None) -> str:
    """A GitHub-flavoured Markdown table (first row as the header; spanned cells left empty)."""
    if table.rows < 1 or table.cols < 1:
        return ""
    grid = _grid_texts(table, page)

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(t.replace("|", "\\|").replace("\n", " ").strip() for t in cells) + " |"

    lines = [row(grid[0]), "|" + "|".join(" --- " for _ in range(table.cols)) + "|"]
    lines += [row(r) for r in grid[1:]]
    return "\n".join(lines)


def table_to_html(table: Table, page: Page | None = None) -> str:
    """An HTML table (first row as header cells; rowspan/colspan kept)."""
    texts = {}
    for c in table.cells:
        text = c.text
        if not text and page is not None and c.lines:
            text = " ".join(page.lines[i].text for i in c.lines if 0 <= i < len(page.lines))
        texts[(c.row, c.col)] = (text, c.rowspan, c.colspan)
    out = ["<table>"]
    for r in range(table.rows):
        out.append("  <tr>")
        for c in range(table.cols):
            if (r, c) not in texts:
                continue
            text, rs, cs = texts[(r, c)]
            tag = "th" if r == 0 else "td"
            attrs = (f' rowspan="{rs}"' if rs > 1 else "") + (f' colspan="{cs}"' if cs > 1 else "")
            out.append(f"    <{tag}{attrs}>{html.escape(text)}</{tag}>")
        out.append("  </tr>")
    out.append("</table>")
    return "\n".join(out)
