"""Words from CTC time steps: character steps, missing spaces, word boxes on the page."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from conftest import font_path
from PIL import Image, ImageDraw, ImageFont

from ocrforge.layout.words import SpaceRule, char_class, missing_spaces, segment_quad, split_words
from ocrforge.result import Line, Page, Word
from ocrforge.stages.recognize import CharSteps, CTCDecoder


@contextlib.contextmanager
def layout_on(engine, **options):
    """The shared engine with the layout stage switched on for the duration."""
    old = engine.layout
    engine.layout = options
    try:
        yield engine
    finally:
        engine.layout = old


def _line_image(text: str, size: int, font: str | None = None, tracking: float = 0.0):
    """One line of black text on white; returns the image and each space-separated word's ink
    x-range (from the font's metrics)."""
    f = ImageFont.truetype(font or font_path(), size)
    x0, y0 = 30, 30
    width = int(f.getlength(text) + tracking * size * len(text)) + 2 * x0
    img = Image.new("RGB", (width, size * 2 + 2 * y0), "white")
    d = ImageDraw.Draw(img)
    x = float(x0)
    inks: list[tuple[float, float]] = []
    start = None
    for c in text:
        if c != " ":
            bb = f.getbbox(c)
            d.text((x, y0), c, font=f, fill="black")
            lo, hi = x + bb[0], x + bb[2]
            start = lo if start is None else start
            end = hi
        elif start is not None:
            inks.append((start, end))
            start = None
        x += f.getlength(c) + tracking * size
    if start is not None:
        inks.append((start, end))
    return img, inks


# ------------------------------------------------------------------------------- CTC steps
def test_collapse_steps_agrees_with_collapse():
    chars = ["<blank>", *"abc中文 "]
    dec = CTCDecoder(chars)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(chars), (6, 40))
    idx[:, ::3] = 0  # blanks between runs
    idx[2] = 0  # an empty line
    conf = rng.uniform(0.5, 1.0, idx.shape).astype(np.float32)
    plain = dec.collapse(idx.copy(), conf)
    steps = dec.collapse_steps(idx.copy(), conf)
    for (text, score), st, row in zip(plain, steps, idx, strict=True):
        assert st.text == text and st.score == score
        assert len(st.start) == len(st.end) == len(st.conf) == len(text)
        for k, c in enumerate(text):
            run = row[st.start[k] : st.end[k] + 1]
            assert (run == chars.index(c)).all()  # one argmax run per character
            assert st.end[k] + 1 == len(row) or row[st.end[k] + 1] != row[st.start[k]]
        assert list(st.start) == sorted(st.start)


def test_decode_steps_content_and_gap_space():
    chars = ["<blank>", "a", "b", " "]
    dec = CTCDecoder(chars)
    probs = np.full((1, 8, 4), 0.01, np.float32)
    probs[0, :, 0] = 0.97
    probs[0, 1, :] = [0.01, 0.97, 0.01, 0.01]
    probs[0, 5, :] = [0.01, 0.01, 0.97, 0.01]
    probs[0, 3, :] = [0.6, 0.01, 0.01, 0.38]  # a space the argmax did not pick
    (st,) = dec.decode_steps(probs, content_widths=[32], batch_width=64)
    assert st.text == "ab" and st.content_steps == pytest.approx(4.0)
    assert st.gap_space[0] == pytest.approx(0.38)


def test_batched_steps_equal_each_line_decoded_alone():
    # the whole batch is decoded at once (one pass over every kept character); a gap must never
    # reach into the neighbouring line, whatever the other lines hold
    chars = ["<blank>", *"abc中文 "]
    dec = CTCDecoder(chars)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(chars), (9, 30))
    idx[:, ::2] = 0
    idx[3] = 0  # an empty line
    idx[5, :] = 0
    idx[5, 7] = 2  # a single character
    space = rng.uniform(0, 1, idx.shape).astype(np.float32)
    space[:, 0] = space[:, -1] = 0.99  # the line ends: a leak across lines would pick these
    conf = rng.uniform(0.5, 1.0, idx.shape).astype(np.float32)
    content = rng.uniform(5, 30, len(idx))
    batch = dec.collapse_steps(idx.copy(), conf, space, content)
    for b, st in enumerate(batch):
        (alone,) = dec.collapse_steps(idx[b : b + 1].copy(), conf[b : b + 1], space[b : b + 1],
                                      content[b : b + 1])
        assert (st.text, st.score, st.steps, st.content_steps) == \
            (alone.text, alone.score, alone.steps, alone.content_steps)
        for name in ("start", "end", "conf", "gap_space"):
            assert np.array_equal(getattr(st, name), getattr(alone, name)), (b, name)
        assert len(st.gap_space) == max(len(st.text) - 1, 0)


# ------------------------------------------------------------------------------- spaces rule
def _steps(text: str, centers: list[float], gap_space: list[float]) -> CharSteps:
    c = np.array(centers)
    return CharSteps(text, 0.9, np.floor(c).astype(np.int32), np.floor(c).astype(np.int32),
                     np.full(len(text), 0.9, np.float32), 200, 200.0, np.array(gap_space, np.float32))


def test_missing_space_between_latin_words_from_gap_and_space_probability():
    # "ab cd" printed, recognised as "abcd": a wide gap with some space probability in it
    st = _steps("abcdef", [10, 13, 20, 23, 26, 29], [0.0, 0.4, 0.0, 0.0, 0.0])
    assert list(missing_spaces(st)) == [1]
    text, words = split_words(st)
    assert text == "ab cdef" and [w.text for w in words] == ["ab", "cdef"]
    assert words[0].u1 <= words[1].u0
    # the same gap with no space probability at all, or the rule off: no space
    assert list(missing_spaces(_steps("abcdef", [10, 13, 19, 22, 25, 28], [0.0] * 5))) == []
    assert split_words(st, SpaceRule(enabled=False))[0] == "abcdef"


def test_space_at_a_lower_to_upper_case_change_needs_less_gap():
    # "Carol Wang" read as "CarolWang" (issue 21): space probability at l|W, but the gap is only
    # as wide as the letters explain; a capital after a lower-case letter starts a word
    starts = [10, 12, 14, 16, 18, 21, 23, 25, 27]
    st = _steps("CarolWang", starts, [0.0, 0.0, 0.0, 0.0, 0.35, 0.0, 0.0, 0.0])
    assert split_words(st)[0] == "Carol Wang"
    assert split_words(st, SpaceRule(case_change=None))[0] == "CarolWang"
    # no space probability there: no space (camel-case words such as "iPhone" stay whole)
    assert split_words(_steps("CarolWang", starts, [0.0] * 8))[0] == "CarolWang"


def test_no_space_between_cjk_characters_whatever_the_gap():
    st = _steps("今天天气很好", [10, 16, 30, 36, 42, 48], [0.0, 0.9, 0.0, 0.0, 0.0])
    assert list(missing_spaces(st)) == []
    assert split_words(st)[0] == "今天天气很好"
    assert [char_class(c) for c in "中a1，."] == ["C", "L", "D", "F", "P"]


# ------------------------------------------------------------------------------- geometry
def test_segment_quad_horizontal_vertical_and_flipped():
    quad = [[0, 0], [100, 0], [100, 20], [0, 20]]
    assert np.allclose(segment_quad(quad, 0.25, 0.5), [[25, 0], [50, 0], [50, 20], [25, 20]])
    # turned 180 degrees for recognition: the first word is at the right end
    assert np.allclose(segment_quad(quad, 0.0, 0.25, angle=180), [[75, 0], [100, 0], [100, 20], [75, 20]])
    tall = [[0, 0], [20, 0], [20, 100], [0, 100]]  # a vertical line reads top to bottom
    assert np.allclose(segment_quad(tall, 0.1, 0.3), [[0, 10], [20, 10], [20, 30], [0, 30]])


def test_page_json_roundtrip_keeps_words():
    ln = Line("ab cd", [[0, 0], [50, 0], [50, 10], [0, 10]], 0.9,
              words=[Word("ab", [[0, 0], [20, 0], [20, 10], [0, 10]], 0.91), Word("cd", [[25, 0], [50, 0], [50, 10], [25, 10]], 0.88)])
    page = Page([ln, Line("x", [[0, 20], [9, 20], [9, 30], [0, 30]], 0.8)], 60, 40)
    d = page.to_dict()
    assert "words" in d["lines"][0] and "words" not in d["lines"][1]
    back = Page.from_dict(json.loads(page.to_json()))
    assert [w.text for w in back.lines[0].words] == ["ab", "cd"]
    assert back.lines[0].words[1].poly == [[25.0, 0.0], [50.0, 0.0], [50.0, 10.0], [25.0, 10.0]]
    assert back.to_dict() == d


# ------------------------------------------------------------------------------- end to end
def test_words_cover_their_ink(engine):
    text = "Payment within 30 days to account DE12 5001"
    img, inks = _line_image(text, 28)
    with layout_on(engine):
        page = engine.read(img)
    (ln,) = page.lines
    assert [w.text for w in ln.words] == text.split()
    tol = 0.15 * 28
    for w, (lo, hi) in zip(ln.words, inks, strict=True):
        xs = [p[0] for p in w.poly]
        assert min(xs) <= lo + tol and max(xs) >= hi - tol, (w.text, min(xs), max(xs), lo, hi)
    # words follow each other without overlapping
    for a, b in zip(ln.words, ln.words[1:], strict=False):
        assert max(p[0] for p in a.poly) <= min(p[0] for p in b.poly) + 1


def test_spaces_restored_between_small_english_words(engine):
    # at 10 px in simfang the recognition model glues "number" to the digits after it
    text = "Invoice number 2026-11-0042"
    f = ImageFont.truetype(font_path(), 10)
    img = Image.new("RGB", (int(f.getlength(text)) + 60, 30), "white")
    ImageDraw.Draw(img).text((30, 10), text, font=f, fill="black")
    spaced = engine.read(img).text  # the default engine runs the layout stage
    old = engine.layout
    engine.layout = None
    try:
        plain = engine.read(img).text
    finally:
        engine.layout = old
    assert plain == "Invoice number2026-11-0042"  # the defect this fixes (model-specific)
    assert spaced == text
    with layout_on(engine, spaces=SpaceRule(enabled=False)):
        assert engine.read(img).text == plain


def test_no_spaces_inside_chinese_text(engine):
    text = "今天天气很好我们去公园散步"
    for tracking in (0.0, 0.35):  # widely spaced ideographs are still one run
        img, _ = _line_image(text, 30, tracking=tracking)
        with layout_on(engine):
            page = engine.read(img)
        assert " " not in page.text, (tracking, page.text)
        assert page.lines[0].words and "".join(w.text for w in page.lines[0].words) == page.lines[0].text
