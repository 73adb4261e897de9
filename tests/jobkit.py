"""Helpers for the batch-job tests: a small input tree of cheap pages, and output readers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from conftest import render_lines

# tiny model set and small pages: these tests check bookkeeping, not accuracy
ENGINE_ARGS = ["--model-set", "ppocrv6-tiny", "--threads", "1"]
ENGINE_KW = {"model_set": "ppocrv6-tiny", "intra_op_threads": 1}


def make_job_tree(root: Path, *, pdf_pages: int, pngs_per_folder: int) -> tuple[Path, int]:
    """``root/in`` with a PDF, two folders of same-named PNGs and one corrupt file.

    Returns the input folder and the number of readable pages. Every page has different text,
    so a page written under the wrong name is caught.
    """
    src = root / "in"
    for sub in ("left", "right"):
        (src / sub).mkdir(parents=True)
        for i in range(pngs_per_folder):
            img = render_lines([f"{sub} image {i}", f"no. {i * 37 % 101}"], size=18, margin=8).image
            img.save(src / sub / f"img{i:03d}.png")
    pages = [render_lines([f"Book page {i + 1}", f"{i * 13 % 97} 页"], size=18, margin=8).image
             for i in range(pdf_pages)]
    if pages:
        pages[0].save(src / "book.pdf", save_all=True, append_images=pages[1:], resolution=72)
    (src / "left" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    return src, pdf_pages + 2 * pngs_per_folder


def read_outputs(out: Path) -> dict[str, object]:
    """Every output file by relative path: JSON without timings, text as bytes."""
    got: dict[str, object] = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file() or p.name in ("manifest.jsonl", ".ocrforge.lock"):
            continue
        rel = p.relative_to(out).as_posix()
        if p.suffix == ".json":
            doc = json.loads(p.read_text(encoding="utf-8"))
            doc.pop("timings_ms", None)
            got[rel] = doc
        else:
            got[rel] = p.read_bytes()
    return got


def done_records(out: Path) -> Counter:
    """How many ``done`` records each page name has in the manifest."""
    c: Counter = Counter()
    for line in (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # being written right now
        rec = json.loads(line)
        if rec["status"] == "done":
            c[rec["name"]] += 1
    return c


def temp_files(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.name.endswith(".ocrforge-tmp")]


def mixed_inputs(d: Path, images: int, pdf_pages: int, *, pdf_at: int, bad_at: int,
                 words: tuple[str, str] = ("device page", "no.")) -> list[str]:
    """One-page PNGs of two lines each, a ``pdf_pages``-page PDF inserted at ``pdf_at`` and a
    corrupt PNG at ``bad_at`` (positions among the PNGs): many small inputs of every kind."""
    paths = []
    for i in range(images):
        p = d / f"p{i:02d}.png"
        render_lines([f"{words[0]} {i}", f"{words[1]} {i * 31 % 97}"], size=18, margin=8).image.save(p)
        paths.append(str(p))
    pages = [render_lines([f"pdf page {k + 1}", f"{k * 7} 号"], size=18, margin=8).image
             for k in range(pdf_pages)]
    pdf = d / "doc.pdf"
    pages[0].save(pdf, save_all=True, append_images=pages[1:], resolution=72)
    bad = d / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    return paths[:pdf_at] + [str(pdf)] + paths[pdf_at:bad_at] + [str(bad)] + paths[bad_at:]
