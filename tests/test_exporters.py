"""Exporters (text, JSON, Markdown, hOCR, ALTO): registry, reading order, fallbacks without
blocks and words, hOCR read back, ALTO valid against the 4.4 schema, JSON round trip, CLI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from exportkit import plain_page, two_column_page

from ocrforge.io.exporters import EXPORTERS, export, get_exporter
from ocrforge.io.exporters.structure import page_text, split_line, words_of
from ocrforge.result import Line, Page

DATA = Path(__file__).parent / "data" / "alto"
XHTML = "{http://www.w3.org/1999/xhtml}"
ALTO = "{http://www.loc.gov/standards/alto/ns-v4#}"


def squash(s: str) -> str:
    return "".join(s.split())


def in_order(text: str, parts: list[str]) -> bool:
    """Every part occurs in text, each after the previous one."""
    at = 0
    for p in parts:
        at = text.find(p, at)
        if at < 0:
            return False
        at += len(p)
    return True


# ------------------------------------------------------------------ registry
def test_registry_formats_and_errors():
    assert list(EXPORTERS) == ["text", "json", "markdown", "hocr", "alto", "pdf"]
    assert {e.extension for e in EXPORTERS.values()} == {".txt", ".json", ".md", ".hocr", ".xml", ".pdf"}
    assert EXPORTERS["pdf"].needs_images and EXPORTERS["pdf"].multi_page and EXPORTERS["pdf"].binary
    assert not EXPORTERS["text"].needs_images and not EXPORTERS["text"].multi_page
    assert get_exporter("MD").name == "markdown"
    with pytest.raises(ValueError, match="unknown output format 'docx'.*text, json, markdown"):
        export([], "docx")
    page, _ = plain_page()
    with pytest.raises(ValueError, match="needs the page images"):
        export([page], "pdf")
    with pytest.raises(ValueError, match="1 pages but 0 page images"):
        export([page], "pdf", images=[])


# ------------------------------------------------------------------ words fallback
def test_line_split_into_words_proportionally():
    ln = Line("ab 光学 cd", [[0, 0], [160, 0], [160, 20], [0, 20]], 0.8)
    words = split_line(ln)
    assert [w.text for w in words] == ["ab", "光学", "cd"]
    # weights: a b _ 光 学 _ c d = 1 1 1 2 2 1 1 1 = 10 -> 16 px per unit
    assert [round(w.poly[0][0]) for w in words] == [0, 48, 128]
    assert [round(w.poly[1][0]) for w in words] == [32, 112, 160]
    assert all(w.score == 0.8 for w in words)
    one = Line("光学字符识别", [[0, 0], [60, 0], [60, 10], [0, 10]], 0.9)
    assert [w.text for w in words_of(one)] == ["光学字符识别"]
    assert words_of(Line("  ", [[0, 0], [1, 0], [1, 1], [0, 1]], 0.9)) == []
    # upside down (angle 180): the first word is at the right of the page-oriented box
    flipped = split_line(Line("ab cd", [[0, 0], [100, 0], [100, 20], [0, 20]], 0.8, angle=180))
    assert [w.text for w in flipped] == ["ab", "cd"]
    assert min(p[0] for p in flipped[0].poly) == 60 and max(p[0] for p in flipped[1].poly) == 40


# ------------------------------------------------------------------ text
def test_text_follows_blocks_and_falls_back_to_page_text():
    page, _, order = two_column_page()
    text = export([page], "text").decode()
    assert in_order(text, order), text
    assert not in_order(text, ["Right column one", "Left column two"])
    assert "Name\tQty\nApple\t3\n梨子\t12" in text
    plain, _ = plain_page()
    assert export([plain, plain], "text").decode() == plain.text + "\f" + plain.text + "\n"
    assert page_text(plain) == plain.text


# ------------------------------------------------------------------ JSON
def test_json_round_trips():
    page, _, _ = two_column_page()
    plain, _ = plain_page()
    one = export([page], "json")
    doc = json.loads(one)
    assert doc["schema"] == "ocrforge.page/1" and len(doc["lines"]) == len(page.lines)
    again = Page.from_dict(doc)
    assert [ln.text for ln in again.lines] == [ln.text for ln in page.lines]
    assert export([again], "json") == one
    both = json.loads(export([page, plain], "json"))
    assert isinstance(both, list) and [len(d["lines"]) for d in both] == [len(page.lines), 3]


# ------------------------------------------------------------------ Markdown
def test_markdown_headings_paragraphs_tables():
    page, _, _ = two_column_page()
    md = export([page], "markdown").decode()
    assert md.startswith("## Reading Order Matters\n\nLeft column one Left column two\n\n"
                         "Right column one Right column two\n\n"), md
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert table == ["| Name | Qty |", "| --- | --- |", "| Apple | 3 |", "| 梨子 | 12 |"]
    assert "Journal of Tests" not in md and "Page 7" not in md  # page furniture left out
    plain, _ = plain_page()
    md = export([plain, plain], "markdown").decode()
    first = md.split("\n\n---\n\n")[0]
    assert first.split("\n\n") == ["Hello ocrforge 2026 \\<&\\> \"quoted\"", "光学字符识别 引擎 测试",
                                   "Total: 1,234.56 \\| \\*stars\\* #1"]
    assert md.count("\n\n---\n\n") == 1


# ------------------------------------------------------------------ hOCR
def _hocr_words(root: ET.Element) -> list[tuple[str, list[int], int]]:
    out = []
    for span in root.iter(f"{XHTML}span"):
        if span.get("class") == "ocrx_word":
            props = dict(p.strip().split(" ", 1) for p in span.get("title").split(";"))
            out.append((span.text, [int(v) for v in props["bbox"].split()], int(props["x_wconf"])))
    return out


def test_hocr_structure_and_read_back():
    page, _, order = two_column_page()
    plain, _ = plain_page()
    data = export([page, plain], "hocr")
    root = ET.fromstring(data)  # strict XML
    metas = {m.get("name"): m.get("content") for m in root.iter(f"{XHTML}meta")}
    assert metas["ocr-system"].startswith("ocrforge ")
    assert {"ocr_page", "ocr_carea", "ocr_par", "ocr_line", "ocrx_word"} <= set(metas["ocr-capabilities"].split())
    pages = [d for d in root.iter(f"{XHTML}div") if d.get("class") == "ocr_page"]
    assert len(pages) == 2 and "bbox 0 0 1000 900" in pages[0].get("title")
    assert "ppageno 1" in pages[1].get("title")
    # every word sits in a line in a paragraph (the nesting hOCR readers rely on)
    for p in pages:
        for par in p.iter(f"{XHTML}p"):
            assert par.get("class") == "ocr_par"
            for line in par:
                assert line.get("class") in ("ocr_line", "ocr_header", "ocr_footer", "ocr_caption")
                assert all(w.get("class") == "ocrx_word" for w in line)
    words = _hocr_words(pages[0])
    assert " ".join(w[0] for w in words) == " ".join(order)
    assert words[0] == ("Journal", [int(v) for v in _round_box(page.lines[0].words[0].poly)], 90)
    classes = [s.get("class") for s in pages[0].iter(f"{XHTML}span") if s.get("class") != "ocrx_word"]
    assert classes[0] == "ocr_header" and classes[-1] == "ocr_footer"
    assert any(d.get("class") == "ocr_table" for d in pages[0].iter(f"{XHTML}div"))
    # the fallback page: one word per whitespace token, XML special characters intact
    assert [w[0] for w in _hocr_words(pages[1])][:5] == ["Hello", "ocrforge", "2026", "<&>", '"quoted"']


def _round_box(poly):
    import math
    xs, ys = [p[0] for p in poly], [p[1] for p in poly]
    return [math.floor(min(xs)), math.floor(min(ys)), math.ceil(max(xs)), math.ceil(max(ys))]


def test_hocr_read_by_ocrmypdf(tmp_path):
    hocrtransform = pytest.importorskip("ocrmypdf.hocrtransform")
    page, _, order = two_column_page()
    f = tmp_path / "p.hocr"
    f.write_bytes(export([page], "hocr"))
    tree = hocrtransform.HocrParser(f).parse()
    words = tree.iter_by_class("ocrx_word")
    assert [w.text for w in words] == " ".join(order).split()
    assert tree.bbox.right == 1000 and tree.bbox.bottom == 900
    first = page.lines[0].words[0]
    assert (words[0].bbox.left, words[0].bbox.top) == tuple(_round_box(first.poly)[:2])
    assert words[0].confidence == pytest.approx(0.9)
    lines = tree.iter_by_class("ocr_line", "ocr_header", "ocr_footer")
    assert len(lines) == len(page.lines)


# ------------------------------------------------------------------ ALTO
@pytest.fixture(scope="module")
def alto_schema():
    etree = pytest.importorskip("lxml.etree")
    if not (DATA / "alto-4-4.xsd").is_file():
        pytest.skip("ALTO schema not in tests/data/alto")

    class Offline(etree.Resolver):
        def resolve(self, url, pubid, context):
            if url.endswith("/xlink.xsd"):
                return self.resolve_filename(str(DATA / "xlink-loc.xsd"), context)
            return None

    parser = etree.XMLParser(no_network=True)
    parser.resolvers.add(Offline())
    return etree.XMLSchema(etree.parse(str(DATA / "alto-4-4.xsd"), parser))


def test_alto_validates_against_the_schema(alto_schema):
    from lxml import etree

    page, _, order = two_column_page()
    plain, _ = plain_page()
    for pages in ([page], [plain], [page, plain], [Page([], 10, 10, "empty.png")]):
        doc = etree.fromstring(export(pages, "alto"))
        assert alto_schema.validate(doc), alto_schema.error_log
    doc = etree.fromstring(export([page, plain], "alto"))
    strings = doc.findall(f".//{ALTO}Page[1]//{ALTO}String")
    assert " ".join(s.get("CONTENT") for s in strings) == " ".join(order)
    assert doc.find(f".//{ALTO}ComposedBlock[@TYPE='table']") is not None
    tags = {t.get("ID"): t.get("LABEL") for t in doc.iter(f"{ALTO}LayoutTag")}
    assert set(tags.values()) == {"header", "title", "table", "figure", "footer"}
    first = strings[0]
    assert first.get("WC") == "0.900" and float(first.get("HPOS")) == pytest.approx(page.lines[0].words[0].poly[0][0], abs=1)
    # the check can fail: a String without its required CONTENT is rejected
    del first.attrib["CONTENT"]
    assert not alto_schema.validate(doc)


# ------------------------------------------------------------------ CLI
def test_cli_read_formats_into_a_folder(tmp_path):
    from conftest import render_lines

    from ocrforge.cli import main

    img = render_lines(["Export folder test 42"], size=36).image
    img.save(tmp_path / "a.png")
    other = render_lines(["Second page 77"], size=36).image
    img.save(tmp_path / "doc.pdf", save_all=True, append_images=[other], resolution=100)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["read", str(tmp_path / "a.png"), str(tmp_path / "doc.pdf"), "-f", "hocr",
               "-o", str(out) + "/", "--no-progress"])
    assert rc == 0  # (single-page formats keep one file per page: test_read_into_output_folder)
    assert sorted(p.name for p in out.iterdir()) == ["a.hocr", "doc.hocr"]
    root = ET.fromstring((out / "doc.hocr").read_bytes())
    pages = [d for d in root.iter(f"{XHTML}div") if d.get("class") == "ocr_page"]
    assert len(pages) == 2  # one multi-page file per input document
    assert "Second page" in " ".join(w[0] for w in _hocr_words(pages[1]))
    assert squash(" ".join(w[0] for w in _hocr_words(ET.fromstring((out / "a.hocr").read_bytes())))).lower() == "exportfoldertest42"
