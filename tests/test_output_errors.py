"""Output errors and hostile names on the command line: a full disk is one clear line and
exit 1 (never a traceback or an abort), resume works once space is freed, names printed to a
terminal are escaped (JSON keeps them), and temp files of killed writers are removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import render_lines
from jobkit import ENGINE_ARGS

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def ocrforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ocrforge.cli", *args, *ENGINE_ARGS],
                          env=_env(), capture_output=True, text=True, timeout=300)


def _images(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        render_lines([f"disk full page {i}", f"line {i * 7}"], size=18, margin=8).image.save(
            folder / f"p{i}.png")
    return folder


@pytest.fixture
def full_fs(tmp_path):
    """A 256 KiB tmpfs filled to the last byte (needs root to mount; skipped otherwise)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _one_error_line(r: subprocess.CompletedProcess, path_part: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "terminate called" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1, r.stderr
    assert "no space left on device" in errors[0] and path_part in errors[0], errors[0]


def test_read_into_a_full_disk_is_one_line_and_exit_1(tmp_path, full_fs):
    src = _images(tmp_path / "in", 6)  # several pages in flight when the first write fails
    r = ocrforge("read", str(src), "-f", "json", "-o", f"{full_fs}/out/", "--no-progress")
    _one_error_line(r, f"{full_fs}/out/")
    r = ocrforge("read", str(src / "p0.png"), "-o", f"{full_fs}/one.txt")
    _one_error_line(r, f"{full_fs}/one.txt")
    assert not [p for p in full_fs.rglob("*.tmp")], "temp files left behind"


def test_batch_into_a_full_disk_then_resume(tmp_path, full_fs):
    src = _images(tmp_path / "in", 4)
    out = full_fs / "out"
    r = ocrforge("batch", str(src), "-o", str(out), "--no-progress")
    _one_error_line(r, str(out))
    manifest = out / "manifest.jsonl"
    done = [json.loads(x) for x in manifest.read_text().splitlines() if x.strip()] \
        if manifest.exists() else []
    for rec in done:  # every record points at files that are there
        assert all((out / o).is_file() for o in rec.get("outputs", [])), rec
    (full_fs / "filler").unlink()
    r = ocrforge("batch", str(src), "-o", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.glob("*.txt")) == [f"p{i}.png.txt" for i in range(4)]
    # what a fresh read of that page gives (the text itself is the engine's business here)
    fresh = ocrforge("read", str(src / "p3.png"))
    assert fresh.returncode == 0 and "page 3" in fresh.stdout, fresh.stderr
    assert (out / "p3.png.txt").read_text().strip() == fresh.stdout.strip()


HOSTILE = ["\x1b[31mred\x1b]0;pwned\x07.png", "x\nerror: everything is fine.png"]


def test_hostile_file_names_are_escaped_on_the_terminal_and_kept_in_json(tmp_path):
    src = _images(tmp_path / "in", 1)
    for name in HOSTILE:
        (src / name).write_bytes(b"not an image")
    r = ocrforge("read", str(src), "-f", "json", "--no-progress")
    assert r.returncode == 1
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr, repr(r.stderr)
    lines = r.stderr.splitlines()
    assert not any(ln.startswith("error: everything is fine") for ln in lines), lines
    assert sum(ln.startswith("error:") for ln in lines) == 2, lines
    assert "\\x1b[31mred" in r.stderr and "x\\nerror: everything is fine.png" in r.stderr
    sources = {p["source"] for p in json.loads(r.stdout)}
    assert {str(src / n) for n in HOSTILE} <= sources  # the real names, unescaped

    out = tmp_path / "out"
    r = ocrforge("batch", str(src), "-o", str(out), "--no-progress")
    assert r.returncode == 1
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr, repr(r.stderr)
    lines = r.stderr.splitlines()
    assert sum(ln.startswith("error:") for ln in lines) == 2, lines
    errors = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()
              if '"error"' in x]
    assert {str(src / n) for n in HOSTILE} == {e["source"] for e in errors}


def test_printable_escapes_controls_and_bidi_but_keeps_text():
    from ocrforge.paths import printable

    assert printable("页 1 café.png") == "页 1 café.png"
    assert printable("a\nb\tc\x1b[0m\x9b\u202egnp.exe") == "a\\nb\\tc\\x1b[0m\\x9b\\u202egnp.exe"


def test_a_killed_writers_temp_files_are_removed_by_the_next_write(tmp_path):
    from ocrforge.config import atomic_write_bytes

    target = tmp_path / "page.txt"
    old = tmp_path / ".page.txt.k3j_9x2a.tmp"  # the pattern before pids were in the name
    dead = tmp_path / ".page.txt.999999999.abcd1234.tmp"
    live = tmp_path / f".page.txt.{os.getpid()}.abcd1234.tmp"  # a writer still at work
    other = tmp_path / ".other.txt.999999999.abcd1234.tmp"
    for p in (old, dead, live, other):
        p.write_bytes(b"partial")
    atomic_write_bytes(target, b"done\n")
    assert target.read_bytes() == b"done\n"
    assert not old.exists() and not dead.exists()
    assert live.exists() and other.exists()
