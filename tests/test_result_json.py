"""The JSON form of a page (result.py): a page's polys are rounded in one pass, value for
value as ``round(x, 1)`` rounds each (the server answers every request with them)."""

from __future__ import annotations

import json

import numpy as np

from ocrforge.result import Line, Page, Word, _round1, _round_poly


def test_rounding_in_one_pass_equals_python_round_everywhere():
    rng = np.random.default_rng(7)
    # ties and near-ties of the second decimal (0.15, 2.675, ...), both signs, big pages,
    # values that 10 x rounds onto a half, and plain random coordinates
    halves = (np.arange(-20000, 20000) + 0.5) / 10.0
    near = np.concatenate([np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf)])
    vals = np.concatenate([halves, near, rng.uniform(-1e4, 1e5, 200_000),
                           rng.integers(0, 5000, 5000) / 100.0, [0.0, -0.0, 1e-9, -0.04, 1e15],
                           rng.uniform(1e7, 1e12, 20_000) + 0.05, [1e308, -1e308, np.inf]])
    got = _round1(vals)
    want = np.array([round(float(v), 1) for v in vals])
    assert np.array_equal(got, want)
    assert np.isnan(_round1(np.array([np.nan]))[0])
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0


def _page(rng: np.random.Generator, n: int) -> Page:
    lines = []
    for i in range(n):
        poly = (rng.uniform(0, 3000, (4, 2)).round(rng.integers(0, 4))).tolist()
        words = [Word(f"w{j}", rng.uniform(0, 3000, (4, 2)).tolist(), float(rng.uniform()))
                 for j in range(int(rng.integers(0, 4)))]
        lines.append(Line(f"line {i}", poly, float(rng.uniform()), 0, words))
    return Page(lines, 3000, 2000, source="p.png")


def test_page_json_rounds_like_each_line_and_word_alone():
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 60):
        page = _page(rng, n)
        d = page.to_dict()
        assert d["lines"] == [ln.to_dict() for ln in page.lines]
        for ln, ld in zip(page.lines, d["lines"], strict=True):
            assert ld["poly"] == _round_poly(ln.poly)
            assert [w["poly"] for w in ld.get("words", [])] == [_round_poly(w.poly) for w in ln.words]
        assert Page.from_dict(json.loads(json.dumps(d))).to_dict() == d


def test_page_json_with_polys_of_other_corner_counts():
    """Polys are four corners from the engine; one from elsewhere (from_dict of a hand-made
    file) may have more: the page still gives each line's own form."""
    page = Page([Line("a", [[0.15, 1.25], [2, 3], [4.05, 5], [6, 7], [8, 9.95]], 0.5),
                 Line("b", [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], 0.25)], 10, 10)
    assert page.to_dict()["lines"] == [ln.to_dict() for ln in page.lines]


def test_server_json_body_is_what_starlette_would_send():
    """The server writes its JSON with orjson when installed: byte for byte what Starlette's
    JSONResponse gave before, Chinese text and word polys included, and the same without it."""
    from starlette.responses import JSONResponse

    from ocrforge.server import formats

    rng = np.random.default_rng(11)
    pages = [_page(rng, n) for n in (0, 3, 40)]
    pages[1].lines[0].text = "发票号码 No. 0042：¥12.50"
    env = formats.envelope("rid", "a.png", "png", pages, {"total": 12.34567}, {"pages": 3})
    want = JSONResponse(env).body
    assert formats.json_body(env) == want
    real, formats._orjson = formats._orjson, None
    try:
        assert formats.json_body(env) == want
    finally:
        formats._orjson = real
    assert env["text"] == formats.joined_text(p.text for p in pages)
