"""Results: Page and Line, with a stable JSON form (schema ``ocrforge.page/1``)."""

from __future__ import annotations

import json
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


@dataclass
class Table:
    rows: int
    cols: int
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Block:
    """A region of the page in reading order: kind is one of BLOCK_KINDS; ``lines`` index
    Page.lines (in reading order); ``table`` is set for kind "table"."""

    kind: str
    bbox: tuple[float, float, float, float]
    lines: list[int] = field(default_factory=list)
    table: Table | None = None


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
        return {
            "text": self.text,
            "poly": _round_poly(self.poly),
            "score": round(float(self.score), 4),
            "angle": self.angle,
        }


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
        rows: list[list[Line]] = []
        for line in self.lines:
            if rows and _same_row(rows[-1][-1], line):
                rows[-1].append(line)
            else:
                rows.append([line])
        return "\n".join(" ".join(ln.text for ln in row) for row in rows)

    @property
    def ok(self) -> bool:
        return self.error is None

    def input_poly(self, poly: list[list[float]]) -> list[list[float]]:
        """A poly of this page in the pixels of the image as it was given (differs from
        ``poly`` only when page orientation turned the page: ``rotation`` != 0)."""
        return to_input_frame(poly, self.rotation, self.width, self.height).tolist()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": self.source,
            "page": self.page_index,
            "width": self.width,
            "height": self.height,
            "text": self.text,
            "lines": [ln.to_dict() for ln in self.lines],
            "timings_ms": {k: round(v * 1000.0, 3) for k, v in self.timings.items()},
            "error": self.error,
            "rotation": self.rotation,
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Page:
        return cls(
            lines=[Line(ln["text"], ln["poly"], ln["score"], ln.get("angle", 0)) for ln in d["lines"]],
            width=d["width"],
            height=d["height"],
            source=d.get("source", ""),
            page_index=d.get("page", 0),
            timings={k: v / 1000.0 for k, v in d.get("timings_ms", {}).items()},
            error=d.get("error"),
            rotation=d.get("rotation", 0),
        )


def _same_row(a: Line, b: Line) -> bool:
    """b continues a's row if b starts to the right and their vertical spans overlap mostly."""
    ax0, ay0, ax1, ay1 = a.bbox
    bx0, by0, bx1, by1 = b.bbox
    overlap = min(ay1, by1) - max(ay0, by0)
    return bx0 >= ax0 and overlap > 0.5 * min(ay1 - ay0, by1 - by0)


def _round_poly(poly: list[list[float]]) -> list[list[float]]:
    return [[round(float(x), 1), round(float(y), 1)] for x, y in poly]


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
