"""Searchable PDF export: text layer read back with pdfium matches the text output in order,
character boxes cover the ink, CJK and astral characters copy, qpdf finds no error, the text
is invisible (renders exactly like the image alone), PDF input keeps its page size; CLI and
server deliver it."""

from __future__ import annotations

import io
import shutil
import subprocess

import cv2
import numpy as np
import pypdfium2 as pdfium
import pytest
from conftest import render_lines
from exportkit import Sheet, plain_page, two_column_page
from rapidfuzz.distance import Levenshtein

from ocrforge.io.exporters import export
from ocrforge.io.exporters.pdf import DEFAULT_DPI
from ocrforge.result import Line, Page


def squash(s: str) -> str:
    return "".join(s.split())


def cer(ref: str, hyp: str) -> float:
    ref, hyp = squash(ref), squash(hyp)
    return Levenshtein.distance(ref, hyp) / max(len(ref), 1)


def pdf_pages_text(data: bytes) -> list[str]:
    doc = pdfium.PdfDocument(data)
    return [doc[i].get_textpage().get_text_range().replace("\r\n", "\n") for i in range(len(doc))]


def char_boxes(data: bytes, page_no: int, dpi: float) -> list[tuple[str, tuple[float, ...]]]:
    """(char, loose box in image pixels x0, y0, x1, y1) for every non-space character."""
    page = pdfium.PdfDocument(data)[page_no]
    h_pt = page.get_size()[1]
    tp = page.get_textpage()
    s = dpi / 72.0
    out = []
    for i in range(tp.count_chars()):
        ch = tp.get_text_range(i, 1)
        if ch.isspace():
            continue
        left, bottom, right, top = tp.get_charbox(i, loose=True)
        out.append((ch, (left * s, (h_pt - top) * s, right * s, (h_pt - bottom) * s)))
    return out


def box_mask(shape: tuple[int, int], boxes) -> np.ndarray:
    m = np.zeros(shape, bool)
    for x0, y0, x1, y1 in boxes:
        m[int(np.floor(y0)):int(np.ceil(y1)), int(np.floor(x0)):int(np.ceil(x1))] = True
    return m


def in_order(text: str, parts: list[str]) -> bool:
    at = 0
    for p in parts:
        at = text.find(p, at)
        if at < 0:
            return False
        at += len(p)
    return True


# ------------------------------------------------------------------ real OCR output
LINES = ["Searchable PDF export 2026", "光学字符识别引擎测试", "Invoice No. 4711 total 1,234.56",
         "The quick brown fox jumps over"]


@pytest.fixture(scope="module")
def ocr_page(engine):
    r = render_lines(LINES, size=34)
    bgr = np.ascontiguousarray(np.asarray(r.image)[:, :, ::-1])
    page = engine.read(bgr)
    page.dpi = 144.0  # whole points per 2 pixels: renders back onto the same pixel grid
    return page, bgr, r


def test_text_layer_matches_text_output_in_order(ocr_page):
    page, bgr, r = ocr_page
    data = export([page], "pdf", images=[bgr])
    (got,) = pdf_pages_text(data)
    want = export([page], "text").decode()
    assert cer(want, got) <= 0.005, (want, got)
    assert in_order(squash(got), [squash(ln.text) for ln in page.lines])
    assert cer("\n".join(LINES), got) < 0.05  # and it is the page's text


def test_character_boxes_cover_the_ink(ocr_page):
    page, bgr, r = ocr_page
    data = export([page], "pdf", images=[bgr])
    boxes = [b for _, b in char_boxes(data, 0, page.dpi)]
    covered = box_mask(bgr.shape[:2], boxes)
    ink = bgr.min(axis=2) < 128
    assert ink[covered].sum() / ink.sum() >= 0.98
    # and the boxes stay near the text: every character box inside a line's ink box + margin
    for x0, y0, x1, y1 in boxes:
        assert any(x0 >= a - 12 and y0 >= b - 12 and x1 <= c + 12 and y1 <= d + 12
                   for a, b, c, d in r.boxes), (x0, y0, x1, y1)


def test_word_boxes_from_layout_are_covered_exactly():
    page, bgr, order = two_column_page()
    data = export([page], "pdf", images=[bgr])
    (got,) = pdf_pages_text(data)
    assert in_order(got, order), got  # reading order of the blocks, not the page order
    assert not in_order(got, ["Right column one", "Left column two"])
    chars = char_boxes(data, 0, page.dpi)
    k = 0
    for i in [i for b in page.blocks for i in b.lines]:
        for w in page.lines[i].words:
            mine = chars[k:k + len(w.text)]
            k += len(w.text)
            assert "".join(c for c, _ in mine) == w.text
            x0 = min(b[0] for _, b in mine)
            x1 = max(b[2] for _, b in mine)
            y0 = min(b[1] for _, b in mine)
            y1 = max(b[3] for _, b in mine)
            xs, ys = [p[0] for p in w.poly], [p[1] for p in w.poly]
            assert (x0, x1) == pytest.approx((min(xs), max(xs)), abs=1.0), w.text
            assert (y0, y1) == pytest.approx((min(ys), max(ys)), abs=1.0), w.text


# ------------------------------------------------------------------ file-level checks
def test_qpdf_check_and_invisible_text(tmp_path):
    page, bgr, _ = two_column_page()
    plain, plain_bgr = plain_page()
    data = export([page, plain], "pdf", images=[bgr, plain_bgr])
    if shutil.which("qpdf"):
        (tmp_path / "out.pdf").write_bytes(data)
        res = subprocess.run(["qpdf", "--check", str(tmp_path / "out.pdf")], capture_output=True)
        assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
        assert b"No syntax or stream encoding errors" in res.stdout
    else:
        pikepdf = pytest.importorskip("pikepdf", reason="neither qpdf nor pikepdf installed")
        with pikepdf.open(io.BytesIO(data)) as pdf:
            assert pdf.check_pdf_syntax() == []
    bare = export([Page([], page.width, page.height, dpi=page.dpi)], "pdf", images=[bgr])
    with_text = pdfium.PdfDocument(data)[0].render(scale=2, no_smoothimage=True).to_numpy()
    image_only = pdfium.PdfDocument(bare)[0].render(scale=2, no_smoothimage=True).to_numpy()
    assert np.array_equal(with_text, image_only), "the text layer shows"
    h, w = bgr.shape[:2]
    assert with_text.shape[:2] == (h, w)
    diff = np.abs(with_text[:, :, :3].astype(int) - bgr.astype(int))
    assert diff.mean() < 1.0 and (diff.max(axis=2) > 64).mean() < 0.002  # JPEG q90, no shift


def test_cjk_and_astral_characters_copy_exactly():
    s = Sheet(900, 300)
    texts = ["光学字符识别引擎，测试。", "𠀋𡈽 😀 ok", "中文 English 混合 123"]
    for k, t in enumerate(texts):
        s.put(30, 30 + 80 * k, t)
    page = s.page(dpi=144.0)
    (got,) = pdf_pages_text(export([page], "pdf", images=[s.bgr]))
    assert got.split("\n") == texts


def test_page_size_follows_dpi_and_skewed_lines_keep_their_angle():
    img = np.full((400, 600, 3), 255, np.uint8)
    angle = np.deg2rad(12)
    u, n = np.array([np.cos(angle), -np.sin(angle)]), np.array([np.sin(angle), np.cos(angle)])
    p0 = np.array([100.0, 300.0])
    poly = [p0, p0 + 300 * u, p0 + 300 * u + 40 * n, p0 + 40 * n]
    skew = Page([Line("skewed text line", [list(map(float, p)) for p in poly], 0.9)], 600, 400,
                dpi=200.0)
    plain = Page([], 600, 400)
    data = export([skew, plain], "pdf", images=[img, img[:, :, 0]])
    doc = pdfium.PdfDocument(data)
    assert doc[0].get_size() == pytest.approx((600 * 72 / 200, 400 * 72 / 200), abs=0.01)
    assert doc[1].get_size() == pytest.approx((600 * 72 / DEFAULT_DPI, 400 * 72 / DEFAULT_DPI), abs=0.01)
    assert pdf_pages_text(data)[0] == "skewed text line"
    quad = np.array(poly, np.float32)
    for ch, (x0, y0, x1, y1) in char_boxes(data, 0, 200.0):
        # pdfium gives axis-aligned boxes of rotated characters: their centres lie in the quad
        c = ((x0 + x1) / 2, (y0 + y1) / 2)
        assert cv2.pointPolygonTest(quad, c, True) >= -2, (ch, c)


def test_font_program_is_valid_truetype_and_draws_nothing():
    from PIL import Image, ImageDraw, ImageFont

    from ocrforge.io.exporters.glyphless_font import glyphless_ttf

    ttf = glyphless_ttf()
    for size in (6, 40, 300):  # FreeType: glyph 1 (mapped from U+0020) has a box, paints nothing
        font = ImageFont.truetype(io.BytesIO(ttf), size)
        img = Image.new("L", (4 * size, 2 * size), 255)
        ImageDraw.Draw(img).text((2, 2), "  ", font=font, fill=0)
        assert img.getextrema() == (255, 255)
        assert font.getlength("  ") == size
    ttlib = pytest.importorskip("fontTools.ttLib")
    font = ttlib.TTFont(io.BytesIO(ttf))
    assert font["maxp"].numGlyphs == 2 and font["head"].unitsPerEm == 1000
    assert [font["hmtx"][g][0] for g in font.getGlyphOrder()] == [500, 500]
    glyph = font["glyf"][font.getGlyphOrder()[1]]
    assert glyph.endPtsOfContours == [0, 1] and list(glyph.coordinates) == [(0, 0), (500, 1000)]


# ------------------------------------------------------------------ CLI and server
def test_cli_pdf_keeps_the_input_page_size(tmp_path):
    from ocrforge.cli import main

    one = render_lines(["First page 111"], size=36).image
    two = render_lines(["Second page 222"], size=36).image
    one.save(tmp_path / "doc.pdf", save_all=True, append_images=[two], resolution=100)
    out = tmp_path / "out"
    rc = main(["read", str(tmp_path / "doc.pdf"), "-f", "pdf", "-o", f"{out}/", "--no-progress"])
    assert rc == 0 and sorted(p.name for p in out.iterdir()) == ["doc.pdf"]
    src, got = pdfium.PdfDocument(tmp_path / "doc.pdf"), pdfium.PdfDocument(out / "doc.pdf")
    assert len(got) == 2
    for i in range(2):
        assert got[i].get_size() == pytest.approx(src[i].get_size(), abs=0.5)
    texts = pdf_pages_text((out / "doc.pdf").read_bytes())
    assert [squash(t).upper() for t in texts] == ["FIRSTPAGE111", "SECONDPAGE222"]


def test_server_formats_from_the_registry(ocr_server):
    import httpx
    from serverkit import text_pdf

    pdf = text_pdf([["First page 111"], ["Second page 222"]])
    url = ocr_server.url + "/v1/ocr"
    r = httpx.post(url, files={"file": ("two.pdf", pdf)}, params={"format": "pdf"},
                   headers=ocr_server.headers(), timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/pdf"
    src, got = pdfium.PdfDocument(pdf), pdfium.PdfDocument(r.content)
    assert len(got) == 2 and got[0].get_size() == pytest.approx(src[0].get_size(), abs=0.5)
    assert [squash(t).upper() for t in pdf_pages_text(r.content)] == ["FIRSTPAGE111", "SECONDPAGE222"]
    for fmt, media in (("hocr", "application/xhtml+xml"), ("alto", "application/xml")):
        r = httpx.post(url, files={"file": ("two.pdf", pdf)}, data={"format": fmt},
                       headers=ocr_server.headers(), timeout=60)
        assert r.status_code == 200 and r.headers["content-type"].startswith(media), r.text
        assert b"Second" in r.content


def test_upside_down_line_copies_in_order():
    """A line the classifier turned (angle 180) still copies in its own order, over its box."""
    img = np.full((200, 600, 3), 255, np.uint8)
    flipped = Line("upside down", [[100.0, 50.0], [400.0, 50.0], [400.0, 90.0], [100.0, 90.0]], 0.9,
                   angle=180)
    data = export([Page([flipped], 600, 200, dpi=144.0)], "pdf", images=[img])
    assert pdf_pages_text(data)[0] == "upside down"
    boxes = char_boxes(data, 0, 144.0)
    assert all(95 <= b[0] and b[2] <= 405 and 45 <= b[1] and b[3] <= 95 for _, b in boxes)
