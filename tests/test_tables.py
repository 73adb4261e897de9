"""Tables: ruled grids from the image, unruled ones from aligned columns, Markdown and HTML."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import font_path
from PIL import Image, ImageDraw, ImageFont
from test_words import layout_on

from ocrforge.evaluation.metrics import cell_f1
from ocrforge.evaluation.synth import render_page
from ocrforge.layout import analyze, table_to_html, table_to_markdown
from ocrforge.result import Cell, Line, Page, Table


def _synth_tables(seed: int, ruled: bool):
    """The first page of kind "tables" (seeds searched from ``seed``) whose first table is ruled
    (or not), as a Page of its labeled lines, its image and its record."""
    for s in range(seed, seed + 40):
        data, _, rec = render_page(s, 0, kind="tables", lang="en" if s % 2 else "zh", clean=True)
        if rec["tables"] and rec["tables"][0]["ruled"] == ruled:
            break
    else:
        raise AssertionError("no such synthetic page")
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    lines = [Line(ln["text"], ln["poly"], 1.0) for ln in rec["lines"]]
    return Page(lines[::-1], rec["width"], rec["height"]), image, rec


def _found_tables(page: Page) -> list[Table]:
    return [b.table for b in page.blocks if b.kind == "table" and b.table is not None]


@pytest.mark.parametrize("ruled", [True, False])
def test_synthetic_tables_found_with_their_shape_and_cells(ruled):
    page, image, rec = _synth_tables(20, ruled)
    analyze(page, image=image)
    found = _found_tables(page)
    assert len(found) == len(rec["tables"]), [(t.rows, t.cols) for t in found]
    for t, ref in zip(found, rec["tables"], strict=True):
        assert (t.rows, t.cols) == (ref["rows"], ref["cols"])
        hit, n_ref, n_hyp = cell_f1([(c["row"], c["col"], c["text"]) for c in ref["cells"]],
                                    [(c.row, c.col, c.text) for c in t.cells])
        assert hit == n_ref == n_hyp
        md = table_to_markdown(t, page).split("\n")
        assert len(md) == t.rows + 1 and all(row.count("|") == t.cols + 1 for row in md)
    if ruled:
        assert found[0].ruled


def test_ruled_table_needs_the_image():
    page, image, rec = _synth_tables(20, True)
    analyze(page)  # no image: only tables made of aligned columns can be found
    assert all(not t.ruled for t in _found_tables(page))


def test_ruled_table_read_end_to_end(engine):
    rows = [["Item", "Qty", "Price"], ["Apples", "3", "4.50"], ["Pears", "12", "9.80"], ["Plums", "7", "2.10"]]
    f = ImageFont.truetype(font_path(), 22)
    img = Image.new("RGB", (620, 260), "white")
    d = ImageDraw.Draw(img)
    x0, y0, cw, rh = 30, 30, 180, 48
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            d.text((x0 + c * cw + 12, y0 + r * rh + 12), text, font=f, fill="black")
    for r in range(len(rows) + 1):
        d.line([(x0, y0 + r * rh), (x0 + 3 * cw, y0 + r * rh)], fill="black", width=2)
    for c in range(4):
        d.line([(x0 + c * cw, y0), (x0 + c * cw, y0 + len(rows) * rh)], fill="black", width=2)
    with layout_on(engine):
        page = engine.read(img)
    (t,) = _found_tables(page)
    assert (t.rows, t.cols, t.ruled) == (4, 3, True)
    hit, n_ref, n_hyp = cell_f1([(r, c, text) for r, row in enumerate(rows) for c, text in enumerate(row)],
                                [(c.row, c.col, c.text) for c in t.cells])
    assert 2 * hit / (n_ref + n_hyp) >= 0.9
    assert table_to_markdown(t, page).split("\n")[0] == "| Item | Qty | Price |"


def test_markdown_and_html_rendering():
    t = Table(3, 3, [Cell(0, 0, (0, 0, 1, 1), text="Name"), Cell(0, 1, (0, 0, 1, 1), text="A|B"),
                     Cell(0, 2, (0, 0, 1, 1), text="<x>"), Cell(1, 0, (0, 0, 1, 1), text="wide", colspan=2),
                     Cell(1, 2, (0, 0, 1, 1), text="1"), Cell(2, 0, (0, 0, 1, 1), lines=[0]),
                     Cell(2, 1, (0, 0, 1, 1)), Cell(2, 2, (0, 0, 1, 1), text="2")])
    page = Page([Line("from line", [[0, 0], [1, 0], [1, 1], [0, 1]], 1.0)], 10, 10)
    md = table_to_markdown(t, page).split("\n")
    assert md == ["| Name | A\\|B | <x> |", "| --- | --- | --- |", "| wide |  | 1 |", "| from line |  | 2 |"]
    html = table_to_html(t, page)
    assert "<th>&lt;x&gt;</th>" in html and '<td colspan="2">wide</td>' in html
    assert html.count("<tr>") == 3 and "<td>from line</td>" in html
    assert table_to_markdown(Table(0, 0)) == ""


def test_a_ruled_row_rule_broken_into_pieces_still_splits_the_rows():
    """A rule faded in places (blur, low contrast, JPEG) comes out of the binarised page as
    collinear pieces, none half the grid's width; together they are one rule (seed 100 of
    ``synth --kind tables``: two rows read as one, every cell below shifted)."""
    from ocrforge.layout.tables import find_ruled_grids

    img = np.full((300, 720, 3), 255, np.uint8)
    x0, x1, ys, xs = 20, 700, [20, 60, 100, 140, 180, 220], [20, 190, 360, 530, 700]
    for k, y in enumerate(ys):
        if k == 3:  # three pieces 8 px apart, stepping down one pixel each (a slight skew)
            for j, (a, b) in enumerate([(x0, 240), (248, 470), (478, x1)]):
                cv2.line(img, (a, y + j), (b, y + j), (0, 0, 0), 1)
        else:
            cv2.line(img, (x0, y), (x1, y), (0, 0, 0), 1)
    for x in xs:
        cv2.line(img, (x, ys[0]), (x, ys[-1]), (0, 0, 0), 1)
    (grid,) = find_ruled_grids(img, 0.0, 16.0)
    assert len(grid.ys) == len(ys) and len(grid.xs) == len(xs), (grid.ys, grid.xs)


def test_an_unruled_header_row_with_one_cell_found_stays_in_its_table():
    """When detection finds only one cell of an unruled table's header (faint bold text), that
    row is no table row by itself; it still heads the table: directly above it at the rows'
    pitch, its text inside one column (seed 100 of ``synth --kind tables``: the header fell into
    the paragraph above and every row moved up one)."""
    page, image, rec = _synth_tables(20, False)
    ref = rec["tables"][0]
    header = [c["text"] for c in ref["cells"] if c["row"] == 0]
    page.lines = [ln for ln in page.lines if ln.text not in header[1:]]
    analyze(page)
    t = _found_tables(page)[0]
    assert (t.rows, t.cols) == (ref["rows"], ref["cols"])
    hit, n_ref, _ = cell_f1([(c["row"], c["col"], c["text"]) for c in ref["cells"]],
                            [(c.row, c.col, c.text) for c in t.cells])
    assert hit == n_ref - (len(header) - 1)


def test_a_heading_in_large_type_is_no_ruled_table():
    """The strokes of large letters line up like the pieces of a broken rule; a newspaper's
    section title (white type on a grey box, the dev set's newspaper) must not become a grid."""
    from ocrforge.layout.tables import find_ruled_grids

    img = Image.new("RGB", (300, 60), "white")
    d = ImageDraw.Draw(img)
    d.rectangle([50, 4, 240, 44], fill=(128, 128, 128))
    d.text((58, 2), "EE EE EE", font=ImageFont.truetype(font_path(), 34), fill="white")
    image = cv2.cvtColor(np.asarray(img), cv2.COLOR_RGB2BGR)
    assert find_ruled_grids(image, 0.0, 10.0) == []


def test_a_sidebar_item_above_a_table_of_sidebar_and_pane_is_no_header():
    """A screenshot's side menu (items at one pitch) beside buttons in the pane can line up as
    a table; the menu item above it continues the menu, it is no header (the line above it sits
    at the same pitch), so the table does not grow upwards."""
    lines = []

    def add(text: str, x: float, y: float, w: float) -> None:
        lines.append(Line(text, [[x, y], [x + w, y], [x + w, y + 16], [x, y + 16]], 1.0))

    for k in range(12):
        add(f"Menu{k}", 10, 20 + 30 * k, 60)
    for k in range(4):
        add(f"Save{k}", 200, 200 + 30 * k, 50)
        add(f"Open{k}", 330, 200 + 30 * k, 50)
    page = Page(lines, 600, 420)
    analyze(page)
    tops = [b.bbox[1] for b in page.blocks if b.table is not None]
    assert tops and min(tops) >= 195, tops


def test_answer_choices_in_two_page_columns_are_no_table():
    """A textbook page in two columns (the dev set's ``omni_jiaocaineedrop_Chapter9.pdf_46``):
    the answer choices of one exercise in each column (``F 1/10  H 3/10``) sit at about the same
    height, so rows of the two columns join and a false 3 x 5 table spans the page's gutter,
    taking the choices out of their exercises' order. Stand-in boxes of that page: running text
    above and below in each column, nothing crossing the gutter."""
    lines = []

    def add(text: str, x: float, y: float, w: float, h: float = 34) -> None:
        lines.append(Line(text, [[x, y], [x + w, y], [x + w, y + h], [x, y + h]], 1.0))

    for k, y in enumerate([1225, 1268]):
        add(f"2. A cake is cut into ten equal pieces and line {k} of it", 125, y, 575)
    for k, y in enumerate([1060, 1103]):
        add(f"6. The table shows the number of bills line {k}", 861, y, 600)
    for letter, x, y, num, den in [("F", 183, 1345, "1", "10"), ("H", 475, 1350, "3", "10"),
                                   ("G", 183, 1433, "1", "5"), ("J", 475, 1435, "2", "5")]:
        add(letter, x, y, 28)
        add(num, x + 48, y - 14, 28, 31)
        add(den, x + 48, y + 18, 28, 33)
    for letter, x, y, num, den in [("F", 876, 1440, "5", "22"), ("H", 1163, 1439, "5", "11"),
                                   ("G", 877, 1511, "3", "11"), ("J", 1169, 1511, "8", "11")]:
        add(letter, x, y, 28)
        add(num, x + 53, y - 13, 29, 31)
        add(den, x + 45, y + 21, 46, 33)
    for k, y in enumerate([1562, 1604, 1647]):
        add(f"3. Natalie has washed the dishes line {k}", 125 + (k > 0) * 42, y, 590 - (k > 0) * 42)
    for k, y in enumerate([1612, 1656, 1699]):
        add(f"7. Clarence bought a can of nuts line {k}", 817 + (k > 0) * 44, y, 650)
    page = Page(lines, 1700, 2178)
    analyze(page)
    tables = [(b.table.rows, b.table.cols) for b in page.blocks if b.table is not None]
    assert tables == [], tables
    # column order: the whole left column (its choices among its text), then the right one
    sides = [ln.poly[0][0] > 800 for ln in page.lines]
    assert sides == sorted(sides), [ln.text for ln in page.lines]
