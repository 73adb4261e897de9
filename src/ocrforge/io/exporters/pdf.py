"""Searchable PDF: each page image with an invisible text layer in reading order.

- Text is drawn in render mode 3 (invisible) with a glyph-less CID font (Identity-H, one
  empty glyph for every code, see glyphless_font.py) and a ToUnicode map, so selecting,
  searching and copying give the recognised Unicode text in any script, CJK included.
  Each distinct character of the document gets its own 2-byte code (1, 2, 3, ...), so
  characters outside the BMP copy correctly too.
- Every word is scaled horizontally (Tz) to cover its box, along the line's direction
  (skewed lines stay skewed); the font size is the line height, the baseline its bottom
  edge, so a character's box spans the line box from bottom to top. A space character is
  placed in the gap between words, and words whose boxes touch (word boxes from CTC run up
  to the next word) end MIN_WORD_GAP line heights early (structure.word_spans): poppler (pdftotext) and pdfium find word
  breaks by the distance between glyphs, not by the space character. A line the orientation
  classifier found upside down is one run over the line's box (extractors would reorder its
  words by position).
- Page size: pixels * 72 / dpi with dpi = Page.dpi (the render resolution of a PDF page, so
  PDF input keeps its page size), or DEFAULT_DPI for images without one.
- A page that page orientation turned (``Page.rotation``) is written upright: the image as
  given is turned the same way, so the text layer is the one of an upright page and every
  viewer, printer and extractor sees the page as it was read (docs/OUTPUT-FORMATS.md says
  why this and not the page as given).
- The page image is stored as JPEG (grey when the image has no colour).
- Every page is exported on its own: render_pages() leaves out a page that fails, with a
  message naming it, and writes the others.
"""

from __future__ import annotations

from typing import Any

from ocrforge.io.exporters.glyphless_font import ADVANCE, NAME, UNITS_PER_EM, glyphless_ttf
from ocrforge.io.exporters.pdf_objects import PdfWriter, num, pdf_string
from ocrforge.io.exporters.structure import (
    Baseline,
    baseline,
    regions,
    table_lines,
    word_spans,
    words_of,
)
from ocrforge.result import Line, Page

DEFAULT_DPI = 300.0
JPEG_QUALITY = 90
CHARS_PER_BFCHAR_BLOCK = 100  # the CMap syntax allows at most 100 entries per block


class _Codes:
    """Character -> 2-byte code, assigned in order of first use."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, text: str) -> str:
        out = []
        for ch in text:
            code = self.codes.get(ch)
            if code is None:
                code = self.codes[ch] = len(self.codes) + 1
                if code > 0xFFFF:
                    raise ValueError("more than 65535 distinct characters in one PDF")
            out.append(f"{code:04X}")
        return "".join(out)

    def to_unicode_cmap(self) -> bytes:
        items = sorted(self.codes.items(), key=lambda kv: kv[1])
        blocks = []
        for start in range(0, len(items), CHARS_PER_BFCHAR_BLOCK):
            chunk = items[start : start + CHARS_PER_BFCHAR_BLOCK]
            rows = "\n".join(f"<{code:04X}> <{ch.encode('utf-16-be').hex().upper()}>"
                             for ch, code in chunk)
            blocks.append(f"{len(chunk)} beginbfchar\n{rows}\nendbfchar")
        return (
            "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
            "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
            "/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
            "1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n"
            + "\n".join(blocks)
            + "\nendcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n"
        ).encode("ascii")

    def cid_to_gid_map(self) -> bytes:
        """Code 0 -> .notdef, every used code -> the empty glyph 1."""
        return b"\x00\x00" + b"\x00\x01" * len(self.codes)


def render(pages: list[Page], images: list[Any] | None = None) -> bytes:
    """One PDF page per Page; ``images`` are the page images as they were given (BGR or grey
    uint8 arrays, before page orientation turned them; None for a page that only carries the
    invisible text). Raises ValueError naming every page that cannot be exported."""
    data, failed = render_pages(pages, images)
    if failed:
        raise ValueError("; ".join(failed))
    return data


def render_pages(pages: list[Page], images: list[Any] | None) -> tuple[bytes | None, list[str]]:
    """Like render(), but every page on its own: a page that fails (its entry in ``images`` is
    an exception, or its image or text cannot be written) is left out with a message naming
    it, the others are written. Returns (the PDF, or None when no page was written; messages)."""
    if images is None or len(images) != len(pages):
        raise ValueError("the PDF export needs one page image per page "
                         f"({len(pages)} pages, {0 if images is None else len(images)} images)")
    from ocrforge.version import __version__

    w = PdfWriter()
    catalog, pages_node, font = w.reserve(), w.reserve(), w.reserve()
    codes = _Codes()
    kids, failed = [], []
    for page, image in zip(pages, images, strict=True):
        if isinstance(image, BaseException):  # its image could not be had (load_page_images)
            failed.append(_failure(page, image))
            continue
        try:
            kids.append(_page(w, page, image, pages_node, font, codes))
        except (ValueError, OSError) as e:
            failed.append(_failure(page, e))
    if not kids:
        return None, failed
    w.add(f"<< /Type /Catalog /Pages {pages_node} 0 R >>", catalog)
    w.add(f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>",
          pages_node)
    _font(w, font, codes)
    info = w.add(b"<< /Producer " + pdf_string(f"ocrforge {__version__}")
                 + b" /Creator " + pdf_string("ocrforge") + b" >>")
    return w.tobytes(catalog, info), failed


def _failure(page: Page, e: BaseException) -> str:
    name = f"{page.source} page {page.page_index + 1}"
    msg = str(e)
    return msg if msg.startswith(page.source) and page.source else f"{name}: {msg}"


def _font(w: PdfWriter, number: int, codes: _Codes) -> None:
    ttf = glyphless_ttf()
    font_file = w.add_stream(f"/Length1 {len(ttf)}", ttf)
    descriptor = w.add(
        f"<< /Type /FontDescriptor /FontName /{NAME} /Flags 5 /FontBBox [0 0 {ADVANCE} "
        f"{UNITS_PER_EM}] /ItalicAngle 0 /Ascent {UNITS_PER_EM} /Descent 0 /CapHeight "
        f"{UNITS_PER_EM} /StemV 80 /FontFile2 {font_file} 0 R >>")
    gid_map = w.add_stream("", codes.cid_to_gid_map())
    cid_font = w.add(
        f"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /{NAME} /CIDSystemInfo << /Registry "
        f"(Adobe) /Ordering (Identity) /Supplement 0 >> /FontDescriptor {descriptor} 0 R "
        f"/DW {ADVANCE} /CIDToGIDMap {gid_map} 0 R >>")
    to_unicode = w.add_stream("", codes.to_unicode_cmap())
    w.add(f"<< /Type /Font /Subtype /Type0 /BaseFont /{NAME} /Encoding /Identity-H "
          f"/DescendantFonts [{cid_font} 0 R] /ToUnicode {to_unicode} 0 R >>", number)


def _page(w: PdfWriter, page: Page, image: Any, parent: int, font: int, codes: _Codes) -> int:
    dpi = float(page.dpi) if page.dpi else DEFAULT_DPI
    if dpi <= 0:
        raise ValueError(f"page dpi must be positive, not {page.dpi}")
    scale = 72.0 / dpi
    pw, ph = page.width * scale, page.height * scale
    # everything that can fail before anything is added, so a failed page leaves no objects
    jpeg = _jpeg(upright_image(image, page)) if image is not None else None
    content = _text_layer(page, scale, ph, codes)
    # the font is /F1: OCRmyPDF's sandwich renderer takes the text layer's font by that name
    xobject = ""
    if jpeg is not None:  # None: a text-only page (to lay over an existing page)
        img = _image(w, *jpeg)
        content = f"q {num(pw)} 0 0 {num(ph)} 0 0 cm /Im0 Do Q\n".encode("ascii") + content
        xobject = f"/XObject << /Im0 {img} 0 R >> "
    contents = w.add_stream("", content)
    return w.add(
        f"<< /Type /Page /Parent {parent} 0 R /MediaBox [0 0 {num(pw)} {num(ph)}] "
        f"/Resources << {xobject}/Font << /F1 {font} 0 R >> "
        f"/ProcSet [/PDF /Text /ImageB /ImageC] >> /Contents {contents} 0 R >>")


def upright_image(image: Any, page: Page) -> Any:
    """The page image as it was given, turned upright by ``page.rotation`` (the image the
    page's text and boxes were read from). A wrong size is an error: the image is not this
    page's."""
    import numpy as np

    arr = np.asarray(image)
    w, h = (page.height, page.width) if page.rotation in (90, 270) else (page.width, page.height)
    if arr.ndim not in (2, 3) or arr.shape[:2] != (h, w):
        got = "x".join(str(v) for v in arr.shape[1::-1]) if arr.ndim >= 2 else str(arr.shape)
        turned = f" (the page was turned {page.rotation} degrees)" if page.rotation else ""
        raise ValueError(f"the page image is {got}, but the page was read from a {w}x{h} "
                         f"image{turned}")
    return np.rot90(arr, page.rotation // 90) if page.rotation else arr


def _jpeg(image: Any) -> tuple[bytes, int, int, bool]:
    """(JPEG bytes, width, height, grey) of a page image (grey when it has no colour)."""
    import cv2
    import numpy as np

    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3):
        raise ValueError("page image must be a uint8 HxW or HxWx3 array")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 3:
        arr = arr[:, :, :3]
        if np.array_equal(arr[:, :, 0], arr[:, :, 1]) and np.array_equal(arr[:, :, 1], arr[:, :, 2]):
            arr = arr[:, :, 0]
    ok, jpeg = cv2.imencode(".jpg", np.ascontiguousarray(arr), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise ValueError("cannot encode the page image")
    return jpeg.tobytes(), arr.shape[1], arr.shape[0], arr.ndim == 2


def _image(w: PdfWriter, jpeg: bytes, width: int, height: int, grey: bool) -> int:
    space = "/DeviceGray" if grey else "/DeviceRGB"
    return w.add_stream(f"/Type /XObject /Subtype /Image /Width {width} /Height {height} "
                        f"/ColorSpace {space} /BitsPerComponent 8 /Filter /DCTDecode", jpeg,
                        compress=False)


def _text_layer(page: Page, scale: float, page_h: float, codes: _Codes) -> bytes:
    ops = ["BT", "3 Tr"]
    for r in regions(page):
        idx = list(table_lines(r.table, page)) if r.table is not None else r.lines
        for i in idx:
            ops += _line_ops(page.lines[i], scale, page_h, codes)
    ops.append("ET")
    return ("\n".join(ops) + "\n").encode("ascii")


def _line_ops(line: Line, scale: float, page_h: float, codes: _Codes) -> list[str]:
    words = [wd for wd in words_of(line) if wd.text]
    if not words:
        return []
    lb = baseline(line.poly)
    size = max(lb.height * scale, 0.5)
    ux, uy = lb.direction
    # text space -> page: x along the line's direction, y perpendicular to it, upwards
    # (the image's y axis points down, the PDF's up)
    m = (ux, -uy, uy, ux)
    ops = [f"/F1 {num(size)} Tf"]
    if line.angle == 180:
        # an upside-down line: extractors order words by position, so turned words would copy
        # in reverse; the whole line as one run over its box copies right (no word boxes)
        return ops + _run(" ".join(wd.text for wd in words), lb, 0.0, max(lb.length, 1e-3),
                          size, scale, page_h, codes, m)
    spans = word_spans(lb, words)
    for k, (wd, (start, end)) in enumerate(zip(words, spans, strict=True)):
        ops += _run(wd.text, lb, start, end - start, size, scale, page_h, codes, m)
        if k + 1 < len(words):
            gap = max(spans[k + 1][0] - end, 1e-3)
            ops += _run(" ", lb, end, gap, size, scale, page_h, codes, m)
    return ops


def _run(text: str, lb: Baseline, start: float, length: float, size: float, scale: float,
         page_h: float, codes: _Codes, m: tuple[float, float, float, float]) -> list[str]:
    x = (lb.origin[0] + lb.direction[0] * start) * scale
    y = page_h - (lb.origin[1] + lb.direction[1] * start) * scale
    natural = len(text) * size * ADVANCE / UNITS_PER_EM
    tz = 100.0 * length * scale / natural
    a, b, c, d = m
    return [f"{num(a)} {num(b)} {num(c)} {num(d)} {num(x)} {num(y)} Tm",
            f"{num(tz)} Tz", f"<{codes.encode(text)}> Tj"]
