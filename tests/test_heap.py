"""Freed heap goes back to the system between page groups (issue 23, item 1).

glibc keeps memory that a program freed when a live block sits above it, and its mmap threshold
rises after the first large free, so the recognition buffers of later pages come from the heap:
over a 1000-page PDF read with 4-page groups, resident memory grew ~3 MB a page (570 -> 1270 MiB
between pages 20 and 216) while Python's own objects stayed at 4 MB. ``release_free_heap``
hands the free pages back; the pipeline calls it after each group."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

_FRAGMENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from ocrforge.scheduling.heap import release_free_heap

    def rss():
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) // 1024 for x in f if x.startswith("VmRSS"))

    big = np.ones(16 << 20, np.uint8)
    del big  # a large free raises glibc's mmap threshold to 16 MB
    blocks = [np.ones(1 << 20, np.uint8) for _ in range(300)]  # now these come from the heap
    kept = blocks[9::10]  # live blocks between the freed ones keep the heap from shrinking
    del blocks
    before = rss()
    freed = release_free_heap() if sys.argv[2] == "1" else "none"
    print(before, rss(), freed)
""")


def _fragment(release: bool) -> tuple[int, int, str]:
    r = subprocess.run([sys.executable, "-c", _FRAGMENT, SRC, "1" if release else "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, after, freed = r.stdout.split()
    return int(before), int(after), freed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap (Linux only)")
def test_release_returns_freed_heap_to_the_system():
    before, after, _ = _fragment(release=False)
    assert after >= before - 20, "control: without a release the freed blocks stay resident"
    before, after, freed = _fragment(release=True)
    assert freed == "True"
    assert before - after >= 200, f"RSS {before} -> {after} MiB after release"


def test_the_pipeline_releases_the_heap_after_every_page_group(engine, monkeypatch):
    from ocrforge.scheduling import pipeline

    calls = []
    monkeypatch.setattr(pipeline, "release_free_heap", lambda: calls.append(1) or True)
    pages = [np.full((120, 400, 3), 255, np.uint8) for _ in range(5)]
    for enabled in (False, True):
        calls.clear()
        e = engine.__class__(engine.config.with_(**{"pipeline.enabled": enabled}))
        out = list(e.read_many(pages, batch_pages=2))
        assert len(out) == 5
        assert len(calls) == 3, f"pipeline.enabled={enabled}: {len(calls)} releases for 3 groups"
    calls.clear()
    e = engine.__class__(engine.config.with_(**{"pipeline.trim_heap": False}))
    list(e.read_many(pages, batch_pages=2))
    assert calls == []


def test_the_first_page_comes_out_alone_then_pages_go_in_groups(engine, monkeypatch):
    """`read -o` of a 1000-page A4 PDF wrote its first page after 28 s against `batch`'s 10 s
    on the same machine: the first page waited for a whole 4-page recognition group. The first
    group is one page, so the first result comes after one page's work; later groups are full."""
    from ocrforge.scheduling import pipeline

    sizes = []
    real = pipeline._recognise_group
    monkeypatch.setattr(pipeline, "_recognise_group",
                        lambda runner, group, s, trim: sizes.append(len(group)) or real(runner, group, s, trim))
    pages = [np.full((120, 400, 3), 255, np.uint8) for _ in range(6)]
    for enabled in (False, True):
        sizes.clear()
        e = engine.__class__(engine.config.with_(**{"pipeline.enabled": enabled}))
        assert len(list(e.read_many(pages, batch_pages=4))) == 6
        assert sizes == [1, 4, 1], f"pipeline.enabled={enabled}: groups {sizes}"
