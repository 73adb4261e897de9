"""What every exporter walks: regions in reading order, words of a line, and their geometry.

The layout stage fills ``Page.blocks`` and ``Line.words``; exporters must also work without
them. Fallbacks, in one place:

- no blocks: every line is its own paragraph region, in page order;
- blocks that leave lines out: the left-over lines follow as one-line paragraphs (text is
  never dropped);
- no words: the line is split at whitespace and its quad is divided along the baseline in
  proportion to the characters (East Asian wide characters count double, as they are
  about twice as wide as Latin ones); a line without whitespace is one word.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ocrforge.result import Block, Cell, Line, Page, Table, Word, rows_text, to_input_frame

Quad = list[list[float]]
BBox = tuple[float, float, float, float]

_TOKEN = re.compile(r"\S+")
# characters XML 1.0 cannot carry (C0 controls except tab/newline/CR, surrogates, FFFE/FFFF)
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass
class Region:
    """A block to export: kind (one of result.BLOCK_KINDS), box, line indices, table."""

    kind: str
    bbox: BBox
    lines: list[int]
    table: Table | None = None


def regions(page: Page) -> list[Region]:
    """The page's blocks in reading order, with every line of the page in exactly one region
    (table lines through their cells). Out-of-range line indices are ignored."""
    n = len(page.lines)
    if not page.blocks:
        return [Region("paragraph", ln.bbox, [i]) for i, ln in enumerate(page.lines)]
    out: list[Region] = []
    seen: set[int] = set()
    for b in page.blocks:
        idx = [i for i in b.lines if 0 <= i < n and i not in seen]
        seen.update(idx)
        if b.table is not None:
            for c in b.table.cells:
                seen.update(i for i in c.lines if 0 <= i < n)
        out.append(Region(b.kind, _bbox_of(b), idx, b.table))
    out += [Region("paragraph", page.lines[i].bbox, [i]) for i in range(n) if i not in seen]
    return out


def _bbox_of(b: Block) -> BBox:
    x0, y0, x1, y1 = (float(v) for v in b.bbox)
    return min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)


def table_lines(table: Table, page: Page) -> Iterator[int]:
    """Line indices of a table, cell by cell in row-major order."""
    n = len(page.lines)
    for c in sorted(table.cells, key=lambda c: (c.row, c.col)):
        yield from (i for i in c.lines if 0 <= i < n)


def cell_text(cell: Cell, page: Page) -> str:
    """A cell's text: its own ``text`` if the layout stage set it, else its lines joined."""
    if cell.text:
        return cell.text
    n = len(page.lines)
    return join_lines([page.lines[i].text for i in cell.lines if 0 <= i < n])


def table_grid(table: Table, page: Page) -> list[list[str]]:
    """rows x cols of cell text; a spanning cell's text sits in its top-left slot."""
    rows = max([table.rows] + [c.row + 1 for c in table.cells])
    cols = max([table.cols] + [c.col + 1 for c in table.cells])
    grid = [[""] * cols for _ in range(rows)]
    for c in table.cells:
        if c.row >= 0 and c.col >= 0:
            grid[c.row][c.col] = cell_text(c, page)
    return grid


def join_lines(texts: list[str]) -> str:
    """Lines of one paragraph as running text: a space between them, none between two CJK
    characters (Chinese does not put spaces at line breaks)."""
    out = ""
    for t in (t.strip() for t in texts):
        if not t:
            continue
        if out and not (_is_wide(out[-1]) and _is_wide(t[0])):
            out += " "
        out += t
    return out


def _is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def page_text(page: Page) -> str:
    """Plain text in reading order. Without blocks this is ``Page.text`` (lines sharing a row
    joined by a space); with blocks, each block's rows one per line (lines sharing a row joined
    the same way), blocks separated by a blank line, table rows as tab-separated cells."""
    if not page.blocks:
        return page.text
    parts = []
    for r in regions(page):
        if r.table is not None:
            parts.append("\n".join("\t".join(row) for row in table_grid(r.table, page)))
        elif r.lines:
            parts.append(rows_text([page.lines[i] for i in r.lines]))
    return "\n\n".join(p for p in parts if p)


# ------------------------------------------------------------------ the page as given
def as_given(page: Page) -> Page:
    """The page in the pixels of the image as it was given: for a page that page orientation
    turned (``rotation`` != 0) a copy whose size, lines, words, blocks and cells are mapped
    back onto the input (``Page.input_poly``); ``rotation`` is kept, so a line's text runs
    along its mapped quad (corners still start where its text starts). Formats that point at
    the input image (hOCR, ALTO, OCRmyPDF's tree) describe this page."""
    if not page.rotation:
        return page
    w, h = page.width, page.height

    def poly(p: Quad) -> Quad:
        return to_input_frame(p, page.rotation, w, h).tolist()

    def box(b: tuple[float, ...]) -> BBox:
        x0, y0, x1, y1 = (float(v) for v in b)
        return quad_bbox(poly([[x0, y0], [x1, y0], [x1, y1], [x0, y1]]))

    def cells(t: Table | None) -> Table | None:
        if t is None:
            return None
        return replace(t, cells=[replace(c, bbox=box(c.bbox)) for c in t.cells])

    lines = [replace(ln, poly=poly(ln.poly), words=[replace(wd, poly=poly(wd.poly)) for wd in ln.words])
             for ln in page.lines]
    blocks = [replace(b, bbox=box(b.bbox), table=cells(b.table)) for b in page.blocks]
    gw, gh = (h, w) if page.rotation in (90, 270) else (w, h)
    return replace(page, lines=lines, blocks=blocks, width=gw, height=gh)


def text_angle(page: Page) -> int:
    """Counter-clockwise angle of the text on the image as given (hOCR ``textangle``, ALTO
    ``ROTATION``): a page turned 90 degrees clockwise holds text rotated by 270."""
    return (360 - page.rotation) % 360


# ------------------------------------------------------------------ words and geometry
def words_of(line: Line) -> list[Word]:
    """The line's words from the layout stage, or the proportional split described above."""
    if line.words:
        return line.words
    return split_line(line)


def reading_quad(poly: Quad, angle: int) -> Quad:
    """A quad's corners starting where its text starts: for a line the orientation
    classifier found upside down (angle 180) the text runs from the page's bottom-right corner
    leftwards, so the corners turn by two."""
    return [*poly[2:4], *poly[0:2]] if angle == 180 else poly


def split_line(line: Line) -> list[Word]:
    text = line.text
    tokens = list(_TOKEN.finditer(text))
    if len(tokens) <= 1:
        poly = reading_quad([list(map(float, p)) for p in line.poly[:4]], line.angle)
        return [Word(text.strip(), poly, line.score)] if tokens else []
    weights = [2.0 if _is_wide(ch) else 1.0 for ch in text]
    total = sum(weights)
    cum = [0.0]
    for w in weights:
        cum.append(cum[-1] + w)
    (p0, p1, p2, p3) = ([float(v) for v in p] for p in reading_quad(line.poly[:4], line.angle))
    words = []
    for m in tokens:
        t0, t1 = cum[m.start()] / total, cum[m.end()] / total
        words.append(Word(m.group(), [_lerp(p0, p1, t0), _lerp(p0, p1, t1), _lerp(p3, p2, t1),
                                      _lerp(p3, p2, t0)], line.score))
    return words


def _lerp(a: list[float], b: list[float], t: float) -> list[float]:
    return [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t]


def quad_bbox(poly: Quad) -> BBox:
    xs = [float(p[0]) for p in poly]
    ys = [float(p[1]) for p in poly]
    return min(xs), min(ys), max(xs), max(ys)


def int_bbox(bbox: BBox, width: int, height: int) -> tuple[int, int, int, int]:
    """A box rounded outwards to whole pixels and clipped to the page."""
    x0, y0, x1, y1 = bbox
    x0 = min(max(int(math.floor(x0)), 0), width)
    y0 = min(max(int(math.floor(y0)), 0), height)
    x1 = min(max(int(math.ceil(x1)), x0), width)
    y1 = min(max(int(math.ceil(y1)), y0), height)
    return x0, y0, x1, y1


def union_bbox(boxes: list[BBox]) -> BBox:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes),
            max(b[2] for b in boxes), max(b[3] for b in boxes))


@dataclass
class Baseline:
    """A quad seen as text: origin at its bottom-left corner, unit direction along the
    bottom edge (image coordinates, y down), length along it and height across it."""

    origin: tuple[float, float]
    direction: tuple[float, float]
    length: float
    height: float


def baseline(poly: Quad) -> Baseline:
    (p0, p1, p2, p3) = ([float(v) for v in p] for p in poly[:4])
    dx = (p1[0] - p0[0] + p2[0] - p3[0]) / 2.0
    dy = (p1[1] - p0[1] + p2[1] - p3[1]) / 2.0
    length = math.hypot(dx, dy)
    ux, uy = (dx / length, dy / length) if length > 1e-9 else (1.0, 0.0)
    # height: distance of the top edge from the bottom edge, measured across the direction
    h0 = abs((p3[0] - p0[0]) * -uy + (p3[1] - p0[1]) * ux)
    h1 = abs((p2[0] - p1[0]) * -uy + (p2[1] - p1[1]) * ux)
    return Baseline((p3[0], p3[1]), (ux, uy), length, (h0 + h1) / 2.0)


# the least gap between two neighbouring words of a line, in line heights: poppler (pdftotext)
# and pdfium find word breaks by the distance between glyphs (they need about 0.05), not by the
# space character, so words drawn edge to edge copy as one
MIN_WORD_GAP = 0.15


def word_spans(lb: Baseline, words: list[Word], min_gap: float = MIN_WORD_GAP) -> list[tuple[float, float]]:
    """(start, end) of every word along the line ``lb`` (image pixels), with a gap of at least
    ``min_gap`` line heights before the next word: extractors (poppler, pdfium) find word breaks
    by the distance between glyphs, so words whose boxes touch (word boxes from CTC run up to
    the middle of the gap to the next word) would copy as one. The gap is taken from the end of
    the word before, where a box that touches the next one holds no ink."""
    spans = []
    for wd in words:
        g = baseline(wd.poly)
        start = _along(lb, g.origin)
        spans.append([start, start + max(g.length, 1e-3)])
    want = min_gap * lb.height
    for k in range(len(spans) - 1):
        start, end = spans[k]
        nxt = spans[k + 1][0]
        if nxt - end < want:  # shrink this word by at most a third of its length
            spans[k][1] = max(nxt - want, start + (end - start) * 2 / 3)
    return [(s, max(e, s + 1e-3)) for s, e in spans]


def spaced_words(line: Line, words: list[Word], min_gap: float = MIN_WORD_GAP) -> list[Word]:
    """The words of ``line`` with each word's quad ending where ``word_spans`` ends it: for a
    renderer that fits every word's glyphs to its box (OCRmyPDF's), so that neighbouring words
    keep a gap that extractors read as a space. Words that need no trimming are returned as
    they are."""
    lb = baseline(reading_quad(line.poly, line.angle))
    out = []
    for wd, (start, end) in zip(words, word_spans(lb, words, min_gap), strict=True):
        length = baseline(wd.poly).length
        f = (end - start) / length if length > 1e-9 else 1.0
        if f >= 1.0 - 1e-9:
            out.append(wd)
            continue
        p0, p1, p2, p3 = ([float(v) for v in p] for p in wd.poly[:4])
        p1 = [p0[0] + f * (p1[0] - p0[0]), p0[1] + f * (p1[1] - p0[1])]
        p2 = [p3[0] + f * (p2[0] - p3[0]), p3[1] + f * (p2[1] - p3[1])]
        out.append(replace(wd, poly=[p0, p1, p2, p3]))
    return out


def spaced_page(page: Page, min_gap: float = MIN_WORD_GAP) -> Page:
    """A copy of the page whose lines' words are ``spaced_words`` (lines without words from
    the layout stage are left as they are: their proportional split keeps the spaces' share)."""
    return replace(page, lines=[replace(ln, words=spaced_words(ln, ln.words, min_gap)) if ln.words else ln
                                for ln in page.lines])


def _along(lb: Baseline, point: tuple[float, float]) -> float:
    """Distance of a point from the line's origin along its direction (image pixels)."""
    return (point[0] - lb.origin[0]) * lb.direction[0] + (point[1] - lb.origin[1]) * lb.direction[1]


def xml_text(s: str) -> str:
    """Text with the characters XML cannot hold removed."""
    return _XML_BAD.sub("", s)
