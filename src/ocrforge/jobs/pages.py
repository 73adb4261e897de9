"""Inputs to pages, lazily, with finished pages left out: shared by the local and Ray jobs.

A PDF is rendered one page at a time (``ocrforge.io.inputs.iter_pages``), so a 1000-page
book never sits in memory whole. Each input's bytes are read once: hashed (the resume key)
and decoded from the same buffer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ocrforge.io.inputs import InputError, iter_pages
from ocrforge.io.inputs import count_pages as io_count_pages
from ocrforge.jobs.naming import page_name


@dataclass
class PageTask:
    """One page to read."""

    source: str
    rel: str
    page: int
    sha256: str
    image: np.ndarray | None  # BGR uint8 (None once handed to the engine)
    pages: int = 1  # pages of the input (names are padded to its digits)

    @property
    def name(self) -> str:
        return page_name(self.rel, self.page, self.pages)


@dataclass
class PageSkipped:
    """A page an earlier run finished."""

    source: str
    rel: str
    page: int


@dataclass
class InputSkipped:
    """A whole input an earlier run finished: none of its pages is rendered."""

    source: str
    rel: str
    pages: int


@dataclass
class InputFailed:
    """An input (page None) or one of its pages cannot be read; later pages are not reached."""

    source: str
    page: int | None
    sha256: str | None
    error: str


@dataclass
class InputEnd:
    """Every page of an input was handed out: ``emitted`` to read, ``pages`` in all."""

    source: str
    rel: str
    sha256: str
    pages: int
    emitted: int


Event = PageTask | PageSkipped | InputSkipped | InputFailed | InputEnd


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def input_events(data: bytes, source: str, rel: str, *,
                 page_done: Callable[[str, str], bool],
                 input_done: Callable[[str, str], int | None],
                 pdf_dpi: int, max_pixels: int, max_pdf_pages: int) -> Iterator[Event]:
    """Pages of one input's bytes as events.

    ``input_done(rel, sha256)`` gives the page count of an input an earlier run finished (it is
    then skipped whole); ``page_done(page_name, sha256)`` says which single pages to skip.
    """
    sha = sha256_of(data)
    n = input_done(rel, sha)
    if n is not None:
        yield InputSkipped(source, rel, n)
        return
    k = 0  # pages handled (the next page's index)
    emitted = 0
    skipped: list[int] = []  # done pages passed over, in order, not rendered

    def skip(i: int) -> bool:
        if page_done(page_name(rel, i, total), sha):
            skipped.append(i)
            return True
        return False

    def passed_over() -> Iterator[PageSkipped]:
        nonlocal k
        for i in skipped:
            k = i + 1
            yield PageSkipped(source, rel, i)
        skipped.clear()

    try:
        total = io_count_pages(data).total
        for p in iter_pages(data, source=source, pdf_dpi=pdf_dpi, max_pixels=max_pixels,
                            max_pdf_pages=max_pdf_pages, skip=skip):
            yield from passed_over()
            emitted += 1
            yield PageTask(source, rel, p.index, sha, p.image, total)
            k = p.index + 1
        yield from passed_over()
    except InputError as e:
        yield from passed_over()
        yield InputFailed(source, k if k else None, sha, e.reason)
        return
    except Exception as e:  # a decoder bug is still this input's failure, not the job's
        yield from passed_over()
        yield InputFailed(source, k if k else None, sha, f"cannot read ({type(e).__name__}: {e})")
        return
    yield InputEnd(source, rel, sha, k, emitted)


def read_input(path: str) -> bytes | InputFailed:
    """The bytes of an input file, or the failure naming it."""
    try:
        p = Path(path)
        if p.is_dir():
            return InputFailed(path, None, None, "is a folder")
        return p.read_bytes()
    except FileNotFoundError:
        return InputFailed(path, None, None, "file not found")
    except OSError as e:
        return InputFailed(path, None, None, f"cannot read file ({e.strerror or e})")


def count_pages(path: str) -> int:
    """Pages in an input from its header only (no rendering); 1 when it cannot tell."""
    try:
        return max(1, io_count_pages(path).total)
    except InputError:  # unreadable inputs fail later, with a proper message
        return 1


__all__ = ["Event", "InputEnd", "InputFailed", "InputSkipped", "PageSkipped", "PageTask", "count_pages",
           "input_events", "read_input", "sha256_of"]
