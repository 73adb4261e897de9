"""Several engines, one queue: pages spread over devices (one engine per GPU, or a few per CPU).

    inputs -> producer thread -> shared queue of tasks -> one worker thread per engine
                                                          (its own read_many: the CPU pipeline
                                                          or the GPU scheduler) -> results by
                                                          input position -> caller, in order

A task is one page: a single-page input goes to the device as it is (the device decodes it, on
its own decode threads or the GPU's JPEG decoder); a PDF given by path goes out as one-page
slices (``PageSlice``) that each device renders itself; any other input that may hold several
pages (TIFF, GIF, WebP, PDF bytes, stdin, a file object, or any input under a page range) is
decoded by the producer and its pages go out one by one, so one long PDF is spread over every
device. A worker takes a task whenever
its engine asks for input, so a slow page on one device never holds the others back; only the
order of the results waits for it.

A device that fails (any exception out of its engine: out of memory, a lost GPU) is retired and
its in-flight pages go back to the front of the queue for the others; every page is delivered
exactly once. When every device has failed, the caller gets a RuntimeError naming each one.
Pages that fail as input (corrupt, too large) are not device failures: they come back as error
pages, as from ``OCR.read_many``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from ocrforge.config import ReadOptions
from ocrforge.io.inputs import InputError, PageSlice, sniff
from ocrforge.result import Page
from ocrforge.scheduling.pipeline import decoded, error_page
from ocrforge.scheduling.processes import pdf_pages

if TYPE_CHECKING:
    from ocrforge.engine import OCR

MULTI_PAGE_KINDS = ("pdf", "tiff", "gif", "webp")


@dataclass
class _Task:
    seq: int
    item: Any  # a single-page input as given, or a decoded PageImage


@dataclass
class _Worker:
    index: int
    engine: OCR
    device: str
    inflight: deque = field(default_factory=deque)
    dead: bool = False
    error: str = ""
    pages: int = 0


class DevicePool:
    """One engine per device behind the ``read_many`` of a single engine.

    >>> pool = DevicePool([OCR(device="cuda:0"), OCR(device="cuda:1")])
    >>> for page in pool.read_many(paths): ...   # input order, every page once

    ``queue_per_device``: tasks waiting in the shared queue per device (bounds the decoded pages
    held there). ``pages_per_device`` counts each device's pages over the pool's life.
    """

    def __init__(self, engines: Sequence[OCR], *, queue_per_device: int = 4):
        if not engines:
            raise ValueError("DevicePool needs at least one engine")
        self.engines = list(engines)
        self.config = self.engines[0].config
        self.devices = [e.config.runtime.device for e in self.engines]
        self.queue_size = max(2, queue_per_device * len(self.engines))
        self.pages_per_device = [0] * len(self.engines)

    def read(self, item: Any, **kw: Any) -> Page:
        return self.engines[0].read(item, **kw)

    def read_many(self, items: Iterable[Any], *, options: ReadOptions | None = None,
                  batch_pages: int | None = None) -> Iterator[Page]:
        """OCR many inputs on every device, one Page per page, in input order."""
        run = _Run(self, items, options, batch_pages)
        try:
            yield from run.ordered()
        finally:
            run.stop()
            for w in run.workers:
                self.pages_per_device[w.index] += w.pages

    def close(self) -> None:
        for e in self.engines:
            e.close()


def may_have_many_pages(item: Any, pages: str | None) -> bool:
    """True when an input may give more (or fewer) pages than one: the pool decodes it itself."""
    if pages:
        return True  # a page range can leave a single image with no page at all
    if isinstance(item, (np.ndarray, Image.Image)):
        return False
    if not isinstance(item, (str, os.PathLike, bytes, bytearray, memoryview)):
        return True  # a file object, say: read here, once, and sent on as decoded pages
    if isinstance(item, str) and item == "-":
        return True  # stdin can be read only once, here
    if isinstance(item, (str, os.PathLike)):
        try:
            with open(item, "rb") as f:
                head = f.read(1024)
        except OSError:
            return False  # the device's decoder names the error
    elif isinstance(item, (bytes, bytearray, memoryview)):
        head = bytes(item[:1024])
    else:
        return False
    return sniff(head) in MULTI_PAGE_KINDS


class _Run:
    """The state of one read_many call: queue, workers, results; one lock for all of it."""

    def __init__(self, pool: DevicePool, items: Iterable[Any], options: ReadOptions | None,
                 batch_pages: int | None):
        self.pool, self.options, self.batch_pages = pool, options, batch_pages
        self.cond = threading.Condition()
        self.queue: deque[_Task] = deque()
        self.results: dict[int, Page] = {}  # done, not yet handed to the caller
        self.produced = 0  # tasks and error pages created so far
        self.completed = 0  # of those, how many have their Page
        self.producer_done = False
        self.failure: BaseException | None = None  # the items iterator raised
        self.stopping = False
        self.workers = [_Worker(i, e, d) for i, (e, d) in
                        enumerate(zip(pool.engines, pool.devices, strict=True))]
        self.threads = [threading.Thread(target=self._produce, args=(items,), daemon=True,
                                         name="ocrforge-devices-decode")]
        self.threads += [threading.Thread(target=self._work, args=(w,), daemon=True,
                                          name=f"ocrforge-device-{w.index}")
                         for w in self.workers]
        for t in self.threads:
            t.start()

    # ------------------------------------------------------------------ producer
    def _produce(self, items: Iterable[Any]) -> None:
        first = self.pool.engines[0]
        pages = first.config.limits.pages
        try:
            for item in items:
                if self.stopping:
                    return
                if not may_have_many_pages(item, pages):
                    self._add(item)
                    continue
                sel = pdf_pages(item, first.config.limits)
                if sel is not None:  # one page each, read (rendered) by the device's engine
                    for i in sel:
                        self._add(PageSlice(item, i, i))
                    continue
                for got, _ in decoded(first.decode, item):
                    if isinstance(got, InputError):
                        self._add_result(error_page(got))
                    else:
                        self._add(got)
                    if self.stopping:
                        return
        except BaseException as e:  # the items iterator itself failed: the caller gets it
            with self.cond:
                self.failure = e
        finally:
            with self.cond:
                self.producer_done = True
                self.cond.notify_all()

    def _add(self, item: Any) -> None:
        with self.cond:
            while len(self.queue) >= self.pool.queue_size and not self.stopping:
                self.cond.wait()
            self.queue.append(_Task(self.produced, item))
            self.produced += 1
            self.cond.notify_all()

    def _add_result(self, page: Page) -> None:
        with self.cond:
            self.results[self.produced] = page
            self.produced += 1
            self.completed += 1
            self.cond.notify_all()

    # ------------------------------------------------------------------ workers
    def _work(self, w: _Worker) -> None:
        """Sessions of the engine's own read_many over the shared queue; a new session starts
        when a failed device puts pages back after this one's input had ended."""
        while True:
            with self.cond:
                while not self.queue and not self._finished():
                    self.cond.wait()
                if not self.queue or self.stopping:
                    return
            try:
                for page in w.engine.read_many(self._feed(w), options=self.options,
                                               batch_pages=self.batch_pages):
                    with self.cond:
                        task = w.inflight.popleft()
                        self.results[task.seq] = page
                        self.completed += 1
                        w.pages += 1
                        self.cond.notify_all()
            except Exception as e:
                self._retire(w, e)
                return

    def _feed(self, w: _Worker) -> Iterator[Any]:
        """The items of one session: tasks from the shared queue, while there are any or the
        producer may still add some."""
        while True:
            with self.cond:
                while not self.queue and not self.producer_done and not self.stopping:
                    self.cond.wait()
                if w.dead or self.stopping or not self.queue:
                    return
                task = self.queue.popleft()
                w.inflight.append(task)
                self.cond.notify_all()
            yield task.item

    def _retire(self, w: _Worker, e: BaseException) -> None:
        with self.cond:
            w.dead = True
            w.error = f"{type(e).__name__}: {e}"
            # back to the front, in order: the oldest pages are the ones the caller waits for
            self.queue.extendleft(reversed(w.inflight))
            w.inflight.clear()
            alive = [x.device for x in self.workers if not x.dead]
            self.cond.notify_all()
        where = f"; its pages go to {', '.join(alive)}" if alive else ""
        print(f"ocrforge: device {w.device} failed ({w.error}){where}", file=sys.stderr)

    def _finished(self) -> bool:
        return self.stopping or (self.producer_done and self.completed >= self.produced
                                 and not self.queue)

    # ------------------------------------------------------------------ caller
    def ordered(self) -> Iterator[Page]:
        nxt = 0
        while True:
            with self.cond:
                while nxt not in self.results:
                    if self.producer_done and nxt >= self.produced:
                        if self.failure is not None:
                            raise self.failure
                        return
                    if all(w.dead for w in self.workers):
                        raise RuntimeError("every device failed: " + "; ".join(
                            f"{w.device}: {w.error}" for w in self.workers))
                    self.cond.wait()
                page = self.results.pop(nxt)
                self.cond.notify_all()
            nxt += 1
            yield page

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=10)


__all__ = ["DevicePool", "may_have_many_pages"]
