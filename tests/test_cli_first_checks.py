"""Issue 20, items 8-10 and 12: `ocrforge read` checks before it works, counts pages, names
pages so they sort; help and hints say what the README says. Real engine, in-process."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

import pytest
from conftest import render_lines

from ocrforge.cli import main


def _pdf(path: Path, texts: list[str], size: int = 36) -> Path:
    imgs = [render_lines([t], size=size, margin=20).image for t in texts]
    imgs[0].save(path, save_all=True, append_images=imgs[1:], resolution=100)
    return path


@pytest.fixture()
def no_models(monkeypatch):
    """Any model loading is a test failure (the checks must come first)."""
    import ocrforge.engine

    def refuse(*a, **k):
        raise AssertionError("an engine was built (models loaded) before the input checks")

    monkeypatch.setattr(ocrforge.engine.OCR, "__init__", refuse)


# ---------------------------------------------------------------- 9: checks before models
def test_missing_input_fails_before_any_model_loads(tmp_path, capsys, no_models):
    rc = main(["read", str(tmp_path / "missing.png")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1 and "missing.png" in err and "file not found" in err


def test_every_input_unreadable_fails_fast_and_json_keeps_them(tmp_path, capsys, no_models):
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    out = tmp_path / "o.json"
    rc = main(["read", str(tmp_path / "gone.pdf"), str(empty), "-f", "json", "-o", str(out)])
    assert rc == 1
    import json

    docs = json.loads(out.read_text())
    assert [Path(d["source"]).name for d in docs] == ["gone.pdf", "empty.png"]
    assert "file not found" in docs[0]["error"] and "empty" in docs[1]["error"]


def test_refusing_to_overwrite_the_input_comes_before_ocr(tmp_path, capsys, monkeypatch, no_models):
    pdf = _pdf(tmp_path / "book.pdf", ["Overwrite me not"])
    monkeypatch.chdir(tmp_path)
    rc = main(["read", "book.pdf", "-f", "pdf", "-o", "./"])
    assert rc == 2 and "would overwrite its input" in capsys.readouterr().err
    rc = main(["read", str(pdf), "-f", "pdf", "-o", str(pdf)])  # a file target: the input itself
    assert rc == 2 and "would overwrite its input" in capsys.readouterr().err
    assert pdf.read_bytes()[:5] == b"%PDF-"


# ---------------------------------------------------------------- 8 + 10: pages, names
def test_progress_counts_pages_and_page_names_sort(tmp_path, capsys, monkeypatch):
    import rich.console

    # the bar is drawn only on a terminal; a wide fake one makes its last state readable
    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    monkeypatch.setenv("COLUMNS", "200")
    texts = [f"Page {i} of twelve" for i in range(1, 13)]
    pdf = _pdf(tmp_path / "book.pdf", texts, size=28)
    out = tmp_path / "out"
    rc = main(["read", str(pdf), "--pages", "1,2,10", "-o", f"{out}/"])
    err = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", capsys.readouterr().err)
    assert rc == 0
    assert "3/3 pages" in err, err  # pages of the selection, not "0/1 inputs"
    names = sorted(p.name for p in out.iterdir())
    # padded to the page count's digits (12 pages: 2), page 1 included: sorted = page order
    assert names == ["book.p01.txt", "book.p02.txt", "book.p10.txt"]
    assert "Page 10" in (out / "book.p10.txt").read_text()


def test_page_suffix_pads_to_the_page_count():
    from ocrforge.jobs.naming import page_name

    assert page_name("a.png", 0, 1) == "a.png"  # a single page keeps the bare name
    assert [page_name("d", i, 3) for i in range(3)] == ["d.p1", "d.p2", "d.p3"]
    names = [page_name("d", i, 120) for i in range(120)]
    assert names[0] == "d.p001" and names[119] == "d.p120" and sorted(names) == names


# ---------------------------------------------------------------- 12: help and hints
def test_precision_help_lists_every_precision(capsys):
    from ocrforge.config import Precision

    with pytest.raises(SystemExit):
        main(["read", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for p in typing.get_args(Precision) + ("bf16",):
        assert p in out, p
    assert "int8-dynamic" in out


def test_torch_hint_names_the_torch_extra_only(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "onnx", None)  # torch's extra brings onnx too
    rc = main(["read", str(tmp_path / "x.png"), "--runtime", "torch"])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'ocrforge[torch]'" in err and "quant" not in err
