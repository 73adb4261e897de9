"""hOCR 1.2 (XHTML): ocr_page > ocr_carea > ocr_par > ocr_line > ocrx_word, with bbox,
baseline and x_wconf, readable by OCRmyPDF's hOCR reader and hocr-tools.

Coordinates are pixels of the image the ``image`` property names, as it was given: a page
that page orientation turned is mapped back onto it (structure.as_given), the page states the
turn as ``textangle`` (counter-clockwise, as the spec says) and every line its own angle.

Block kinds map to hOCR classes: header/footer/caption lines become ocr_header / ocr_footer /
ocr_caption lines (inside an ocr_par, where Tesseract puts them and readers look for them),
a table becomes an ocr_table holding one ocr_par per cell, a figure an ocr_image.
"""

from __future__ import annotations

import math
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ocrforge.io.exporters.structure import (
    BBox,
    as_given,
    baseline,
    int_bbox,
    quad_bbox,
    regions,
    spaced_page,
    text_angle,
    union_bbox,
    words_of,
    xml_text,
)
from ocrforge.result import Line, Page

LINE_CLASS = {"header": "ocr_header", "footer": "ocr_footer", "caption": "ocr_caption"}
CAPABILITIES = ("ocr_page ocr_carea ocr_par ocr_line ocrx_word ocr_header ocr_footer "
                "ocr_caption ocr_table ocr_image ocrp_wconf")


def render(pages: list[Page], images: Any = None) -> bytes:
    from ocrforge.version import __version__

    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"',
        '    "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">',
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">',
        " <head>",
        "  <title></title>",
        '  <meta http-equiv="Content-Type" content="text/html;charset=utf-8"/>',
        f'  <meta name="ocr-system" content="ocrforge {escape(__version__)}"/>',
        f'  <meta name="ocr-capabilities" content="{CAPABILITIES}"/>',
        f'  <meta name="ocr-number-of-pages" content="{len(pages)}"/>',
        " </head>",
        " <body>",
    ]
    for n, page in enumerate(pages, 1):
        # word boxes end short of a touching neighbour: hOCR-to-PDF tools fit each word's glyphs
        # to its box, and touching words then extract as one
        out += _page(spaced_page(page), n)
    out += [" </body>", "</html>", ""]
    return "\n".join(out).encode("utf-8")


class _Ids:
    def __init__(self, page_no: int):
        self.page_no = page_no
        self.counts: dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return f"{kind}_{self.page_no}_{self.counts[kind]}"


def _page(page: Page, n: int) -> list[str]:
    ids = _Ids(n)
    page = as_given(page)  # the `image` property names the input: its pixels, as given
    W, H = page.width, page.height
    title = f"image {_q(page.source)}; bbox 0 0 {W} {H}; ppageno {n - 1}"
    if page.rotation:  # the text on the image is turned; each line states it too
        title += f"; textangle {text_angle(page)}"
    if page.dpi:
        title += f"; scan_res {round(page.dpi)} {round(page.dpi)}"
    out = [f'  <div class="ocr_page" id="page_{n}" title={quoteattr(title)}>']
    for r in regions(page):
        if r.table is not None:
            out.append(f'   <div class="ocr_table" id="{ids("table")}" title="{_bbox(r.bbox, page)}">')
            for cell in sorted(r.table.cells, key=lambda c: (c.row, c.col)):
                lines = [page.lines[i] for i in cell.lines if 0 <= i < len(page.lines)]
                out += _par(lines, page, ids, "ocr_line", tuple(cell.bbox), indent=4)
            out.append("   </div>")
            continue
        lines = [page.lines[i] for i in r.lines]
        if r.kind == "figure":
            out.append(f'   <div class="ocr_image" id="{ids("image")}" title="{_bbox(r.bbox, page)}">')
            out += _par(lines, page, ids, "ocr_line", None, indent=4)
            out.append("   </div>")
            continue
        if not lines:
            continue
        box = union_bbox([ln.bbox for ln in lines])
        out.append(f'   <div class="ocr_carea" id="{ids("block")}" title="{_bbox(box, page)}">')
        out += _par(lines, page, ids, LINE_CLASS.get(r.kind, "ocr_line"), None, indent=4)
        out.append("   </div>")
    out.append("  </div>")
    return out


def _par(lines: list[Line], page: Page, ids: _Ids, line_class: str, box: BBox | None,
         indent: int) -> list[str]:
    lines = [ln for ln in lines if words_of(ln)]
    if not lines:
        return []
    pad = " " * indent
    box = box or union_bbox([ln.bbox for ln in lines])
    out = [f'{pad}<p class="ocr_par" id="{ids("par")}" title="{_bbox(box, page)}">']
    for ln in lines:
        out.append(f'{pad} <span class="{line_class}" id="{ids("line")}" title="{_line_title(ln, page)}">')
        for w in words_of(ln):
            conf = round(100 * min(max(float(w.score), 0.0), 1.0))
            wt = f"{_bbox(quad_bbox(w.poly), page)}; x_wconf {conf}"
            out.append(f'{pad}  <span class="ocrx_word" id="{ids("word")}" title="{wt}">'
                       f"{escape(xml_text(w.text))}</span>")
        out.append(f"{pad} </span>")
    out.append(f"{pad}</p>")
    return out


def _line_title(line: Line, page: Page) -> str:
    x0, y0, x1, y1 = int_bbox(line.bbox, page.width, page.height)
    b = baseline(line.poly)
    # baseline: y = slope * (x - x0) + intercept, relative to the box's bottom-left corner
    slope = b.direction[1] / b.direction[0] if abs(b.direction[0]) > 1e-6 else 0.0
    intercept = b.origin[1] + slope * (x0 - b.origin[0]) - y1
    title = f"bbox {x0} {y0} {x1} {y1}; baseline {slope:.3f} {round(intercept)}"
    angle = -math.degrees(math.atan2(b.direction[1], b.direction[0]))
    if abs(angle) >= 45:  # steep lines: state the rotation instead of a useless slope
        title = f"bbox {x0} {y0} {x1} {y1}; textangle {round(angle) % 360}"
    return title + f"; x_size {round(b.height)}"


def _bbox(box: BBox, page: Page) -> str:
    x0, y0, x1, y1 = int_bbox(box, page.width, page.height)
    return f"bbox {x0} {y0} {x1} {y1}"


def _q(s: str) -> str:
    """A double-quoted hOCR property value."""
    return '"' + xml_text(s).replace("\\", "\\\\").replace('"', '\\"') + '"'
