"""Results: Page and Line, with a stable JSON form (schema ``ocrforge.page/1``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SCHEMA = "ocrforge.page/1"


@dataclass
class Word:
    """One word of a line: text, four corners (page pixels, clockwise from top-left), score."""

    text: str
    poly: list[list[float]]
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "poly": _round_poly(self.poly), "score": round(float(self.score), 4)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Word:
        return cls(d["text"], d["poly"], d.get("score", 0.0))


@dataclass
class Cell:
    """One table cell; ``lines`` index Page.lines."""

    row: int
    col: int
    bbox: tuple[float, float, float, float]
    lines: list[int] = field(default_factory=list)
    text: str = ""
    rowspan: int = 1
    colspan: int = 1

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"row": self.row, "col": self.col, "bbox": _round_box(self.bbox),
                             "lines": list(self.lines), "text": self.text}
        if self.rowspan != 1 or self.colspan != 1:
            d.update(rowspan=self.rowspan, colspan=self.colspan)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cell:
        return cls(d["row"], d["col"], tuple(d["bbox"]), list(d.get("lines", [])), d.get("text", ""),
                   d.get("rowspan", 1), d.get("colspan", 1))


@dataclass
class Table:
    """A grid of ``rows`` x ``cols`` cells (row-major; a spanning cell is listed once);
    ``ruled`` when it was found from drawn lines, else from aligned columns of text."""

    rows: int
    cols: int
    cells: list[Cell] = field(default_factory=list)
    ruled: bool = False

    def cell(self, row: int, col: int) -> Cell | None:
        """The cell covering (row, col), if any."""
        for c in self.cells:
            if c.row <= row < c.row + c.rowspan and c.col <= col < c.col + c.colspan:
                return c
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "cols": self.cols, "ruled": self.ruled,
                "cells": [c.to_dict() for c in self.cells]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Table:
        return cls(d["rows"], d["cols"], [Cell.from_dict(c) for c in d.get("cells", [])], d.get("ruled", False))


@dataclass
class Block:
    """A region of the page in reading order: kind is one of BLOCK_KINDS; ``lines`` index
    Page.lines (in reading order); ``table`` is set for kind "table"."""

    kind: str
    bbox: tuple[float, float, float, float]
    lines: list[int] = field(default_factory=list)
    table: Table | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "bbox": _round_box(self.bbox), "lines": list(self.lines)}
        if self.table is not None:
            d["table"] = self.table.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Block:
        t = d.get("table")
        return cls(d["kind"], tuple(d["bbox"]), list(d.get("lines", [])), Table.from_dict(t) if t else None)


BLOCK_KINDS = ("paragraph", "title", "header", "footer", "list", "caption", "table", "figure")


@dataclass
class Line:
    """One recognised text line.

    ``poly`` holds four [x, y] corners in original image pixels, clockwise from top-left.
    ``score`` is the mean character confidence in [0, 1].
    """

    text: str
    poly: list[list[float]]
    score: float
    angle: int = 0  # 0 or 180 when the orientation classifier flipped the crop
    words: list[Word] = field(default_factory=list)  # filled by the layout stage

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        xs = [p[0] for p in self.poly]
        ys = [p[1] for p in self.poly]
        return min(xs), min(ys), max(xs), max(ys)

    def to_dict(self) -> dict[str, Any]:
        return self._dict(_round_poly(self.poly), [_round_poly(w.poly) for w in self.words])

    def _dict(self, poly: list[list[float]], word_polys: list[list[list[float]]]) -> dict[str, Any]:
        """The JSON form with its polys already rounded (Page.to_dict rounds a page's at once)."""
        d = {"text": self.text, "poly": poly, "score": round(float(self.score), 4),
             "angle": self.angle}
        if self.words:
            d["words"] = [{"text": w.text, "poly": wp, "score": round(float(w.score), 4)}
                          for w, wp in zip(self.words, word_polys, strict=True)]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Line:
        return cls(d["text"], d["poly"], d["score"], d.get("angle", 0),
                   [Word.from_dict(w) for w in d.get("words", [])])


@dataclass
class Page:
    """The text of one image or PDF page, lines in reading order."""

    lines: list[Line]
    width: int
    height: int
    source: str = ""
    page_index: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    error: str | None = None
    blocks: list[Block] = field(default_factory=list)  # filled by the layout stage
    dpi: float | None = None  # render resolution of a PDF page (None for images)
    # page orientation (cls.page_orientation): the input was turned this many degrees clockwise
    # (0, 90, 180, 270) and was read upright; width, height and every poly are in the upright
    # page's pixels (as for EXIF orientation). ``input_poly`` maps a poly back to the input.
    rotation: int = 0

    @property
    def text(self) -> str:
        """Lines joined in reading order: lines sharing a row are joined by a space."""
        return rows_text(self.lines)

    @property
    def ok(self) -> bool:
        return self.error is None

    def input_poly(self, poly: list[list[float]]) -> list[list[float]]:
        """A poly of this page in the pixels of the image as it was given (differs from
        ``poly`` only when page orientation turned the page: ``rotation`` != 0)."""
        return to_input_frame(poly, self.rotation, self.width, self.height).tolist()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; ``words`` (per line), ``blocks`` and ``dpi`` appear only when set."""
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "source": self.source,
            "page": self.page_index,
            "width": self.width,
            "height": self.height,
            "text": self.text,
            "lines": self._line_dicts(),
            "timings_ms": {k: round(v * 1000.0, 3) for k, v in self.timings.items()},
            "error": self.error,
            "rotation": self.rotation,
        }
        if self.blocks:
            d["blocks"] = [b.to_dict() for b in self.blocks]
        if self.dpi is not None:
            d["dpi"] = self.dpi
        return d

    def _line_dicts(self) -> list[dict[str, Any]]:
        """Every line's JSON form, the polys of all lines and words rounded in one pass (a
        server answers every request with these: ~1,500 coordinates a page)."""
        polys = [ln.poly for ln in self.lines]
        counts = [len(ln.words) for ln in self.lines]
        polys += [w.poly for ln in self.lines for w in ln.words]
        rounded = _round_polys(polys)
        out, k = [], len(self.lines)
        for i, ln in enumerate(self.lines):
            out.append(ln._dict(rounded[i], rounded[k : k + counts[i]]))
            k += counts[i]
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Page:
        return cls(
            lines=[Line.from_dict(ln) for ln in d["lines"]],
            width=d["width"],
            height=d["height"],
            source=d.get("source", ""),
            page_index=d.get("page", 0),
            timings={k: v / 1000.0 for k, v in d.get("timings_ms", {}).items()},
            error=d.get("error"),
            rotation=d.get("rotation", 0),
            blocks=[Block.from_dict(b) for b in d.get("blocks", [])],
            dpi=d.get("dpi"),
        )


def line_direction(line: Line) -> tuple[float, float]:
    """Unit vector along the line's text (its quad's top and bottom edges); (1, 0) for boxes too
    short to tell (about square) and for tall, vertical lines."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = line.poly[:4]
    dx, dy = (x1 - x0 + x2 - x3) * 0.5, (y1 - y0 + y2 - y3) * 0.5
    length = math.hypot(dx, dy)
    height = math.hypot((x3 - x0 + x2 - x1) * 0.5, (y3 - y0 + y2 - y1) * 0.5)
    if length < 1.5 * height or dx <= 0:
        return 1.0, 0.0
    return dx / length, dy / length


def rows_text(lines: list[Line]) -> str:
    """Lines one row a line, lines sharing a row (an item and its price) joined by a space."""
    if not lines:
        return ""
    parts = [lines[0].text]
    for ln, joined in zip(lines[1:], _row_joins(lines), strict=True):
        parts += (" " if joined else "\n", ln.text)
    return "".join(parts)


def _row_joins(lines: list[Line]) -> list[bool]:
    """``_same_row`` of each line and the next, the projections of all pairs in a few array
    operations (the same products, sums and comparisons, so the same answers): a server builds
    the text of every page it answers. Each line's length and direction stay Python's."""
    try:
        p = np.asarray([ln.poly for ln in lines], dtype=np.float64)
    except ValueError:  # ragged: corners differ in number
        p = None
    if p is None or p.ndim != 3 or p.shape[1] < 4 or p.shape[2] != 2 \
            or not np.isfinite(p).all():
        return [_same_row(a, b) for a, b in zip(lines, lines[1:], strict=False)]
    lengths = [_length(ln) for ln in lines]
    dirs = [line_direction(ln) for ln in lines]
    u = np.array([dirs[i] if lengths[i] >= lengths[i + 1] else dirs[i + 1]
                  for i in range(len(lines) - 1)]).reshape(-1, 1, 2)
    ux, uy = u[..., 0], u[..., 1]
    a, b = p[:-1], p[1:]
    a_along = a[..., 0] * ux + a[..., 1] * uy
    b_along = b[..., 0] * ux + b[..., 1] * uy
    a_across = a[..., 0] * -uy + a[..., 1] * ux
    b_across = b[..., 0] * -uy + b[..., 1] * ux
    a_hi, a_lo, b_hi, b_lo = (a_across.max(1), a_across.min(1), b_across.max(1), b_across.min(1))
    overlap = np.minimum(a_hi, b_hi) - np.maximum(a_lo, b_lo)
    thin = np.minimum(a_hi - a_lo, b_hi - b_lo)
    return ((b_along.min(1) >= a_along.min(1)) & (overlap > 0.5 * thin)).tolist()


def _same_row(a: Line, b: Line) -> bool:
    """b continues a's row if it starts after a's start along the text direction and their
    extents across that direction overlap mostly (the direction of the longer line, so rows
    follow the page's skew)."""
    longer = a if _length(a) >= _length(b) else b
    ux, uy = line_direction(longer)
    nx, ny = -uy, ux
    a_along = [x * ux + y * uy for x, y in a.poly]
    b_along = [x * ux + y * uy for x, y in b.poly]
    a_across = [x * nx + y * ny for x, y in a.poly]
    b_across = [x * nx + y * ny for x, y in b.poly]
    overlap = min(max(a_across), max(b_across)) - max(min(a_across), min(b_across))
    thin = min(max(a_across) - min(a_across), max(b_across) - min(b_across))
    return min(b_along) >= min(a_along) and overlap > 0.5 * thin


def _length(line: Line) -> float:
    (x0, y0), (x1, y1) = line.poly[0], line.poly[1]
    return math.hypot(x1 - x0, y1 - y0)


def _round_poly(poly: list[list[float]]) -> list[list[float]]:
    return [[round(float(x), 1), round(float(y), 1)] for x, y in poly]


def _round_polys(polys: list[Any]) -> list[list[list[float]]]:
    """``_round_poly`` of each poly, equal to it value for value, in a few array operations
    when they all have the same number of corners."""
    try:
        a = np.asarray(polys, dtype=np.float64)
    except ValueError:  # ragged: corners differ in number
        a = None
    if a is None or a.ndim != 3 or a.shape[2] != 2:
        return [_round_poly(p) for p in polys]
    return _round1(a).tolist()


def _round1(a: np.ndarray) -> np.ndarray:
    """round(x, 1) of every element, as Python computes it (correctly rounded from the exact
    binary value). rint(10 x) / 10 is that float unless 10 x lies within rounding error of a
    half (0.15 is stored as 0.1499999..., so Python gives 0.1 where rint(1.5) gives 0.2):
    those few are rounded by Python, and so are values too large for 10 x to be that close
    (|x| >= 1e8), infinities and NaNs."""
    with np.errstate(invalid="ignore", over="ignore"):
        t = a * 10.0
        out = np.rint(t) / 10.0
        odd = ~(np.abs(a) < 1e8) | (np.abs(t - np.floor(t) - 0.5) < 1e-6)
    if odd.any():
        out[odd] = [round(float(v), 1) for v in a[odd]]
    return out


def to_input_frame(points: np.ndarray, angle: int, width: int, height: int) -> np.ndarray:
    """Map k x 2 points of the upright page (``width`` x ``height``) back to the pixels of the
    page as it was given (the upright page turned clockwise by ``angle``)."""
    p = np.asarray(points, np.float64)
    x, y = p[..., 0], p[..., 1]
    if angle == 0:
        return p.copy()
    if angle == 90:  # turned clockwise: upright (x, y) lands at (H - y, x)
        return np.stack([height - y, x], axis=-1)
    if angle == 180:
        return np.stack([width - x, height - y], axis=-1)
    if angle == 270:
        return np.stack([y, width - x], axis=-1)
    raise ValueError(f"angle must be one of (0, 90, 180, 270), not {angle}")


def _round_box(box: tuple[float, float, float, float]) -> list[float]:
    return [round(float(v), 1) for v in box]
