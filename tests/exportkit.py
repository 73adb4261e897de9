"""Pages for the exporter tests, built by hand from rendered text with known ink boxes (no
engine needed), with and without the layout stage's blocks and words."""

from __future__ import annotations

import numpy as np
from conftest import font_path
from PIL import Image, ImageDraw, ImageFont

from ocrforge.result import Block, Cell, Line, Page, Table, Word


def quad(box, pad: float = 3.0) -> list[list[float]]:
    x0, y0, x1, y1 = box
    return [[x0 - pad, y0 - pad], [x1 + pad, y0 - pad], [x1 + pad, y1 + pad], [x0 - pad, y1 + pad]]


class Sheet:
    """A white page; put() draws text and records its exact ink box."""

    def __init__(self, w: int = 1000, h: int = 800):
        self.img = Image.new("RGB", (w, h), "white")
        self.draw = ImageDraw.Draw(self.img)
        self.lines: list[Line] = []

    def put(self, x: int, y: int, text: str, size: int = 28, words: bool = False) -> int:
        font = ImageFont.truetype(font_path(), size)
        self.draw.text((x, y), text, font=font, fill="black")
        left, t, r, b = font.getbbox(text)
        line = Line(text, quad((x + left, y + t, x + r, y + b)), 0.93)
        if words:
            off = 0
            for tok in text.split(" "):
                start = text.index(tok, off)
                off = start + len(tok)
                wl = font.getlength(text[:start])
                wr = font.getlength(text[:off])
                line.words.append(Word(tok, quad((x + wl, y + t, x + wr, y + b)), 0.9))
        self.lines.append(line)
        return len(self.lines) - 1

    @property
    def bgr(self) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(self.img)[:, :, ::-1])

    def page(self, blocks: list[Block] | None = None, **kw) -> Page:
        w, h = self.img.size
        return Page(list(self.lines), w, h, kw.pop("source", "sheet.png"), blocks=blocks or [], **kw)


def bbox(lines: list[Line]) -> tuple[float, float, float, float]:
    boxes = [ln.bbox for ln in lines]
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes),
            max(b[3] for b in boxes))


def plain_page() -> tuple[Page, np.ndarray]:
    """Three lines, no blocks, no words (the fallbacks)."""
    s = Sheet(900, 320)
    s.put(40, 40, "Hello ocrforge 2026 <&> \"quoted\"")
    s.put(40, 120, "光学字符识别 引擎 测试")
    s.put(40, 200, "Total: 1,234.56 | *stars* #1")
    return s.page(dpi=144.0), s.bgr


def two_column_page() -> tuple[Page, np.ndarray, list[str]]:
    """Header, title, two columns, a 3x2 table and a footer, with words; the page order of the
    lines (row by row, as detection finds them) differs from the reading order."""
    s = Sheet(1000, 900)
    hdr = s.put(40, 20, "Journal of Tests 12", size=20, words=True)
    title = s.put(40, 70, "Reading Order Matters", size=40, words=True)
    # column lines added row by row (left, right, left, right): page order interleaves them
    l1 = s.put(40, 160, "Left column one", words=True)
    r1 = s.put(520, 160, "Right column one", words=True)
    l2 = s.put(40, 210, "Left column two", words=True)
    r2 = s.put(520, 210, "Right column two", words=True)
    cells_text = [["Name", "Qty"], ["Apple", "3"], ["梨子", "12"]]
    cells, cell_lines = [], []
    for r, row in enumerate(cells_text):
        for c, t in enumerate(row):
            i = s.put(60 + 300 * c, 320 + 60 * r, t, words=True)
            cell_lines.append(i)
            cells.append(Cell(r, c, (50 + 300 * c, 310 + 60 * r, 350 + 300 * c, 370 + 60 * r), [i]))
    ftr = s.put(40, 820, "Page 7", size=20, words=True)
    L = s.lines
    blocks = [
        Block("header", bbox([L[hdr]]), [hdr]),
        Block("title", bbox([L[title]]), [title]),
        Block("paragraph", bbox([L[l1], L[l2]]), [l1, l2]),
        Block("paragraph", bbox([L[r1], L[r2]]), [r1, r2]),
        Block("table", (50, 310, 650, 490), list(cell_lines), Table(3, 2, cells)),
        Block("figure", (700, 560, 950, 780), []),
        Block("footer", bbox([L[ftr]]), [ftr]),
    ]
    order = ["Journal of Tests 12", "Reading Order Matters", "Left column one", "Left column two",
             "Right column one", "Right column two", "Name", "Qty", "Apple", "3", "梨子", "12",
             "Page 7"]
    return s.page(blocks, dpi=144.0), s.bgr, order
