"""Memory on a real page size at the defaults: one A4 page at 200 dpi (1654x2339, 45 lines)
peaks at no more than 1 GiB of resident memory (docs/BENCHMARKS.md "Memory on A4 pages")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_pages.py"


def test_one_a4_page_peaks_under_1_gib(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    make = ("import sys; sys.path.insert(0, sys.argv[2]); import memory_pages as m; "
            "m.make_pdf(__import__('pathlib').Path(sys.argv[1]), 1)")
    pdf = tmp_path / "a4.pdf"
    subprocess.run([sys.executable, "-c", make, str(pdf), str(BENCH.parent)], env=env,
                   check=True, timeout=120)
    r = subprocess.run([sys.executable, str(BENCH), "--child", str(pdf), "1", "{}", "one"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    import json

    peak = json.loads(r.stdout.strip().splitlines()[-1])["peak_one_page_mib"]
    assert peak <= 1024, f"one A4 page peaked at {peak:.0f} MiB"
