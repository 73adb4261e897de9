"""The layout stage (reading order, blocks, tables, words) of GPU-scheduled pages in worker
processes.

Layout is pure Python over a page's lines (~5-10 ms per document page) and holds the GIL; run
on the GPU driver thread it was the largest share of that thread's time (benchmarks/gpu_bench.py
profile, 2026-12-02), and in another thread it would still take the GIL from it.

What crosses the process boundary is packed (``pack_request`` / ``pack_result``): line and word
corners as one float64 array each, CTC steps as concatenated arrays, and on the way back only
what layout changes (the new order, texts, words, blocks) for the parent to apply to the page
it kept. Pickling whole pages cost the parent ~3 ms of GIL per real page, which the driver
thread then lacked (H200, 2026-12-03: 68 pages/s with layout against 100 without).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np

from ocrforge.result import Line, Page, Word
from ocrforge.scheduling.parent_watch import exit_with_parent
from ocrforge.stages.recognize import CharSteps

_W: dict[str, Any] = {}
_STEP_ARRAYS = ("start", "end", "conf", "gap_space")


def _init(options: dict[str, Any], parent: int) -> None:
    import cv2

    import ocrforge.layout  # noqa: F401  (imported once per process, not per page)

    exit_with_parent(parent)  # a pool whose owner was killed outright ends with it

    cv2.setNumThreads(1)  # as in db_workers: one page at a time per process

    _W["options"] = options


def _quads(polys: list[list[list[float]]]) -> np.ndarray | None:
    """(n, 4, 2) float64 corners, or None when some polygon is not four points."""
    if any(len(p) != 4 for p in polys):
        return None
    return np.asarray(polys, np.float64).reshape(len(polys), 4, 2)


def pack_steps(steps: list[CharSteps | None]) -> tuple:
    """CTC steps of a page's lines as a few concatenated arrays (None stays None)."""
    real = [s for s in steps if s is not None]
    scalars = [(s.text, s.score, s.steps, s.content_steps) for s in real]
    arrays = {}
    for name in _STEP_ARRAYS:
        parts = [getattr(s, name) for s in real]
        arrays[name] = ([-1 if a is None else len(a) for a in parts],
                        np.concatenate([np.asarray(a) for a in parts if a is not None] or [np.zeros(0)]))
    return [s is not None for s in steps], scalars, arrays


def unpack_steps(packed: tuple) -> list[CharSteps | None]:
    present, scalars, arrays = packed
    cut: dict[str, list[np.ndarray | None]] = {}
    for name, (lengths, flat) in arrays.items():
        out, pos = [], 0
        for n in lengths:
            out.append(None if n < 0 else flat[pos: pos + n])
            pos += max(n, 0)
        cut[name] = out
    real = iter(CharSteps(t, sc, cut["start"][k], cut["end"][k], cut["conf"][k], st, cs, cut["gap_space"][k])
                for k, (t, sc, st, cs) in enumerate(scalars))
    return [next(real) if p else None for p in present]


def pack_request(page: Page, steps: list | None) -> tuple | None:
    """What a worker needs to lay ``page`` out, packed; None when the page cannot be packed
    (a polygon that is not four points, lines that already have words): send it whole."""
    lines = page.lines
    quads = _quads([ln.poly for ln in lines]) if lines else np.zeros((0, 4, 2))
    if quads is None or any(ln.words for ln in lines):
        return None
    shell = dataclasses.replace(page, lines=[], timings={})
    return (shell, [ln.text for ln in lines], quads, [ln.score for ln in lines],
            [ln.angle for ln in lines], None if steps is None else pack_steps(steps))


def unpack_request(req: tuple) -> tuple[Page, list | None]:
    shell, texts, quads, scores, angles, steps = req
    polys = quads.tolist()
    shell.lines = [Line(t, p, s, a) for t, p, s, a in zip(texts, polys, scores, angles, strict=True)]
    return shell, None if steps is None else unpack_steps(steps)


def pack_result(page: Page, before: list[Line]) -> tuple | Page:
    """What layout changed in ``page`` (laid out from lines ``before``): order, texts, words,
    blocks; the page itself when its words cannot be packed."""
    index = {id(ln): i for i, ln in enumerate(before)}
    words = [w for ln in page.lines for w in ln.words]
    quads = _quads([w.poly for w in words]) if words else np.zeros((0, 4, 2))
    if quads is None:
        return page
    return ([index[id(ln)] for ln in page.lines], [ln.text for ln in page.lines],
            [len(ln.words) for ln in page.lines], [w.text for w in words], [w.score for w in words],
            quads, page.blocks, page.timings.get("layout"))


def apply_result(page: Page, res: tuple | Page) -> Page:
    """``page`` (as sent) laid out as the worker laid out its copy."""
    if isinstance(res, Page):
        return res
    order, texts, counts, wtexts, wscores, quads, blocks, took = res
    polys = quads.tolist()
    lines = [page.lines[i] for i in order]
    pos = 0
    for ln, text, n in zip(lines, texts, counts, strict=True):
        ln.text = text
        ln.words = [Word(wtexts[k], polys[k], wscores[k]) for k in range(pos, pos + n)]
        pos += n
    page.lines, page.blocks = lines, blocks
    if took is not None:
        page.timings["layout"] = took
    return page


def _work(req: tuple | Page, steps: list | None) -> tuple | Page:
    from ocrforge.core import layout_page

    if isinstance(req, Page):  # sent whole
        return layout_page(req, None, steps, _W["options"])
    page, steps = unpack_request(req)
    before = list(page.lines)
    return pack_result(layout_page(page, None, steps, _W["options"]), before)


class PendingLayout:
    """A page being laid out in a worker: ``result()`` waits for it and applies the result."""

    def __init__(self, page: Page, fut: Future):
        self.page, self.fut = page, fut

    def result(self) -> Page:
        return apply_result(self.page, self.fut.result())


class LayoutPool:
    """``submit(page, steps) -> PendingLayout`` laid out in ``processes`` worker processes."""

    def __init__(self, processes: int, options: dict[str, Any]):
        # spawn: the parent has CUDA initialised; forked children must not inherit that
        self.pool = ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"),
                                        initializer=_init, initargs=(options, os.getpid()))
        for _ in range(processes):  # start them now, while the first pages are on the GPU
            self.pool.submit(int)

    def submit(self, page: Page, steps: list | None) -> PendingLayout:
        req = pack_request(page, steps)
        if req is None:
            return PendingLayout(page, self.pool.submit(_work, page, steps))
        return PendingLayout(page, self.pool.submit(_work, req, None))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
