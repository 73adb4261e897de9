"""Layout stage: rows that follow the skew, reading order of multi-column pages, blocks, JSON."""

from __future__ import annotations

import io
import json
import random

import cv2
import numpy as np
import pytest
from conftest import font_path, render_lines, to_bgr
from PIL import Image, ImageDraw, ImageFont
from test_words import layout_on

from ocrforge.evaluation.metrics import kendall_tau
from ocrforge.evaluation.synth import render_page
from ocrforge.layout import analyze
from ocrforge.result import Line, Page


def _skew(img: np.ndarray, deg: float) -> np.ndarray:
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), deg, 1.0)
    cos, sin = abs(m[0, 0]), abs(m[0, 1])
    nw, nh = int(h * sin + w * cos), int(h * cos + w * sin)
    m[0, 2] += nw / 2 - w / 2
    m[1, 2] += nh / 2 - h / 2
    return cv2.warpAffine(img, m, (nw, nh), borderValue=(255, 255, 255))


def _truth_page(kind: str, seed: int, index: int = 0, shuffle: bool = True):
    """A synthetic page's labeled lines as a Page (shuffled), its image and its record."""
    data, _, rec = render_page(seed, index, kind=kind, lang="en" if seed % 2 else "zh", clean=True)
    lines = [Line(ln["text"], ln["poly"], 1.0) for ln in rec["lines"]]
    for k, ln in enumerate(lines):
        ln.truth = k  # position in the true reading order
    order = list(range(len(lines)))
    if shuffle:
        random.Random(seed).shuffle(order)
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return Page([lines[i] for i in order], rec["width"], rec["height"]), image, rec


# ------------------------------------------------------------------------------- rows (item 9)
SKEW_LINES = ["The first line of a skewed page is long enough to matter here",
              "A second line follows right below it with more words in it",
              "And the third line ends this small paragraph of text now"]


@pytest.mark.parametrize("deg", [7, 12])
def test_skewed_page_text_keeps_its_lines(engine, deg):
    # before rows followed the line direction, a 7 degree skew joined these three lines into one
    r = render_lines(SKEW_LINES, size=24, gap=0.5)
    page = engine.read(_skew(to_bgr(r.image), deg))
    assert len(page.lines) == 3
    assert page.text.split("\n") == SKEW_LINES, page.text
    analyze(page)
    assert page.text.split("\n") == SKEW_LINES


def test_row_of_a_skewed_page_joins_its_parts():
    # two boxes on one skewed row (item and price) are still one text line; the next row is not
    def quad(x0, x1, y, angle=0.1):
        t = np.tan(angle)
        return [[x0, y + x0 * t], [x1, y + x1 * t], [x1, y + 20 + x1 * t], [x0, y + 20 + x0 * t]]
    page = Page([Line("Coffee", quad(10, 300, 0), 1.0), Line("3.50", quad(500, 560, 0), 1.0),
                 Line("Tea", quad(10, 300, 40), 1.0)], 600, 200)
    assert page.text == "Coffee 3.50\nTea"


# ------------------------------------------------------------------------------- reading order
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_reading_order_of_generated_column_pages(seed):
    page, image, rec = _truth_page("columns", seed)
    analyze(page, image=image)
    got = [ln.truth for ln in page.lines]
    assert sorted(got) == list(range(len(rec["lines"])))  # nothing lost or duplicated
    assert kendall_tau(got) >= 0.97, got


def test_single_column_document_order_unchanged():
    for seed in (5, 6):
        page, image, _ = _truth_page("document", seed)
        analyze(page, image=image)
        assert [ln.truth for ln in page.lines] == sorted(ln.truth for ln in page.lines)


def test_receipt_rows_are_not_read_as_columns():
    # item names on the left, prices on the right: read row by row
    items = [("Coffee beans 500 g", "12.90"), ("Whole milk", "1.20"), ("Bread roll", "0.45"),
             ("Green tea", "3.10"), ("Butter", "2.35"), ("TOTAL", "20.00")]
    lines = []
    for k, (name, price) in enumerate(items):
        y = 40 + 30 * k
        lines.append(Line(name, [[20, y], [20 + 11 * len(name), y], [20 + 11 * len(name), y + 20], [20, y + 20]], 1.0))
        lines.append(Line(price, [[330, y], [380, y], [380, y + 20], [330, y + 20]], 1.0))
    page = Page(list(reversed(lines)), 400, 260)
    analyze(page)
    assert page.text.split("\n") == [f"{n} {p}" for n, p in items]


def test_receipt_totals_with_long_labels_are_rows_not_a_sidebar():
    # dev page sroie_351 at its own resolution: a few labels of 12+ line heights made the label
    # side look like running text, and the prices beside it were read as a column after it
    h = 25
    labels = ["Total Qty: 39.00", "Total Sales (Excluding GST)", "Discount", "Total GST",
              "Rounding", "Total Sales (Inclusive of GST) :", "{4553 8800 9593 0119} VISA :",
              "Change :", "Thank you", "Please come again"]
    widths = [6.0, 12.5, 3.4, 4.2, 3.6, 13.1, 12.4, 3.2, 4.0, 6.5]
    prices = ["616.59", "616.59", "0.00", "0.00", "0.01", "616.60", "616.60", "0.00"]
    lines = []
    for k, (text, w) in enumerate(zip(labels, widths, strict=True)):
        y = 40 + 36 * k
        x1 = 20 + w * h
        lines.append(Line(text, [[20, y], [x1, y], [x1, y + h], [20, y + h]], 1.0))
        if k < len(prices):
            lines.append(Line(prices[k], [[400, y], [470, y], [470, y + h], [400, y + h]], 1.0))
    page = Page(list(reversed(lines)), 500, 440)
    analyze(page)
    assert page.text.split("\n")[:8] == [f"{t} {p}" for t, p in zip(labels, prices, strict=False)]


def test_a_menu_left_of_content_stays_a_column_when_its_rows_line_up():
    # held-out synth 90124 page 157: menu items on the left shared rows with the content by
    # chance; amounts pair with labels only on the right of them
    h = 24
    menu = ["Open file", "Close", "Favorites", "Reports", "More", "Send", "Messages"]
    content = ["A short summary appears at the top of every chapter of this book.",
               "Read the instructions before operating the machine in the hall.",
               "The new app supports two platforms and syncs every night.",
               "Reports are sent to every member of the team each Monday.",
               "Messages older than a year are moved to the archive.",
               "Favorites keep the pages you open most often at hand.",
               "Send a copy to yourself before you close the window."]
    lines = []
    for k, (m, c) in enumerate(zip(menu, content, strict=True)):
        y = 40 + 40 * k
        lines.append(Line(m, [[20, y], [20 + 3 * h, y], [20 + 3 * h, y + h], [20, y + h]], 1.0))
        x1 = 200 + 20 * h
        lines.append(Line(c, [[200, y], [x1, y], [x1, y + h], [200, y + h]], 1.0))
    page = Page(list(reversed(lines)), 720, 340)
    analyze(page)
    assert page.text.split("\n") == menu + content


def test_two_column_page_read_end_to_end(engine):
    left = ["Columns are read one", "after the other, from", "top to bottom, left", "column first of all."]
    right = ["The right column comes", "only after the left", "one has been read to", "its very last line."]
    f = ImageFont.truetype(font_path(), 22)
    img = Image.new("RGB", (760, 260), "white")
    d = ImageDraw.Draw(img)
    d.text((30, 20), "A Title Across Both Columns Of This Page", font=ImageFont.truetype(font_path(), 30), fill="black")
    for k, (a, b) in enumerate(zip(left, right, strict=True)):
        d.text((30, 80 + 36 * k), a, font=f, fill="black")
        d.text((400, 80 + 36 * k), b, font=f, fill="black")
    with layout_on(engine):
        page = engine.read(img)
    assert page.text.split("\n") == ["A Title Across Both Columns Of This Page", *left, *right], page.text
    kinds = [b.kind for b in page.blocks]
    assert kinds[0] == "title" and kinds.count("paragraph") == 2, kinds


# ------------------------------------------------------------------------------- blocks, JSON
def test_a_title_is_found_by_its_font_size_when_its_box_is_barely_taller():
    """Detected boxes of small print are padded, so a heading in a font twice the body's can
    come out only ~1.25x as tall as a body line (seen on `ocrforge synth` column pages): the
    title is judged by its characters' size (box length / typical advances) too."""
    body = "This paragraph is set in the small body font of the page"
    lines = [Line("Results And Discussion", [[20, 10], [560, 10], [560, 48], [20, 48]], 1.0)]
    for k in range(4):
        y = 70 + 36 * k
        lines.append(Line(body, [[20, y], [620, y], [620, y + 30], [20, y + 30]], 1.0))
    page = Page(lines, 700, 240)
    analyze(page)
    assert [b.kind for b in page.blocks] == ["title", "paragraph"], page.blocks


def test_blocks_cover_every_line_once_and_json_round_trips():
    page, image, rec = _truth_page("columns", 3)
    analyze(page, image=image)
    covered = sorted(i for b in page.blocks for i in b.lines)
    assert covered == list(range(len(page.lines)))
    kinds = {b.kind for b in page.blocks}
    assert {"title", "paragraph"} <= kinds
    for b in page.blocks:  # block boxes hold their lines
        x0, y0, x1, y1 = b.bbox
        for i in b.lines:
            lx0, ly0, lx1, ly1 = page.lines[i].bbox
            assert lx0 >= x0 - 2 and ly0 >= y0 - 2 and lx1 <= x1 + 2 and ly1 <= y1 + 2
    d = json.loads(page.to_json())
    back = Page.from_dict(d)
    assert back.to_dict() == d
    assert [b.kind for b in back.blocks] == [b.kind for b in page.blocks]


def test_header_and_footer_blocks():
    lines = [Line("Journal of Things", [[40, 20], [240, 20], [240, 36], [40, 36]], 1.0),
             Line("17", [[740, 20], [760, 20], [760, 36], [740, 36]], 1.0)]
    for k in range(8):
        y = 120 + 26 * k
        lines.append(Line(f"Body line number {k} of the page", [[40, y], [700, y], [700, y + 18], [40, y + 18]], 1.0))
    lines.append(Line("Page 17 of 20", [[340, 980], [460, 980], [460, 996], [340, 996]], 1.0))
    page = Page(lines[::-1], 800, 1000)
    analyze(page)
    assert [b.kind for b in page.blocks] == ["header", "paragraph", "footer"]
    assert page.lines[0].text == "Journal of Things" and page.lines[-1].text == "Page 17 of 20"


def test_analyze_without_lines_or_with_bad_steps():
    empty = Page([], 100, 100)
    assert analyze(empty).blocks == []
    page = Page([Line("a", [[0, 0], [9, 0], [9, 9], [0, 9]], 1.0)], 10, 10)
    with pytest.raises(ValueError, match="steps"):
        analyze(page, steps=[])


def test_columns_synth_labels_list_reading_order_and_tables():
    data, ext, rec = render_page(11, 0, kind="columns", lang="en", clean=True)
    again = render_page(11, 0, kind="columns", lang="en", clean=True)
    assert again[0] == data  # deterministic
    assert rec["reading_order"] is True and isinstance(rec["tables"], list)
    Image.open(io.BytesIO(data)).verify()
    assert len(rec["lines"]) > 20


def test_page_turned_by_90_degrees_reads_its_vertical_lines_in_order():
    # a page turned clockwise: lines stand upright, read top to bottom, the first at the right
    page, _, rec = _truth_page("document", 6, shuffle=True)
    height = rec["height"]
    for ln in page.lines:
        pts = [(height - y, x) for x, y in ln.poly]  # turn clockwise
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ln.poly = [[min(xs), min(ys)], [max(xs), min(ys)], [max(xs), max(ys)], [min(xs), max(ys)]]
    page.width, page.height = rec["height"], rec["width"]
    analyze(page)
    got = [ln.truth for ln in page.lines]
    assert kendall_tau(got) >= 0.97, got


def test_one_reading_order_raw_lines_top_to_bottom_whatever_the_decode_order(engine):
    # reading order lives in layout/ only; with the layout stage off the runner still puts the
    # lines of any scheduler (the GPU's DB workers decode in contour order) top to bottom
    from types import SimpleNamespace

    from ocrforge.config import ReadOptions
    from ocrforge.stages import detect

    assert not hasattr(detect, "sort_reading_order")

    def quad(x, y):
        return np.array([[x, y], [x + 80, y], [x + 80, y + 20], [x, y + 20]], np.float32)

    runner = engine.runner
    s = runner.settings(ReadOptions(layout=False))
    page = runner.assemble(SimpleNamespace(source="x", index=0, width=400, height=300),
                           [quad(10, 200), quad(200, 12), quad(10, 10), quad(10, 100)],
                           [("d", 0.9), ("b", 0.9), ("a", 0.9), ("c", 0.9)], [0] * 4, s, {})
    assert [ln.text for ln in page.lines] == ["a", "b", "c", "d"]


def test_small_median_is_numpys_median():
    """Layout's medians of a few values (small_stats.small_median) replace np.median: same
    float for ints, floats, odd and even counts; nan for none."""
    import math

    import numpy as np

    from ocrforge.layout.small_stats import small_median

    rng = np.random.default_rng(11)
    for _ in range(2000):
        n = int(rng.integers(1, 40))
        a = rng.integers(-50, 50, n) if rng.random() < 0.5 else rng.normal(0, 30, n)
        for b in (a, a.astype(np.float32), list(a)):
            assert small_median(b) == float(np.median(b))
    assert math.isnan(small_median([]))
