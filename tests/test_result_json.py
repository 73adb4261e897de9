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


def _rows_text_pairwise(lines: list[Line]) -> str:
    """rows_text as it was: each pair of lines compared in plain Python."""
    import math

    def length(ln: Line) -> float:
        (x0, y0), (x1, y1) = ln.poly[0], ln.poly[1]
        return math.hypot(x1 - x0, y1 - y0)

    def direction(ln: Line) -> tuple[float, float]:
        (x0, y0), (x1, y1), (x2, y2), (x3, y3) = ln.poly[:4]
        dx, dy = (x1 - x0 + x2 - x3) * 0.5, (y1 - y0 + y2 - y3) * 0.5
        n = math.hypot(dx, dy)
        h = math.hypot((x3 - x0 + x2 - x1) * 0.5, (y3 - y0 + y2 - y1) * 0.5)
        return (1.0, 0.0) if n < 1.5 * h or dx <= 0 else (dx / n, dy / n)

    def same(a: Line, b: Line) -> bool:
        ux, uy = direction(a if length(a) >= length(b) else b)
        nx, ny = -uy, ux
        aa = [x * ux + y * uy for x, y in a.poly]
        ba = [x * ux + y * uy for x, y in b.poly]
        ac = [x * nx + y * ny for x, y in a.poly]
        bc = [x * nx + y * ny for x, y in b.poly]
        overlap = min(max(ac), max(bc)) - max(min(ac), min(bc))
        thin = min(max(ac) - min(ac), max(bc) - min(bc))
        return min(ba) >= min(aa) and overlap > 0.5 * thin

    rows: list[list[Line]] = []
    for ln in lines:
        if rows and same(rows[-1][-1], ln):
            rows[-1].append(ln)
        else:
            rows.append([ln])
    return "\n".join(" ".join(x.text for x in row) for row in rows)


def _random_lines(rng: np.random.Generator) -> list[Line]:
    """A page of lines: skewed, vertical, square or degenerate, side by side on a row or not."""
    lines = []
    x, y = rng.uniform(0, 50, 2)
    for k in range(int(rng.integers(0, 40))):
        w, h = rng.choice([rng.uniform(5, 400), rng.uniform(0, 3)]), rng.uniform(0, 40)
        a = rng.choice([0.0, rng.normal(0, 0.1), rng.uniform(-np.pi, np.pi)])
        u, n = np.array([np.cos(a), np.sin(a)]), np.array([-np.sin(a), np.cos(a)])
        p0 = np.array([x, y])
        quad = np.array([p0, p0 + w * u, p0 + w * u + h * n, p0 + h * n])
        lines.append(Line(f"t{k}", quad.round(int(rng.integers(0, 3))).tolist(), 0.9))
        if rng.random() < 0.5:  # the next line on the same row, or a new row
            x += w + rng.uniform(-20, 60)
            y += rng.normal(0, 3)
        else:
            x, y = rng.uniform(0, 50), y + rng.uniform(-10, 60)
    return lines


def test_page_text_joins_rows_as_the_pairwise_rule_did():
    """Page.text compares all pairs of lines in a few array operations (a server builds it for
    every page it answers); its rows must be those of the pair-by-pair rule."""
    rng = np.random.default_rng(11)
    mixed = 0
    for _ in range(400):
        lines = _random_lines(rng)
        text = Page(lines, 1000, 1000).text
        assert text == _rows_text_pairwise(lines)
        mixed += "\n" in text and " " in text
    assert mixed > 100  # rows both joined and split on most pages


def test_page_text_of_odd_polys_follows_the_pairwise_rule():
    """Polys with more corners, mixed corner counts and non-finite values go pair by pair."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        lines = _random_lines(rng)
        for ln in lines[::3]:
            ln.poly = [*ln.poly, [ln.poly[2][0] + 1.0, ln.poly[2][1]]]
        assert Page(lines, 1000, 1000).text == _rows_text_pairwise(lines)
    six = [Line(f"s{k}", [[10.0 * k, 0], [10.0 * k + 8, 0], [10.0 * k + 9, 3],
                          [10.0 * k + 8, 6], [10.0 * k, 6], [10.0 * k - 1, 3]], 0.9)
           for k in range(5)]
    assert Page(six, 100, 10).text == _rows_text_pairwise(six) == "s0 s1 s2 s3 s4"
    nan = _random_lines(np.random.default_rng(2))[:6]
    if nan:
        nan[0].poly[1] = [float("nan"), 3.0]
        assert Page(nan, 100, 10).text == _rows_text_pairwise(nan)
