"""Structure by default (issue 21): `ocrforge read` without flags reads columns in column order,
`-f markdown` gives headings and tables, `--no-layout` gives the raw lines."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import font_path
from PIL import Image, ImageDraw, ImageFont
from rapidfuzz import fuzz

from ocrforge.cli import main
from ocrforge.config import EngineConfig

WORDS = ("river stone paper market window garden letter morning silver number yellow "
         "station office summer winter bridge forest travel silent engine harbor velvet "
         "planet copper meadow lantern orange pencil rocket valley").split()


def _column_page(path, ncol: int, rows: int = 7) -> list[str]:
    """An English page of ``ncol`` columns of ``rows`` lines each under a title over all columns;
    returns its lines in reading order (title, then column by column)."""
    rng = np.random.default_rng(ncol)
    col_w, gutter, x0, y0, step = 330, 50, 30, 90, 34
    f = ImageFont.truetype(font_path(), 20)
    img = Image.new("RGB", (2 * x0 + ncol * col_w + (ncol - 1) * gutter, y0 + rows * step + 40), "white")
    d = ImageDraw.Draw(img)
    title = f"Notes On {ncol} Columns Of Running Text"
    d.text((x0, 24), title, font=ImageFont.truetype(font_path(), 30), fill="black")
    order = [title]
    for c in range(ncol):
        for r in range(rows):
            text = f"{c + 1}.{r + 1} " + " ".join(rng.choice(WORDS, 3, replace=False))
            d.text((x0 + c * (col_w + gutter), y0 + r * step), text, font=f, fill="black")
            order.append(text)
    img.save(path)
    return order


def _in_order(out_lines: list[str], truth: list[str]) -> float:
    """Share of the truth's lines read in order: each output line is matched to its closest
    truth line, then the longest increasing run of truth positions over the truth's length."""
    pos = []
    for ln in out_lines:
        if not ln.strip():
            continue
        scores = [fuzz.ratio(ln, t) for t in truth]
        k = int(np.argmax(scores))
        if scores[k] >= 70:
            pos.append(k)
    best: list[int] = []  # patience sorting: longest strictly increasing subsequence
    for p in pos:
        i = int(np.searchsorted(best, p))
        best[i:i + 1] = [p]
    return len(best) / len(truth)


def _read(capsys, *args: str) -> str:
    capsys.readouterr()
    assert main(["read", *args, "--no-progress"]) == 0
    return capsys.readouterr().out


def test_layout_is_on_by_default():
    assert EngineConfig().layout.enabled


@pytest.mark.parametrize("ncol", [2, 3])
def test_read_without_flags_reads_columns_in_order(tmp_path, capsys, ncol):
    path = tmp_path / f"cols{ncol}.png"
    truth = _column_page(path, ncol)
    out = _read(capsys, str(path)).split("\n")
    assert _in_order(out, truth) >= 0.95, out
    if ncol == 2:  # raw lines on request: the rows of both columns are joined, as before
        raw = _read(capsys, str(path), "--no-layout").split("\n")
        assert _in_order(raw, truth) < 0.8, raw


def _table_page(path) -> list[list[str]]:
    rows = [["Item", "Qty", "Price"], ["Apples", "3", "4.50"], ["Pears", "12", "9.80"], ["Plums", "7", "2.10"]]
    f = ImageFont.truetype(font_path(), 22)
    img = Image.new("RGB", (640, 360), "white")
    d = ImageDraw.Draw(img)
    d.text((30, 24), "Fruit Prices", font=ImageFont.truetype(font_path(), 40), fill="black")
    d.text((30, 86), "The table below lists the prices of this week.", font=f, fill="black")
    x0, y0, cw, rh = 30, 130, 180, 48
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            d.text((x0 + c * cw + 12, y0 + r * rh + 12), text, font=f, fill="black")
    for r in range(len(rows) + 1):
        d.line([(x0, y0 + r * rh), (x0 + 3 * cw, y0 + r * rh)], fill="black", width=2)
    for c in range(4):
        d.line([(x0 + c * cw, y0), (x0 + c * cw, y0 + len(rows) * rh)], fill="black", width=2)
    img.save(path)
    return rows


@pytest.mark.parametrize("flag", [[], ["--no-layout"]])
def test_markdown_has_headings_and_tables_without_a_flag(tmp_path, capsys, flag):
    # Markdown is made of blocks: it gets them whatever the layout flag says
    path = tmp_path / "table.png"
    rows = _table_page(path)
    md = _read(capsys, str(path), "-f", "markdown", *flag).split("\n")
    assert any(ln.startswith("#") and "Fruit Prices" in ln for ln in md), md
    table = [ln for ln in md if ln.startswith("|")]
    assert table[0].replace(" ", "") == "|" + "|".join(rows[0]) + "|", table
    assert len(table) == len(rows) + 1  # header, rule, 3 body rows


@pytest.mark.parametrize("fmt,table,cell", [("hocr", 'class="ocr_table"', 'class="ocr_par"'),
                                            ("alto", 'TYPE="table"', "<TextBlock")])
def test_table_keeps_its_cells_in_hocr_and_alto_without_a_flag(tmp_path, capsys, fmt, table, cell):
    path = tmp_path / "table.png"
    rows = _table_page(path)
    out = _read(capsys, str(path), "-f", fmt, "--no-layout")
    assert out.count(table) == 1, out
    inside = out.split(table, 1)[1]
    inside = inside.split("</div>\n   </div>" if fmt == "hocr" else "</ComposedBlock>", 1)[0]
    assert inside.count(cell) == sum(len(r) for r in rows), inside


def test_text_of_the_bundled_receipt_keeps_items_and_prices_on_one_line(capsys):
    # the README's first command: with blocks, the text format printed each price on a line of
    # its own under its item ("咖啡 Coffee x2" / "38.00"), while Page.text joined the row
    from pathlib import Path

    import ocrforge

    sample = Path(ocrforge.__file__).parent / "samples" / "sample.png"
    out = _read(capsys, str(sample)).split("\n")
    assert "咖啡 Coffee x2 38.00" in out and "Total 合计 64.50" in out, out
