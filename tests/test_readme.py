"""Every Python and shell example of the README runs as written (issue 20, item 12).

The code blocks are taken from README.md itself, so an edit there is tested. They run in order,
in one temporary folder holding the files they name (generated here: scan.png, receipt.jpg,
book.pdf, ...), with `ocrforge` on PATH being this checkout. `ocrforge serve` starts the real
server in the background (on a free port instead of 8000) for the curl commands and the client.

Not run, and why (SKIPPED below; each is covered elsewhere):
- `pip install ...`, `python3 -m venv` / activate: installs; this environment has every extra
  (scripts/test.sh installs them). The rest of such a line runs.
- `bash scripts/test.sh`: the test suite itself.
- `ocrforge batch ... --ray --address auto`: needs a Ray cluster (tests/test_ray.py starts one).
- `ocrforge bench`: minutes of timed repetitions and rapidocr, not a dependency (test_bench.py).
- `ocrforge build`: INT8 calibration and the accuracy guard take minutes (test_optimize.py).
- `ocrforge tune`: a search of minutes; fast.json, which the next command reads, is written here
  as a profile of the defaults (tests/test_tune_verdict.py covers tune's decision).
Changed to keep it fast: `synth --pages 200` makes 3 pages (then `eval` reads those 3).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import render_lines

ROOT = Path(__file__).resolve().parents[1]

SKIPPED = {
    "pip install": "installs packages; the test environment has every extra",
    "python3 -m venv": "creates a virtual environment; the test environment is one",
    ". .venv/bin/activate": "activates that environment",
    "bash scripts/test.sh": "the test suite itself",
    "ocrforge bench": "minutes of timed repetitions; rapidocr is not a dependency",
    "ocrforge build": "INT8 calibration and accuracy guard take minutes",
    "ocrforge tune": "a search of minutes; fast.json is written as a profile of the defaults",
}
SKIPPED_RE = {r"ocrforge batch .*--ray": "needs a Ray cluster"}
FAST = {"--pages 200": "--pages 3"}


def code_blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def commands(block: str) -> list[str]:
    """Shell commands of a block: comments stripped, continuation lines joined."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#\s.*$", "", line).strip()
        if line:
            out.append(line)
    return out


def skip_reason(cmd: str) -> str | None:
    for prefix, why in SKIPPED.items():
        if cmd.startswith(prefix):
            return why
    return next((why for pat, why in SKIPPED_RE.items() if re.match(pat, cmd)), None)


def runnable(cmd: str) -> str | None:
    """The command without its install steps (`a && pip install . && b` -> `b`), or None."""
    parts = [p.strip() for p in cmd.split("&&")]
    keep = [p for p in parts if not skip_reason(p)]
    if not keep:
        return None
    cmd = " && ".join(keep)
    for a, b in FAST.items():
        cmd = cmd.replace(a, b)
    return cmd


def _save_pdf(path: Path, texts: list[str]) -> None:
    imgs = [render_lines([t], size=24, margin=16).image for t in texts]
    imgs[0].save(path, save_all=True, append_images=imgs[1:], resolution=100)


def make_inputs(d: Path) -> None:
    def img(name: str, *lines: str) -> None:
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        render_lines(list(lines), size=24, margin=16).image.save(p)

    img("scan.png", "Scanned page 12", "second line")
    img("receipt.jpg", "Total 64.50", "Thank you")
    img("page.png", "A heading", "Some body text here")
    img("photo.jpg", "Photo text 7")
    img("a.jpg", "Alpha 1")
    img("b.tif", "Bravo 2")
    img("receipts/r1.png", "Receipt one 3.20")
    img("receipts/r2.jpg", "Receipt two 4.10")
    img("scans/x/doc.png", "Scan x")
    img("scans/y/doc.png", "Scan y")
    _save_pdf(d / "book.pdf", ["Book page one", "Book page two"])
    _save_pdf(d / "scan.pdf", ["Scanned PDF page"])
    _save_pdf(d / "c.pdf", ["Charlie 3"])
    _save_pdf(d / "big.pdf", [f"Big page {i}" for i in range(1, 9)])
    (d / "books").mkdir()
    _save_pdf(d / "books" / "short.pdf", ["Short book page"])
    (d / "src").symlink_to(ROOT / "src")  # the quick start reads src/ocrforge/samples/


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Runner:
    def __init__(self, cwd: Path, env: dict[str, str], port: int):
        self.cwd, self.env, self.port = cwd, env, port
        self.server: subprocess.Popen | None = None
        self.ran: list[str] = []
        self.skipped: list[tuple[str, str]] = []

    def local(self, code: str) -> str:
        return code.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}").replace(
            "--port 8000", f"--port {self.port}")

    def shell(self, cmd: str) -> None:
        run = runnable(cmd)
        if run is None:
            self.skipped.append((cmd, skip_reason(cmd.split("&&")[0].strip()) or ""))
            return
        if run.startswith("ocrforge serve"):
            self.start_server(self.local(run))
            return
        r = subprocess.run(["bash", "-o", "pipefail", "-c", self.local(run)], cwd=self.cwd,
                           env=self.env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{run!r} exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        self.ran.append(run)

    def python(self, code: str) -> None:
        script = self.cwd / f"block{len(self.ran)}.py"
        script.write_text(self.local(code))
        r = subprocess.run([sys.executable, str(script)], cwd=self.cwd, env=self.env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"README python block failed:\n{code}\n{r.stderr[-3000:]}"
        self.ran.append(code)

    def start_server(self, cmd: str) -> None:
        if self.server is not None:
            return  # already serving (the README starts it in two places)
        self.server = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=self.cwd, env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.server.poll() is None, self.server.stderr.read().decode()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError("ocrforge serve did not become ready")

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=60)


def _env(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / ".bin"
    bin_dir.mkdir()
    exe = bin_dir / "ocrforge"  # `ocrforge` is this checkout, whatever is installed
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ocrforge.cli "$@"\n')
    exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "OCRFORGE_API_KEY"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_readme_has_the_blocks_this_test_expects():
    assert len(code_blocks("bash")) >= 6 and len(code_blocks("python")) >= 3
    assert runnable("python3 -m venv .venv && . .venv/bin/activate && pip install . && "
                    "ocrforge read x.png") == "ocrforge read x.png"


@pytest.mark.slow
def test_readme_examples_run_as_written(tmp_path):
    from ocrforge.config import EngineConfig, save_profile

    make_inputs(tmp_path)
    save_profile(EngineConfig(), tmp_path / "fast.json")  # what `ocrforge tune` would write
    run = Runner(tmp_path, _env(tmp_path), _free_port())
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    try:
        for m in re.finditer(r"^```(bash|python)\n(.*?)^```", text, flags=re.S | re.M):
            lang, body = m.groups()
            if lang == "python":
                run.python(body)
            else:
                for cmd in commands(body):
                    run.shell(cmd)
    finally:
        run.stop()
    print("skipped:", *(f"{c!r}: {why}" for c, why in run.skipped), sep="\n  ")
    assert len(run.ran) >= 20, run.ran
    assert (tmp_path / "pages" / "book.p1.txt").is_file()  # `read book.pdf -o pages/`
    assert (tmp_path / "out" / "scan.pdf").read_bytes()[:5] == b"%PDF-"
