"""The OCRmyPDF plugin end to end: a generated 3-page scanned PDF (one page turned) made
searchable by `ocrmypdf --plugin ocrforge.ocrmypdf_plugin` on a PATH without Tesseract or
Ghostscript; the installed entry point (`--ocr-engine ocrforge`); the OcrElement tree."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ocrmypdf", reason="OCRmyPDF not installed (pip install 'ocrforge[ocrmypdf]')")

import pypdfium2 as pdfium  # noqa: E402
from conftest import render_lines  # noqa: E402
from exportkit import Sheet, two_column_page  # noqa: E402
from PIL import Image  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


def squash(s: str) -> str:
    return "".join(s.split())


def cer(ref: str, hyp: str) -> float:
    return Levenshtein.distance(squash(ref), squash(hyp)) / max(len(squash(ref)), 1)


def ocrmypdf(args: list[str], tmp: Path, extra_path: list[Path] = ()) -> subprocess.CompletedProcess:
    """OCRmyPDF in a subprocess whose PATH is an empty folder: no tesseract, no gs."""
    empty = tmp / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty),
           "PYTHONPATH": os.pathsep.join([*(str(p) for p in extra_path), str(SRC),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "ocrmypdf", *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def scanned_pdf(tmp_path_factory) -> tuple[Path, list[str]]:
    from ocrforge.evaluation.synth import render_page

    data, _, rec = render_page(1, 0, kind="document", clean=True)
    doc = Image.open(io.BytesIO(data)).convert("RGB")
    pages = [render_lines(["Scanned page one 101", "光学字符识别引擎"], size=40, width=1240).image,
             doc.rotate(-90, expand=True),  # the content turned 90 degrees clockwise
             render_lines(["Third page 333", "Invoice No. 4711"], size=40, width=1240).image]
    path = tmp_path_factory.mktemp("scan") / "scan.pdf"
    pages[0].save(path, save_all=True, append_images=pages[1:], resolution=150)
    truth = ["Scanned page one 101\n光学字符识别引擎", "\n".join(ln["text"] for ln in rec["lines"]),
             "Third page 333\nInvoice No. 4711"]
    return path, truth


def test_plugin_makes_a_scanned_pdf_searchable_without_tesseract(scanned_pdf, tmp_path):
    src, truth = scanned_pdf
    out = tmp_path / "out.pdf"
    r = ocrmypdf(["--plugin", "ocrforge.ocrmypdf_plugin", "--rotate-pages", "--output-type", "pdf",
                  "--jobs", "2", str(src), str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tesseract" not in r.stderr.lower()
    doc = pdfium.PdfDocument(out)
    assert len(doc) == 3
    texts = [doc[i].get_textpage().get_text_range() for i in range(3)]
    assert squash(texts[0]) == squash(truth[0]) and squash(texts[2]) == squash(truth[2])
    assert cer(truth[1], texts[1]) < 0.03, texts[1]  # read after turning the page upright
    assert doc[1].get_rotation() == 270 and doc[0].get_rotation() == 0
    if shutil.which("qpdf"):
        assert subprocess.run(["qpdf", "--check", str(out)], capture_output=True).returncode == 0


def test_installed_entry_point_and_explicit_plugin_together(scanned_pdf, tmp_path):
    """The entry point `ocrforge` (as pip installs it), selected with --ocr-engine; loading the
    module with --plugin as well must not register the plugin twice."""
    src, truth = scanned_pdf
    site = tmp_path / "site"
    dist = site / "ocrforge_entrypoint_test-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ocrforge-entrypoint-test\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[ocrmypdf]\nocrforge = ocrforge.ocrmypdf_plugin:installed\n")
    one = tmp_path / "one.pdf"
    with pdfium.PdfDocument(src) as pdf, pdfium.PdfDocument.new() as new:
        new.import_pages(pdf, [2])
        new.save(one)
    for extra in ([], ["--plugin", "ocrforge.ocrmypdf_plugin"]):
        out = tmp_path / f"out{len(extra)}.pdf"
        r = ocrmypdf([*extra, "--ocr-engine", "ocrforge", "--output-type", "pdf", str(one), str(out)],
                     tmp_path, [site])
        assert r.returncode == 0, r.stderr
        text = pdfium.PdfDocument(out)[0].get_textpage().get_text_range()
        assert squash(text) == squash(truth[2])


def test_ocr_element_tree_follows_reading_order_and_word_boxes():
    from ocrforge.ocrmypdf_plugin import page_to_ocr_element

    page, _, order = two_column_page()
    tree = page_to_ocr_element(page, 144.0, 3)
    assert tree.ocr_class == "ocr_page" and tree.dpi == 144.0 and tree.page_number == 3
    words = tree.iter_by_class("ocrx_word")
    assert [w.text for w in words] == " ".join(order).split()
    first = page.lines[0].words[0]
    assert words[0].bbox.left == pytest.approx(min(p[0] for p in first.poly))
    assert words[0].confidence == pytest.approx(0.9)
    classes = [ln.ocr_class for ln in tree.iter_by_class("ocr_line", "ocr_header", "ocr_footer")]
    assert classes[0] == "ocr_header" and classes[-1] == "ocr_footer"
    assert all(par.ocr_class == "ocr_par" for par in tree.children)


TOUCHING = ["Paper receipts remain common", "By Ada Lindqvist, Staff Writer"]


def touching_words_page():
    """Two lines whose word boxes run up to the next word (CTC word boxes meet in the middle
    of a narrow gap)."""
    s = Sheet(1000, 200)
    for y, text in zip((40, 120), TOUCHING, strict=True):
        s.put(30, y, text, size=40, words=True)
    for ln in s.lines:
        for a, b in zip(ln.words, ln.words[1:], strict=False):
            a.poly[1][0] = a.poly[2][0] = b.poly[0][0]  # this word's box ends where the next starts
    return s.page(dpi=144.0)


def rendered_lines(tree, tmp_path: Path) -> list[str]:
    """pdftotext's lines of the text layer OCRmyPDF's own renderer draws for the tree."""
    import ocrmypdf as omp
    from ocrmypdf.font import MultiFontManager
    from ocrmypdf.fpdf_renderer.renderer import Fpdf2PdfRenderer

    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext not installed (apt-get install poppler-utils)")
    out = tmp_path / "layer.pdf"
    fonts = MultiFontManager(Path(omp.__file__).parent / "data")
    Fpdf2PdfRenderer(page=tree, dpi=144.0, multi_font_manager=fonts, invisible_text=True).render(out)
    text = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def test_ocr_element_tree_keeps_spaces_between_touching_word_boxes(tmp_path):
    """OCRmyPDF's renderer fits each word's glyphs to its box, so words whose boxes touch met
    edge to edge and pdftotext copied them as one ("Paperreceipts", issue 20, first seen on a
    page turned by 270 degrees). The tree ends such a word a little early; its start stays."""
    from ocrforge.ocrmypdf_plugin import page_to_ocr_element

    page = touching_words_page()
    tree = page_to_ocr_element(page, 144.0, 0)
    words = tree.iter_by_class("ocrx_word")
    given = [wd for ln in page.lines for wd in ln.words]
    assert [w.bbox.left for w in words] == pytest.approx([min(p[0] for p in wd.poly) for wd in given])
    assert rendered_lines(tree, tmp_path) == TOUCHING


def test_engine_hocr_keeps_spaces_between_touching_word_boxes(tmp_path, monkeypatch):
    """The same on OCRmyPDF's hOCR path (generate_hocr, read back by its hOCR parser)."""
    from ocrmypdf.hocrtransform import HocrParser

    from ocrforge import ocrmypdf_plugin

    monkeypatch.setattr(ocrmypdf_plugin, "_read", lambda _: (touching_words_page(), 144.0))
    ocrmypdf_plugin.OcrforgeEngine().generate_hocr(tmp_path / "in.png", tmp_path / "p.hocr",
                                                   tmp_path / "p.txt", None)
    assert rendered_lines(HocrParser(tmp_path / "p.hocr").parse(), tmp_path) == TOUCHING


def test_engine_hocr_and_text_only_pdf_paths(tmp_path):
    """OCRmyPDF's older paths: generate_hocr (read back by its hOCR parser) and generate_pdf
    (a text-only page the size of the image, for the sandwich renderer)."""
    from ocrmypdf.hocrtransform import HocrParser

    from ocrforge.ocrmypdf_plugin import OcrforgeEngine

    img = tmp_path / "page.png"
    render_lines(["Hocr path 42", "光学字符"], size=40).image.save(img, dpi=(150, 150))
    eng = OcrforgeEngine()
    eng.generate_hocr(img, tmp_path / "p.hocr", tmp_path / "p.txt", None)
    tree = HocrParser(tmp_path / "p.hocr").parse()
    assert squash(" ".join(w.text for w in tree.iter_by_class("ocrx_word"))) == "Hocrpath42光学字符"
    assert squash((tmp_path / "p.txt").read_text()) == "Hocrpath42光学字符"
    eng.generate_pdf(img, tmp_path / "p.pdf", tmp_path / "p2.txt", None)
    page = pdfium.PdfDocument(tmp_path / "p.pdf")[0]
    w, h = Image.open(img).size
    assert page.get_size() == pytest.approx((w * 72 / 150, h * 72 / 150), abs=0.05)  # PNG stores dots/metre
    assert squash(page.get_textpage().get_text_range()) == "Hocrpath42光学字符"
    assert not any(obj.type == pdfium.raw.FPDF_PAGEOBJ_IMAGE for obj in page.get_objects())


def test_own_hocr_export_keeps_spaces_between_touching_word_boxes(tmp_path):
    """`ocrforge read -f hocr` output turned into a PDF by an hOCR-to-PDF tool (here OCRmyPDF's
    hOCR parser and renderer, which fit each word's glyphs to its box) keeps the word spaces."""
    from ocrmypdf.hocrtransform import HocrParser

    from ocrforge.io.exporters import export

    (tmp_path / "p.hocr").write_bytes(export([touching_words_page()], "hocr"))
    assert rendered_lines(HocrParser(tmp_path / "p.hocr").parse(), tmp_path) == TOUCHING
