"""Issue 20, item 13: smaller rough edges, one test each (each failed before its fix)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from conftest import render_lines

from ocrforge.cli import main

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "src" / "ocrforge" / "server" / "static"


# ---------------------------------------------------------------- Markdown escapes
def test_markdown_escapes_the_same_text_the_same_way_everywhere():
    from ocrforge.io.exporters.markdown import _cell, escape

    for text in ("6.32", "-5.00", "#1", "+86 10", "12.50 total"):
        assert escape(text) == _cell(text) == text  # a price is not a list item or a heading
    assert escape("1. First") == "1\\. First" and escape("2) Second") == "2\\) Second"
    assert escape("- item") == "\\- item" and escape("# Title") == "\\# Title"
    assert escape("---") == "\\---"  # would be a horizontal rule


# ---------------------------------------------------------------- demo page before an upload
def test_demo_page_hides_the_result_and_asks_for_no_favicon():
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    css = (STATIC / "style.css").read_text(encoding="utf-8")
    assert re.search(r'<section id="result" hidden>', html)
    assert re.search(r'<img id="preview"[^>]*\bhidden\b', html)  # no broken-image icon
    # #result { display:grid } would override the hidden attribute without this rule
    assert re.search(r"\[hidden\]\s*\{\s*display:\s*none\s*!important", css)
    assert re.search(r'<link rel="icon" href="data:,"', html)  # no /favicon.ico 404


# ---------------------------------------------------------------- eval table when piped
def test_eval_table_keeps_whole_group_labels_when_not_a_terminal(tmp_path, capsys):
    kind = "handwritten-receipt-scan"  # longer than the group column got when piped
    r = render_lines(["Golf 777"], size=36)
    (tmp_path / "images").mkdir()
    r.image.save(tmp_path / "images" / "p0.png")
    x0, y0, x1, y1 = r.boxes[0]
    rec = {"image": "images/p0.png", "lang": "en", "kind": kind,
           "lines": [{"text": "Golf 777", "poly": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]}]}
    (tmp_path / "labels.jsonl").write_text(json.dumps(rec) + "\n")
    assert main(["eval", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"kind={kind}" in out and "…" not in out, out


# ---------------------------------------------------------------- pyproject metadata
def test_pyproject_metadata_has_no_deprecation_warning():
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("setuptools < 77 cannot read an SPDX license string (the build uses >= 77)")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert not [w for w in got if "deprecat" in str(w.message).lower()], [str(w.message) for w in got]


# ---------------------------------------------------------------- bench orientation time
def test_page_orientation_time_is_counted_as_orientation(engine):
    from ocrforge.tools.bench import STAGE_GROUPS

    page = engine.read(render_lines(["Orientation is timed", "second line"], size=32).image)
    assert engine.config.cls.page_orientation
    assert page.timings["page_orient"] > 0  # was folded into det_prep: bench showed 0.0
    assert "page_orient" in STAGE_GROUPS["orientation"]
