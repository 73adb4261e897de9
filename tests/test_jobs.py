"""`ocrforge batch`: resumable jobs. Real engine (ppocrv6-tiny on tiny pages), real SIGKILLs."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jobkit import ENGINE_ARGS, ENGINE_KW, done_records, make_job_tree, read_outputs, temp_files

from ocrforge.cli import main
from ocrforge.jobs import JobLockedError, run_job
from ocrforge.jobs.manifest import Manifest
from ocrforge.jobs.naming import config_hash, input_root, page_name, relative_name
from ocrforge.jobs.store import PageStore

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def engine():
    from ocrforge.engine import OCR

    return OCR(**ENGINE_KW)


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    return make_job_tree(tmp_path_factory.mktemp("small"), pdf_pages=3, pngs_per_folder=2)


def test_names_mirror_the_input_tree(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for f in ("a/x.png", "b/x.png", "b/x.jpg"):
        (tmp_path / f).write_bytes(b"")
    root = input_root([str(tmp_path / "a" / "x.png"), str(tmp_path / "b")])
    assert root == tmp_path
    names = {relative_name(str(tmp_path / f), root) for f in ("a/x.png", "b/x.png", "b/x.jpg")}
    assert names == {"a/x.png", "b/x.png", "b/x.jpg"}
    assert input_root([str(tmp_path / "a")]) == tmp_path / "a"  # a folder is its own root
    assert [page_name("b/doc.pdf", i, 3) for i in range(3)] == ["b/doc.pdf.p1", "b/doc.pdf.p2",
                                                                "b/doc.pdf.p3"]
    assert page_name("b/x.png", 0, 1) == "b/x.png"


def test_config_hash_ignores_threads_but_not_models():
    from ocrforge.config import EngineConfig

    base = EngineConfig.from_flat(model_set="ppocrv6-tiny")
    assert config_hash(base) == config_hash(base.with_(intra_op_threads=7, pipeline=False))
    assert config_hash(base) != config_hash(base.with_(model_set="ppocrv6-small"))
    assert config_hash(base) != config_hash(base.with_(drop_score=0.3))


def test_manifest_drops_a_torn_last_line(tmp_path):
    m = Manifest(tmp_path / "manifest.jsonl")
    m.append({"status": "done", "name": "a.png", "sha256": "s", "config": "c"})
    m.close()
    with open(tmp_path / "manifest.jsonl", "ab") as f:
        f.write(b'{"status": "done", "name": "b.png", "sha2')  # a kill in mid-append
    m = Manifest(tmp_path / "manifest.jsonl")
    assert m.page_done("a.png", "s", "c") and "b.png" not in m.pages
    m.append({"status": "done", "name": "c.png", "sha256": "s", "config": "c"})
    m.close()
    lines = (tmp_path / "manifest.jsonl").read_text().splitlines()
    assert [json.loads(x)["name"] for x in lines] == ["a.png", "c.png"]


def test_batch_writes_pages_reports_errors_and_resumes(small_tree, tmp_path, capsys):
    src, n_pages = small_tree
    out = tmp_path / "out"
    rc = main(["batch", str(src), "-o", str(out), "--no-progress", *ENGINE_ARGS])
    err = capsys.readouterr().err
    assert rc == 1, "a corrupt input must give exit code 1"
    assert "left/broken.png" in err and "corrupt" in err
    got = read_outputs(out)
    assert sorted(got) == sorted(
        [f"{n}.{ext}" for n in ("book.pdf.p1", "book.pdf.p2", "book.pdf.p3", "left/img000.png",
                                "left/img001.png", "right/img000.png", "right/img001.png")
         for ext in ("json", "txt")])
    assert "Book page 2" in got["book.pdf.p2.txt"].decode()
    assert got["book.pdf.p2.json"]["page"] == 1
    assert got["right/img001.png.json"]["source"] == str(src / "right" / "img001.png")
    assert "right image 1" in got["right/img001.png.txt"].decode()
    assert got["left/img001.png.txt"] != got["right/img001.png.txt"]  # same name, no collision

    # a second run reads nothing again, still reports the broken input
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.json")}
    rc = main(["batch", str(src), "-o", str(out), "--no-progress", *ENGINE_ARGS])
    err = capsys.readouterr().err
    assert rc == 1 and f"0 page(s) read, {n_pages} already done" in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.json")} == mtimes


def test_changed_input_or_config_is_read_again(small_tree, tmp_path, engine):
    src, n_pages = small_tree
    work = tmp_path / "in"
    import shutil

    shutil.copytree(src, work)
    out = tmp_path / "out"
    s = run_job([work], out, engine=engine, progress=False)
    assert s.pages_read == n_pages and len(s.failures) == 1
    # new bytes under the same name: only that input is read again
    (work / "right" / "img000.png").write_bytes((work / "left" / "img001.png").read_bytes())
    s = run_job([work], out, engine=engine, progress=False)
    assert (s.pages_read, s.pages_skipped) == (1, n_pages - 1)
    assert "left image 1" in (out / "right" / "img000.png.txt").read_text()
    # another recognition setting: everything is read again
    s = run_job([work], out, config=engine.config.with_(drop_score=0.4), progress=False)
    assert (s.pages_read, s.pages_skipped) == (n_pages, 0)
    # a deleted output file is rewritten
    (out / "book.pdf.p3.json").unlink()
    s = run_job([work], out, config=engine.config.with_(drop_score=0.4), progress=False)
    assert (s.pages_read, s.pages_skipped) == (1, n_pages - 1)
    assert done_records(out)["book.pdf.p3"] == 3


def test_stale_temp_files_are_removed_and_the_folder_is_locked(small_tree, tmp_path, engine):
    src, _ = small_tree
    out = tmp_path / "out"
    (out / "left").mkdir(parents=True)
    stale = out / "left" / ".img000.png.json.4242.ocrforge-tmp"  # what a kill mid-write leaves
    stale.write_text("{half")
    mine = out / "notes.tmp"  # not ours: never touched
    mine.write_text("keep")
    s = run_job([src], out, engine=engine, progress=False)
    assert s.temp_files_removed == 1 and not stale.exists() and mine.exists()
    with PageStore(out, "x"):
        with pytest.raises(JobLockedError, match="another ocrforge batch job"):
            run_job([src], out, engine=engine, progress=False)


def _batch_cmd(src: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "ocrforge.cli", "batch", str(src), "-o", str(out),
            "--no-progress", *ENGINE_ARGS]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_sigkill_three_times_then_resume_equals_a_clean_run(tmp_path):
    """A 200-page job (150-page PDF + 50 PNGs + 1 corrupt file) killed at three random moments."""
    src, n_pages = make_job_tree(tmp_path, pdf_pages=150, pngs_per_folder=25)
    assert n_pages == 200
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    t0 = time.perf_counter()
    r = subprocess.run(_batch_cmd(src, clean), env=_env(), capture_output=True, text=True, timeout=300)
    clean_s = time.perf_counter() - t0
    assert r.returncode == 1, r.stderr  # the corrupt file
    assert len(done_records(clean)) == n_pages

    rng = random.Random(int(os.environ.get("OCRFORGE_KILL_SEED", "12")))
    kills = []
    # kill once this many pages are recorded (rising, so every run does some work) ...
    for target in sorted(rng.sample(range(5, n_pages - 5), 3)):
        jitter = rng.uniform(0, 0.05)  # ... plus a random slice of a page's time
        p = subprocess.Popen(_batch_cmd(src, resumed), env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            if (resumed / "manifest.jsonl").exists() and len(done_records(resumed)) >= target:
                break
            time.sleep(0.005)
        time.sleep(jitter)
        finished = p.poll() is not None
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills.append((target, len(done_records(resumed)), finished))
    assert not all(k[2] for k in kills), f"no run was killed mid-job: {kills}"
    r = subprocess.run(_batch_cmd(src, resumed), env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    print(f"clean run {clean_s:.1f} s; kills (target, recorded, had finished): {kills}; last run: "
          + r.stderr.strip().splitlines()[0])

    assert read_outputs(resumed) == read_outputs(clean)
    assert set(done_records(resumed).values()) == {1}, "a page was recorded twice"
    assert len(done_records(resumed)) == n_pages
    assert temp_files(resumed) == [] and temp_files(clean) == []
