"""Dynamic batching: pages of concurrent requests merged into one engine call.

The event loop submits a Job (the decoded pages of one request) and awaits its future.
One worker thread per engine takes pages from a shared FIFO queue and runs
``engine.ocr_images(pages)`` (detection per page, recognition batched across all pages).
A batch is dispatched when it holds ``max_batch_pages`` pages, when the oldest queued
page has waited ``max_wait_ms`` (as in Triton's max_queue_delay), or at once when no admitted
request is still decoding (nothing is known to be on its way, so waiting would only add
latency). A busy server never waits on purpose: pages that queued during the previous batch
go out as soon as an engine is free.

Only pages whose requests asked for the same engine options (det_limit, cls) share a batch.
Admission is bounded: ``admit()`` raises Overloaded when ``queue_size`` requests are already
decoding, queued or running, so latency stays bounded and the caller can answer 429.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ocrforge.config import ReadOptions
from ocrforge.io.inputs import PageImage
from ocrforge.result import Page

if TYPE_CHECKING:
    from ocrforge.engine import OCR

EngineKey = tuple[int, bool]  # (det_limit_side, use_cls)


class Overloaded(Exception):
    """The admission queue is full; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float, limit: int):
        super().__init__(f"server is at its limit of {limit} queued requests")
        self.retry_after = retry_after
        self.limit = limit


class Stopped(Exception):
    """The batcher is shutting down and takes no new work."""


class Ticket:
    """One admitted request's slot; release() is idempotent."""

    def __init__(self, batcher: Batcher):
        self._batcher = batcher
        self._released = False
        self.submitted = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._batcher._release(self)


@dataclass
class Job:
    pages: list[PageImage]
    key: EngineKey
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.perf_counter)
    results: list[Page | None] = field(default_factory=list)
    remaining: int = 0
    started: float | None = None
    infer_s: float = 0.0
    batch_pages: int = 0  # largest batch (in pages) this job was part of
    batch_requests: int = 0  # requests in that batch
    cancelled: bool = False

    @property
    def queue_s(self) -> float:
        return (self.started or self.enqueued) - self.enqueued


@dataclass
class _Item:
    job: Job
    index: int
    enqueued: float


def run_engine(engine: OCR, pages: list[PageImage], key: EngineKey,
               gpu_pipeline: bool = False) -> list[Page]:
    """One batch through the engine's public API with this request's options; on CUDA with
    the torch runtime optionally through the engine's GPU scheduler (one per det-limit bucket)."""
    det_limit, use_cls = key
    opts = ReadOptions(det_limit_side=det_limit, use_cls=use_cls)
    cfg = engine.config
    if gpu_pipeline and cfg.runtime.backend == "torch" and cfg.runtime.on_gpu and not use_cls:
        out = list(engine.read_many([p.image for p in pages], options=opts))
        if len(out) != len(pages):
            raise RuntimeError(f"GPU scheduler returned {len(out)} pages for {len(pages)}")
        for src, page in zip(pages, out, strict=True):
            if page.error:
                raise RuntimeError(f"{src.source}: {page.error}")
            page.source, page.page_index = src.source, src.index
        return out
    return engine.ocr_images(pages, opts)


class Batcher:
    """Dynamic batcher over one or more engines (one worker thread each)."""

    def __init__(
        self,
        engines: list[OCR],
        *,
        max_batch_pages: int = 8,
        max_wait_ms: float = 10.0,
        queue_size: int = 64,
        cls_runtimes: list[Any | None] | None = None,
        on_batch: Callable[[int, int, float], None] | None = None,
        gpu_pipeline: bool = False,
    ):
        if not engines:
            raise ValueError("at least one engine is needed")
        self.engines = engines
        self.max_batch_pages = max(1, max_batch_pages)
        self.max_wait_s = max(0.0, max_wait_ms) / 1000.0
        self.queue_size = queue_size
        self._cls_runtimes = cls_runtimes or [None for _ in engines]
        self._on_batch = on_batch
        self.gpu_pipeline = gpu_pipeline
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._admitted = 0
        self._incoming = 0  # admitted but not yet submitted (still decoding)
        self._running_pages = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._page_s = 0.5  # running mean of engine seconds per page, for Retry-After

    # ------------------------------------------------------------------ state
    @property
    def queued_pages(self) -> int:
        return len(self._queue)

    @property
    def admitted(self) -> int:
        return self._admitted

    def default_key(self) -> EngineKey:
        e = self.engines[0]
        return (e.config.det.limit_side, e.config.cls.enabled)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for i, eng in enumerate(self.engines):
            t = threading.Thread(target=self._worker, args=(i, eng), name=f"ocrforge-engine-{i}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float | None = None) -> bool:
        """Finish every queued page, then stop the workers. True if they all stopped."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    # ------------------------------------------------------------------ admission
    def retry_after(self) -> float:
        backlog = len(self._queue) + self._running_pages
        return max(1.0, math.ceil(backlog * self._page_s / len(self.engines)))

    def admit(self) -> Ticket:
        """Reserve a slot for one request, or raise Overloaded / Stopped."""
        with self._cond:
            if self._stopping:
                raise Stopped("server is shutting down")
            if self._admitted >= self.queue_size:
                raise Overloaded(self.retry_after(), self.queue_size)
            self._admitted += 1
            self._incoming += 1
        return Ticket(self)

    def _release(self, ticket: Ticket) -> None:
        with self._cond:
            self._admitted -= 1
            if not ticket.submitted:
                ticket.submitted = True
                self._incoming -= 1
                self._cond.notify_all()

    # ------------------------------------------------------------------ submit
    def submit(self, pages: list[PageImage], key: EngineKey | None = None,
               ticket: Ticket | None = None) -> Job:
        """Queue the pages of one request (admitted with ``ticket``); await ``job.future``."""
        loop = asyncio.get_running_loop()
        job = Job(pages, key or self.default_key(), loop.create_future(), loop)
        job.results = [None] * len(pages)
        job.remaining = len(pages)
        now = time.perf_counter()
        with self._cond:
            if ticket is not None and not ticket.submitted:
                ticket.submitted = True
                self._incoming -= 1
            if self._stopping:
                raise Stopped("server is shutting down")
            if pages:
                self._queue.extend(_Item(job, i, now) for i in range(len(pages)))
            self._cond.notify_all()
        if not pages:
            job.future.set_result([])
        return job

    def cancel(self, job: Job) -> None:
        """Drop the job's pages that have not started (its request timed out or went away)."""
        with self._cond:
            job.cancelled = True
            if any(it.job is job for it in self._queue):
                self._queue = deque(it for it in self._queue if it.job is not job)

    # ------------------------------------------------------------------ workers
    def _next_batch(self) -> list[_Item] | None:
        """Called with the lock held; blocks until a batch is due. None: stop."""
        while True:
            if not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
                continue
            head = self._queue[0]
            key = head.job.key
            chosen = [it for it in self._queue if it.job.key == key][: self.max_batch_pages]
            wait = head.enqueued + self.max_wait_s - time.perf_counter()
            due = wait <= 0 or self._incoming <= 0 or self._stopping
            if len(chosen) >= self.max_batch_pages or due:
                ids = {id(it) for it in chosen}
                self._queue = deque(it for it in self._queue if id(it) not in ids)
                return chosen
            self._cond.wait(wait)

    def _worker(self, index: int, engine: OCR) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
                if batch is None:
                    return
                self._running_pages += len(batch)
            try:
                self._execute(index, engine, batch)
            finally:
                with self._cond:
                    self._running_pages -= len(batch)

    def _execute(self, index: int, engine: OCR, batch: list[_Item]) -> None:
        key = batch[0].job.key
        jobs = list({id(it.job): it.job for it in batch}.values())
        t0 = time.perf_counter()
        for j in jobs:
            if j.started is None:
                j.started = t0
        try:
            pages = run_engine(engine, [it.job.pages[it.index] for it in batch], key,
                               self.gpu_pipeline)
            error: BaseException | None = None
        except BaseException as e:  # an engine failure fails this batch's requests, not the server
            pages, error = [], e
        dt = time.perf_counter() - t0
        self._page_s = 0.8 * self._page_s + 0.2 * (dt / len(batch))
        if self._on_batch is not None:
            try:
                self._on_batch(len(batch), len(jobs), dt)
            except Exception:
                pass
        for j in jobs:
            j.infer_s += dt
            if len(batch) > j.batch_pages:
                j.batch_pages, j.batch_requests = len(batch), len(jobs)
        if error is not None:
            for j in jobs:
                _resolve(j, error=error)
            return
        for it, page in zip(batch, pages, strict=True):
            j = it.job
            j.results[it.index] = page
            j.remaining -= 1
            if j.remaining == 0:
                _resolve(j, result=j.results)


def _resolve(job: Job, *, result: Any = None, error: BaseException | None = None) -> None:
    def apply() -> None:
        if job.future.done():  # timed out or cancelled meanwhile
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    try:
        job.loop.call_soon_threadsafe(apply)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass
