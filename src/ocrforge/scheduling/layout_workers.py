"""The layout stage (reading order, blocks, tables, words) of GPU-scheduled pages in worker
processes.

Layout is pure Python over a page's lines (~5-10 ms per document page) and holds the GIL; run
on the GPU driver thread it was the largest share of that thread's time (benchmarks/gpu_bench.py
profile, 2026-12-02), and in another thread it would still take the GIL from it. A page and
its CTC steps go to a process pickled (tens of kB) and come back laid out.
"""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from ocrforge.result import Page

_W: dict[str, Any] = {}


def _init(options: dict[str, Any]) -> None:
    import cv2

    import ocrforge.layout  # noqa: F401  (imported once per process, not per page)

    cv2.setNumThreads(1)  # as in db_workers: one page at a time per process

    _W["options"] = options


def _work(page: Page, steps: list | None) -> Page:
    from ocrforge.core import layout_page

    return layout_page(page, None, steps, _W["options"])


class LayoutPool:
    """``submit(page, steps) -> Future[Page]`` laid out in ``processes`` worker processes."""

    def __init__(self, processes: int, options: dict[str, Any]):
        # spawn: the parent has CUDA initialised; forked children must not inherit that
        self.pool = ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"),
                                        initializer=_init, initargs=(options,))
        for _ in range(processes):  # start them now, while the first pages are on the GPU
            self.pool.submit(int)

    def submit(self, page: Page, steps: list | None) -> Future:
        return self.pool.submit(_work, page, steps)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
