"""Issue 14 item 11: a tight crop of one word reads as that word, not as nothing.

Zero-margin crops of one rendered word: the detector finds no box in them, so before the
crop fallback (``rec.crop_fallback``) the page came back empty.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import font_path
from PIL import Image, ImageDraw, ImageFont

from ocrforge import OCR
from ocrforge.core import looks_like_crop


def tight_crop(word: str, size: int) -> np.ndarray:
    """BGR crop of a rendered word cut at its ink, no margin (what a word-box export gives)."""
    font = ImageFont.truetype(font_path(), size)
    img = Image.new("RGB", (size * len(word) + 40, size * 2 + 40), "white")
    ImageDraw.Draw(img).text((20, 20), word, font=font, fill="black")
    ink = np.asarray(img.convert("L")) < 128
    ys, xs = np.where(ink)
    crop = img.crop((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
    return np.asarray(crop)[:, :, ::-1].copy()


@pytest.fixture(scope="module")
def no_fallback():
    return OCR(crop_fallback=False)


@pytest.mark.parametrize(("word", "size", "turn"), [
    ("Coffee", 16, 0),    # 47 x 10 px
    ("AB12CD", 16, 0),
    ("收据", 80, 0),       # a large tight crop: 144 x 73 px
    ("Coffee", 24, 3),    # tall: the word turned 90 degrees clockwise, 16 x 69 px
])
def test_tight_word_crop_reads_as_the_word(engine, no_fallback, word, size, turn):
    crop = np.ascontiguousarray(np.rot90(tight_crop(word, size), turn))
    assert no_fallback.read(crop).text == "", "the detector alone finds this crop: not a fallback case"
    page = engine.read(crop)
    assert page.text == word
    h, w = crop.shape[:2]
    assert len(page.lines) == 1 and page.lines[0].poly == [[0, 0], [w, 0], [w, h], [0, h]]


def test_pages_keep_their_detected_lines(engine):
    assert not looks_like_crop(600, 800, 0) and not looks_like_crop(400, 300, 5)
    assert looks_like_crop(20, 60, 3) and looks_like_crop(200, 200, 0)



@pytest.mark.parametrize("fallback", [True, False])
def test_the_gpu_scheduler_plans_a_lineless_crop_as_one_whole_line(fallback):
    """The GPU scheduler decides the fallback in its contour workers (GpuScheduler.plan_lines),
    as the CPU path does after detection. (Its page buckets pad small inputs, so on the tight
    crops above its detector finds the word itself: the decision is tested directly.)"""
    from ocrforge.scheduling.gpu import GpuPage

    gs = OCR(runtime="torch", device="cpu", crop_fallback=fallback).gpu_scheduler()
    crop, page = GpuPage(0, "crop", 0, h=10, w=47), GpuPage(1, "page", 0, h=600, w=800)
    for p in (crop, page):
        gs.plan_lines(p)
    assert page.plan is None and not page.whole
    if not fallback:
        assert crop.plan is None and not crop.quads
        return
    assert crop.whole and crop.quads[0].tolist() == [[0, 0], [47, 0], [47, 10], [0, 10]]
    assert [g.lines.tolist() for g in crop.plan.groups] == [[0]]
    assert crop.plan.tws.tolist() == [gs.runner.rec_prep.text_width(10, 47)]
