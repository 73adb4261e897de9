"""ONNX Runtime telemetry is off by default: an ocrforge process writes nothing under
~/.cache/Microsoft/DeveloperTools/.onnxruntime (no events, no persistent device id)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
ORT_DIR = Path(".cache") / "Microsoft" / "DeveloperTools" / ".onnxruntime"

SCRIPT = """
import numpy as np, ocrforge
page = np.full((64, 256, 3), 255, np.uint8)
print(ocrforge.OCR(model_set="ppocrv6-tiny", intra_op_threads=1).read(page).text)
"""


def _run(home: Path, **env: str) -> None:
    base = {k: v for k, v in os.environ.items()
            if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    base.update(HOME=str(home), PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OCRFORGE_CACHE_DIR=str(home / "ocrforge-cache"), **env)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=base, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_nothing_is_written_for_onnxruntime_telemetry(tmp_path):
    _run(tmp_path)
    assert not (tmp_path / ORT_DIR).exists(), sorted(p.name for p in (tmp_path / ORT_DIR).iterdir())
    assert not (tmp_path / ".cache" / "Microsoft").exists()


def test_the_user_can_opt_back_in(tmp_path):
    """The check above can see the files: with ORT_DISABLE_TELEMETRY=0 onnxruntime writes them
    (on builds that carry telemetry: the official wheels)."""
    _run(tmp_path, ORT_DISABLE_TELEMETRY="0")
    import pytest

    if not (tmp_path / ORT_DIR).exists():
        pytest.skip("this onnxruntime build writes no telemetry files at all")
    assert (tmp_path / ORT_DIR / "deviceid").exists()
