"""Every output format on upright and turned pages (issue 20): one small page of big clear
text, turned 0/90/180/270 degrees clockwise and given as PNG, as frames of one TIFF and as
pages of one PDF, read once by one engine (page orientation on, layout on: word boxes from
CTC). For each format the boxes (or the PDF's text layer) must lie on the ink of the image the
format refers to, as on the upright page, and pdftotext and pypdfium2 must give the words with
their spaces. Also: a failing page does not discard the others; touching word boxes keep
their spaces in the PDF; hOCR/ALTO state the turn."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from conftest import render_lines
from exportkit import Sheet
from PIL import Image

from ocrforge.io.exporters import export, export_pages
from ocrforge.io.exporters.images import load_page_images
from ocrforge.io.inputs import InputError, iter_pages
from ocrforge.result import Page

LINES = ["Paper receipts remain common", "By Ada Lindqvist, Staff Writer",
         "The quick brown fox jumps over"]
WORDS = " ".join(LINES).split()
ANGLES = (0, 90, 180, 270)
KINDS = ("png", "tiff", "pdf")
DPI = 200  # the PDF holds its images at the engine's render resolution: same pixels
ALTO = "{http://www.loc.gov/standards/alto/ns-v4#}"
XHTML = "{http://www.w3.org/1999/xhtml}"
DATA = Path(__file__).parent / "data" / "alto"
MIN_COVER = 0.9  # upright pages get 97-100 %; a misplaced layer a few per cent


def turned(img: Image.Image, angle: int) -> Image.Image:
    """The page turned clockwise by ``angle`` (what page orientation undoes)."""
    return img.rotate(-angle, expand=True) if angle else img.copy()


@pytest.fixture(scope="module")
def layout_engine():
    from ocrforge import OCR

    return OCR(use_layout=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("turned")
    page = render_lines(LINES, size=40, width=900).image
    frames = [turned(page, a) for a in ANGLES]
    paths = {}
    for a, im in zip(ANGLES, frames, strict=True):
        paths[f"png{a}"] = d / f"page{a}.png"
        im.save(paths[f"png{a}"])
    frames = [im.copy() for im in frames]  # Pillow keeps the PNG encoder settings on a saved image
    paths["tiff"] = d / "pages.tiff"
    frames[0].save(paths["tiff"], save_all=True, append_images=frames[1:])
    paths["pdf"] = d / "pages.pdf"
    frames[0].save(paths["pdf"], save_all=True, append_images=frames[1:], resolution=DPI)
    return paths


@pytest.fixture(scope="module")
def pages(layout_engine, inputs) -> dict[tuple[str, int], Page]:
    """(kind, angle) -> the Page the engine read."""
    out = {("png", a): layout_engine.read(str(inputs[f"png{a}"])) for a in ANGLES}
    for kind in ("tiff", "pdf"):
        got = layout_engine.read_pages(str(inputs[kind]))
        assert len(got) == 4
        out.update({(kind, a): p for a, p in zip(ANGLES, got, strict=True)})
    return out


def given_image(page: Page) -> np.ndarray:
    """The page's image as the input holds it (before page orientation), BGR."""
    return next(pi.image for pi in iter_pages(page.source, pdf_dpi=DPI)
                if pi.index == page.page_index)


def ink(img: np.ndarray) -> np.ndarray:
    return (img if img.ndim == 2 else img[:, :, :3].min(axis=2)) < 128


def coverage(ink_mask: np.ndarray, boxes) -> float:
    """Share of the ink under the boxes (x0, y0, x1, y1 in pixels)."""
    m = np.zeros(ink_mask.shape, bool)
    for x0, y0, x1, y1 in boxes:
        m[max(int(np.floor(y0)), 0):int(np.ceil(y1)), max(int(np.floor(x0)), 0):int(np.ceil(x1))] = True
    return float(ink_mask[m].sum() / max(ink_mask.sum(), 1))


def quad_box(poly) -> tuple[float, float, float, float]:
    p = np.asarray(poly, float)
    return p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()


def pdftotext(data: bytes, tmp_path: Path) -> list[str]:
    """pdftotext's text of every page (poppler-utils; scripts/test.sh installs it)."""
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext not installed (apt-get install poppler-utils)")
    f = tmp_path / "check.pdf"
    f.write_bytes(data)
    out = subprocess.run(["pdftotext", str(f), "-"], capture_output=True, text=True, check=True)
    return out.stdout.split("\f")[:-1]


def pdfium_text(pdf: pdfium.PdfDocument, i: int) -> str:
    return pdf[i].get_textpage().get_text_range()


def pdf_coverage(pdf: pdfium.PdfDocument, i: int) -> float:
    """Ink of the rendered page under pdfium's character boxes (the page's own pixel grid)."""
    page = pdf[i]
    w_pt, h_pt = page.get_size()
    scale = 4.0 if w_pt < 300 else 2.0
    rendered = page.render(scale=scale).to_numpy()
    tp = page.get_textpage()
    boxes = []
    for k in range(tp.count_chars()):
        left, bottom, right, top = tp.get_charbox(k, loose=True)
        boxes.append((left * scale, (h_pt - top) * scale, right * scale, (h_pt - bottom) * scale))
    return coverage(ink(rendered), boxes)


def test_every_turned_page_is_read_upright(pages):
    for (kind, angle), page in pages.items():
        assert page.ok and page.rotation == angle, (kind, angle, page.error)
        assert (page.width, page.height) == (900, 320), (kind, angle)
        assert page.text.split() == WORDS, (kind, angle, page.text)
        assert all(ln.words for ln in page.lines)  # the layout stage's words (CTC boxes)


# ------------------------------------------------------------------ searchable PDF
@pytest.mark.parametrize("kind", KINDS)
def test_pdf_text_layer_lies_on_the_ink_with_spaces(pages, kind, tmp_path):
    """The CLI's export path (page images decoded again from the inputs): every turned page
    exports (no "no longer decodes" crash), upright, in the upright page's shape, with its
    text layer on the glyphs, and both extractors give the words with their spaces."""
    doc = [pages[kind, a] for a in ANGLES]
    data, failed = export_pages(doc, "pdf", images=load_page_images(doc, pdf_dpi=DPI))
    assert failed == [] and data is not None
    pdf = pdfium.PdfDocument(data)
    assert len(pdf) == 4
    poppler = pdftotext(data, tmp_path)
    for i, page in enumerate(doc):
        w, h = pdf[i].get_size()
        assert w > 2 * h, (kind, page.rotation, w, h)  # the upright (landscape) page
        assert pdf_coverage(pdf, i) >= MIN_COVER, (kind, page.rotation)
        assert pdfium_text(pdf, i).split() == WORDS, (kind, page.rotation, pdfium_text(pdf, i))
        assert poppler[i].split() == WORDS, (kind, page.rotation, poppler[i])


def test_pdf_upside_down_page_is_written_upright(pages):
    """The PDF holds the image turned upright (the text layer is the upright page's), so the
    rendered page equals the upright input's page."""
    up, down = pages["png", 0], pages["png", 180]
    a = pdfium.PdfDocument(export([up], "pdf", images=[given_image(up)]))[0].render().to_numpy()
    b = pdfium.PdfDocument(export([down], "pdf", images=[given_image(down)]))[0].render().to_numpy()
    assert a.shape == b.shape
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 2.0  # JPEG noise only


def test_pdf_page_failure_leaves_the_others(pages, tmp_path):
    """A page whose image cannot be had (the file changed since it was read) or does not fit
    is named and left out; the other pages are written."""
    good = pages["png", 90]
    changed = tmp_path / "changed.png"
    Image.new("RGB", (50, 40), "white").save(changed)
    gone = Page(list(good.lines), good.width, good.height, str(changed), rotation=good.rotation)
    images = load_page_images([good, gone])
    assert isinstance(images[0], np.ndarray) and isinstance(images[1], InputError)
    assert str(changed) in str(images[1]) and "page 1" in str(images[1])
    data, failed = export_pages([good, gone, good], "pdf",
                                images=[images[0], images[1], np.zeros((5, 5), np.uint8)])
    assert len(pdfium.PdfDocument(data)) == 1
    assert len(failed) == 2 and str(changed) in failed[0] and good.source in failed[1]
    with pytest.raises(ValueError, match="page 1"):
        export([good], "pdf", images=[np.zeros((5, 5), np.uint8)])


def test_cli_pdf_of_turned_inputs(inputs, tmp_path):
    """`ocrforge read turned.png pages.tiff -f pdf -o out/` writes every page (it stopped with
    "page 2 no longer decodes to the ... image that was read" and wrote nothing)."""
    from ocrforge.cli import main

    one, two = tmp_path / "page90.png", tmp_path / "two.tiff"
    shutil.copy(inputs["png90"], one)
    frames = [Image.open(inputs["png0"]).copy(), Image.open(inputs["png270"]).copy()]
    frames[0].save(two, save_all=True, append_images=frames[1:])
    out = tmp_path / "out"
    rc = main(["read", str(one), str(two), "-f", "pdf", "-o", f"{out}/",
               "--no-progress", "--layout"])
    assert rc == 0
    for name, n in (("page90.pdf", 1), ("two.pdf", 2)):
        pdf = pdfium.PdfDocument(out / name)
        assert len(pdf) == n
        for i in range(n):
            assert pdfium_text(pdf, i).split() == WORDS
            assert pdf_coverage(pdf, i) >= MIN_COVER


def test_touching_word_boxes_keep_their_spaces(tmp_path):
    """Word boxes that touch (CTC word boxes run up to the next word) lost every space in
    pdftotext ("Paperreceiptsremain") and pypdfium2: the space was drawn over the next word."""
    s = Sheet(1000, 200)
    s.put(30, 40, LINES[0], size=40, words=True)
    s.put(30, 120, LINES[1], size=40, words=True)
    for ln in s.lines:
        for a, b in zip(ln.words, ln.words[1:], strict=False):
            a.poly[1][0] = a.poly[2][0] = b.poly[0][0]  # this word's box ends where the next starts
    page = s.page(dpi=144.0)
    data = export([page], "pdf", images=[s.bgr])
    want = " ".join(LINES[:2]).split()
    assert pdftotext(data, tmp_path)[0].split() == want
    pdf = pdfium.PdfDocument(data)
    assert pdfium_text(pdf, 0).split() == want
    assert pdf_coverage(pdf, 0) >= 0.97


# ------------------------------------------------------------------ hOCR and ALTO
def _hocr(page: Page) -> tuple[dict, list[tuple[str, tuple[int, ...]]], list[str]]:
    root = ET.fromstring(export([page], "hocr"))
    div = root.find(f".//{XHTML}div[@class='ocr_page']")
    words = [(w.text, tuple(int(v) for v in re.search(r"bbox (\d+) (\d+) (\d+) (\d+)", w.get("title")).groups()))
             for w in root.iter(f"{XHTML}span") if w.get("class") == "ocrx_word"]
    lines = [s.get("title") for s in root.iter(f"{XHTML}span") if s.get("class") == "ocr_line"]
    return {"title": div.get("title")}, words, lines


@pytest.mark.parametrize("kind", KINDS)
def test_hocr_boxes_size_and_angle_follow_the_given_image(pages, kind):
    for angle in ANGLES:
        page = pages[kind, angle]
        img = given_image(page)
        h, w = img.shape[:2]
        head, words, lines = _hocr(page)
        assert f"bbox 0 0 {w} {h}" in head["title"], (kind, angle, head)
        ccw = (360 - angle) % 360
        assert ("textangle" in head["title"]) == bool(angle)
        if angle:
            assert f"textangle {ccw}" in head["title"]
            assert all(f"textangle {ccw}" in t for t in lines), lines
        assert [t for t, _ in words] == WORDS
        assert coverage(ink(img), [b for _, b in words]) >= MIN_COVER, (kind, angle)


@pytest.fixture(scope="module")
def alto_schema():
    etree = pytest.importorskip("lxml.etree")

    class Offline(etree.Resolver):
        def resolve(self, url, pubid, context):
            if url.endswith("/xlink.xsd"):
                return self.resolve_filename(str(DATA / "xlink-loc.xsd"), context)
            return None

    parser = etree.XMLParser(no_network=True)
    parser.resolvers.add(Offline())
    return etree.XMLSchema(etree.parse(str(DATA / "alto-4-4.xsd"), parser))


@pytest.mark.parametrize("kind", KINDS)
def test_alto_boxes_size_and_rotation_follow_the_given_image(pages, kind, alto_schema):
    from lxml import etree

    doc = [pages[kind, a] for a in ANGLES]
    data = export(doc, "alto")
    assert alto_schema.validate(etree.fromstring(data)), alto_schema.error_log
    root = ET.fromstring(data)
    for el, page in zip(root.iter(f"{ALTO}Page"), doc, strict=True):
        img = given_image(page)
        h, w = img.shape[:2]
        assert (el.get("WIDTH"), el.get("HEIGHT")) == (str(w), str(h)), (kind, page.rotation)
        assert el.get("ROTATION") == (str((360 - page.rotation) % 360) if page.rotation else None)
        strings = list(el.iter(f"{ALTO}String"))
        assert [s.get("CONTENT") for s in strings] == WORDS
        boxes = [(float(s.get("HPOS")), float(s.get("VPOS")), float(s.get("HPOS")) + float(s.get("WIDTH")),
                  float(s.get("VPOS")) + float(s.get("HEIGHT"))) for s in strings]
        assert coverage(ink(img), boxes) >= MIN_COVER, (kind, page.rotation)
        for sp in el.iter(f"{ALTO}SP"):  # a space sits between its words, not across the line
            assert float(sp.get("WIDTH")) < 40


# ------------------------------------------------------------------ JSON, text, Markdown
@pytest.mark.parametrize("kind", KINDS)
def test_json_text_and_markdown_on_turned_pages(pages, kind):
    up = pages[kind, 0]
    for angle in ANGLES:
        page = pages[kind, angle]
        img = given_image(page)
        doc = Page.from_dict(json.loads(export([page], "json")))
        assert doc.rotation == angle and (doc.width, doc.height) == (900, 320)
        words = [w for ln in doc.lines for w in ln.words]
        assert [w.text for w in words] == WORDS
        # upright polys lie on the upright image, input_poly on the image as given
        upright = np.rot90(img, angle // 90)
        assert coverage(ink(upright), [quad_box(w.poly) for w in words]) >= MIN_COVER
        assert coverage(ink(img), [quad_box(doc.input_poly(w.poly)) for w in words]) >= MIN_COVER
        for fmt in ("text", "markdown"):
            assert export([page], fmt) == export([up], fmt), (kind, angle, fmt)
        assert export([page], "text").decode().split() == WORDS


# ------------------------------------------------------------------ the server's formats
def _two_page_pdf(inputs) -> bytes:
    buf = io.BytesIO()
    a, b = Image.open(inputs["png0"]).copy(), Image.open(inputs["png270"]).copy()
    a.save(buf, "PDF", save_all=True, append_images=[b], resolution=DPI)
    return buf.getvalue()


def test_server_formats_on_turned_pages(ocr_server, inputs, tmp_path):
    """format=pdf of a turned image was squeezed into the turned (portrait) page shape; hOCR
    and ALTO stated the upright size for a turned file."""
    import httpx

    from ocrforge.server.formats import FORMATS

    url = ocr_server.url + "/v1/ocr"
    turned_png = inputs["png90"].read_bytes()
    img = given_image(Page([], 900, 320, str(inputs["png90"]), rotation=90))
    for fmt in FORMATS:
        r = httpx.post(url, files={"file": ("page90.png", turned_png)}, params={"format": fmt},
                       headers=ocr_server.headers(), timeout=120)
        assert r.status_code == 200, (fmt, r.text)
        if fmt == "pdf":
            pdf = pdfium.PdfDocument(r.content)
            w, h = pdf[0].get_size()
            assert w > 2 * h and pdf_coverage(pdf, 0) >= MIN_COVER
            assert pdfium_text(pdf, 0).split() == WORDS
            assert pdftotext(r.content, tmp_path)[0].split() == WORDS
        elif fmt == "json":
            (page,) = r.json()["pages"]
            assert page["rotation"] == 90 and (page["width"], page["height"]) == (900, 320)
        elif fmt == "hocr":
            root = ET.fromstring(r.content)
            div = root.find(f".//{XHTML}div[@class='ocr_page']")
            assert "bbox 0 0 320 900" in div.get("title") and "textangle 270" in div.get("title")
            boxes = [tuple(int(v) for v in re.search(r"bbox (\d+) (\d+) (\d+) (\d+)", s.get("title")).groups())
                     for s in root.iter(f"{XHTML}span") if s.get("class") == "ocrx_word"]
            assert coverage(ink(img), boxes) >= MIN_COVER
        elif fmt == "alto":
            el = ET.fromstring(r.content).find(f".//{ALTO}Page")
            assert (el.get("WIDTH"), el.get("HEIGHT"), el.get("ROTATION")) == ("320", "900", "270")
        else:
            assert r.text.split() == WORDS, (fmt, r.text)
    r = httpx.post(url, files={"file": ("two.pdf", _two_page_pdf(inputs))}, params={"format": "pdf"},
                   headers=ocr_server.headers(), timeout=120)
    assert r.status_code == 200, r.text
    pdf = pdfium.PdfDocument(r.content)
    poppler = pdftotext(r.content, tmp_path)
    for i in range(2):
        w, h = pdf[i].get_size()
        assert w > 2 * h and pdf_coverage(pdf, i) >= MIN_COVER
        assert pdfium_text(pdf, i).split() == WORDS and poppler[i].split() == WORDS


# ------------------------------------------------------------------ the OCRmyPDF plugin
def test_ocrmypdf_plugin_on_turned_pages_without_rotate_pages(inputs, tmp_path):
    """Without --rotate-pages OCRmyPDF hands the plugin sideways and upside-down images: the
    text layer scattered (one word per line from pdftotext, 33 % of the ink covered)."""
    pytest.importorskip("ocrmypdf", reason="OCRmyPDF not installed (pip install 'ocrforge[ocrmypdf]')")
    src = tmp_path / "scan.pdf"
    frames = [Image.open(inputs[f"png{a}"]).copy() for a in ANGLES]
    frames[0].save(src, save_all=True, append_images=frames[1:], resolution=DPI)
    out = tmp_path / "out.pdf"
    empty = tmp_path / "empty-bin"  # no tesseract, no gs on PATH
    empty.mkdir()
    here = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PATH": str(empty),
           "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "ocrmypdf", "--plugin", "ocrforge.ocrmypdf_plugin",
                        "--output-type", "pdf", "--jobs", "2", str(src), str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pdf = pdfium.PdfDocument(out)
    poppler = pdftotext(out.read_bytes(), tmp_path)
    for i, angle in enumerate(ANGLES):
        assert pdfium_text(pdf, i).split() == WORDS, (angle, pdfium_text(pdf, i))
        lines = [ln.strip() for ln in poppler[i].splitlines() if ln.strip()]
        # every line whole, words and spaces; OCRmyPDF shows the page as given, and poppler
        # orders the lines of a sideways page by where they sit on it (270: last line first)
        assert sorted(lines) == sorted(LINES), (angle, poppler[i])
        assert pdf_coverage(pdf, i) >= MIN_COVER, angle


def test_ocr_element_tree_of_a_turned_page(pages):
    from ocrforge.ocrmypdf_plugin import page_to_ocr_element

    for angle in ANGLES:
        page = pages["png", angle]
        tree = page_to_ocr_element(page, 200.0, 0)
        img = given_image(page)
        assert (tree.bbox.right, tree.bbox.bottom) == (img.shape[1], img.shape[0])
        lines = tree.iter_by_class("ocr_line")
        assert all(ln.textangle == ((360 - angle) % 360 or None) for ln in lines)
        words = tree.iter_by_class("ocrx_word")
        assert " ".join(w.text for w in words).split() == WORDS
        boxes = [(w.bbox.left, w.bbox.top, w.bbox.right, w.bbox.bottom) for w in words]
        assert coverage(ink(img), boxes) >= MIN_COVER, angle
