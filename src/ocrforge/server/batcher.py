"""Dynamic batching: pages of concurrent requests merged into one engine call.

A request is admitted by work (``admission.py``), then its pages are decoded one at a time and
``put`` into one shared FIFO queue as they come; each decoded page first takes one of
``max_decoded_pages`` page slots, given back when the engine has read the page, so decoded
images in memory stay bounded however many pages are admitted. One worker thread per engine
takes pages from the queue and runs them through the engine's public API (``run_engine``).

A batch takes at most ``max_batch_pages`` pages and, beyond its first page, only as many as
fit ``max_batch_ms`` of estimated engine time (the admission's cost model): small images batch
together, big pages go one or two at a time, so a batch never holds a request up for long and
the engine's memory for a batch stays small. Pages are taken fairly: the request that has had
the fewest pages read goes first (then the earlier one), so a one-page request is not queued
behind all the pages of a PDF (admission.py accounts for this order). A batch is dispatched when it is full, when the oldest queued page has waited
``max_wait_ms`` (as in Triton's max_queue_delay), or at once when no admitted request still has
pages to decode (nothing is known to be on its way, so waiting would only add latency). A busy
server never waits on purpose: pages that queued during the previous batch go out as soon as
an engine is free. Only pages whose requests asked for the same engine options (det_limit
bucket, cls) share a batch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ocrforge.config import ReadOptions
from ocrforge.io.inputs import PageImage
from ocrforge.result import Page
from ocrforge.server.admission import Admission, Overloaded, Reservation, Stopped
from ocrforge.server.decoding import EncodedPage

if TYPE_CHECKING:
    from ocrforge.engine import OCR

EngineKey = tuple[int, bool]  # (det_limit_side bucket, use_cls)
# batch workers per engine that feeds a GPU stream (Batcher.stream_workers): handing pages to
# the stream does not wait for them to be read, so one keeps it fed; the second goes on
# dispatching while the other runs a batch of cls=on requests (the runner's path, in the call)
STREAM_WORKERS = 2

__all__ = ["Batcher", "EngineKey", "Job", "Overloaded", "Stopped", "run_engine"]


@dataclass
class Job:
    """One request's pages on their way through the engines; await ``future``."""

    key: EngineKey
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    reservation: Reservation | None = None
    seq: int = 0  # opening order
    opened: float = field(default_factory=time.perf_counter)
    results: list[Page | None] = field(default_factory=list)
    put_count: int = 0
    dispatched: int = 0  # pages handed to an engine
    done_count: int = 0
    input_done: bool = False
    cancelled: bool = False
    started: float | None = None  # first engine call with one of its pages
    first_done: float | None = None  # first page read
    infer_s: float = 0.0
    batch_pages: int = 0  # largest batch (in pages) this job was part of
    batch_requests: int = 0  # requests in that batch

    @property
    def queue_s(self) -> float:
        return (self.started or self.opened) - self.opened


class UnreadablePage(ValueError):
    """An encoded page its engine could not decode (the request's input is at fault)."""


@dataclass
class _Item:
    job: Job
    index: int
    page: PageImage | EncodedPage
    enqueued: float


def run_engine(engine: OCR, pages: list[PageImage], key: EngineKey) -> list[Page]:
    """One batch through the engine's public API with this request's options."""
    det_limit, use_cls = key
    return engine.ocr_images(pages, ReadOptions(det_limit_side=det_limit, use_cls=use_cls))


def streams_to_gpu(engine: OCR, gpu_pipeline: bool | None) -> bool:
    """Whether the server feeds this engine's pages to a long-lived GPU scheduler run
    (runtime torch; ``--gpu-pipeline``, by default on CUDA) rather than ``run_engine``."""
    if engine.config.runtime.backend != "torch":
        return False
    if gpu_pipeline is None:
        return str(engine.config.runtime.device).startswith("cuda")
    return gpu_pipeline


class Batcher:
    """Dynamic batcher over one or more engines (one worker thread each)."""

    def __init__(
        self,
        engines: list[OCR],
        *,
        max_batch_pages: int = 8,
        max_wait_ms: float = 10.0,
        max_batch_ms: float = 1000.0,
        admission: Admission | None = None,
        max_decoded_pages: int | None = None,
        on_batch: Callable[[int, int, float], None] | None = None,
        gpu_pipeline: bool | None = None,
        stream_factory: Callable[[OCR, int], Any] | None = None,
    ):
        if not engines:
            raise ValueError("at least one engine is needed")
        self.engines = engines
        self.max_batch_pages = max(1, max_batch_pages)
        self.max_wait_s = max(0.0, max_wait_ms) / 1000.0
        self.max_batch_s = max(0.0, max_batch_ms) / 1000.0
        self.admission = admission or Admission(max_pages=256, engines=len(engines))
        # decoded pages in memory: one batch running and one ready per engine
        self.max_decoded_pages = max_decoded_pages or max(4, 2 * self.max_batch_pages * len(engines))
        self._slots = asyncio.Semaphore(self.max_decoded_pages)
        self._on_batch = on_batch
        self.gpu_pipeline = gpu_pipeline
        # a GPU stream for (engine, detection limit); None: GpuStream in this process
        self.stream_factory = stream_factory
        self.stream_workers = STREAM_WORKERS
        self._streams: dict[tuple[int, int], Any] = {}
        self._streams_lock = threading.Lock()
        if max_decoded_pages is None and any(self.streaming(e) for e in engines):
            # a GPU stream's scheduler reads best with its whole window in flight
            # (gpu.max_inflight pages), plus a batch or two queued behind it
            self.max_decoded_pages = sum(
                e.config.gpu.max_inflight + 2 * self.max_batch_pages if self.streaming(e)
                else 2 * self.max_batch_pages for e in engines)
            self._slots = asyncio.Semaphore(self.max_decoded_pages)
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._incoming = 0  # admitted jobs that may still put pages
        self._decoded = 0  # pages holding a slot (decoding, queued or running)
        self._stopping = False
        self._seq = 0
        self._last_read = 0.0  # when the last streamed page was read
        self._threads: list[threading.Thread] = []
        self.keys_seen: set[EngineKey] = set()  # option keys run so far (bounded by bucketing)

    # ------------------------------------------------------------------ state
    @property
    def queued_pages(self) -> int:
        return len(self._queue)

    @property
    def decoded_pages(self) -> int:
        return self._decoded

    @property
    def admitted_pages(self) -> int:
        return self.admission.pending_pages

    def default_key(self) -> EngineKey:
        e = self.engines[0]
        return (e.config.det.limit_side, e.config.cls.enabled)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for i, eng in enumerate(self.engines):
            for k in range(self.stream_workers if self.streaming(eng) else 1):
                t = threading.Thread(target=self._worker, args=(i, eng),
                                     name=f"ocrforge-engine-{i}" + (f"-{k}" if k else ""), daemon=True)
                t.start()
                self._threads.append(t)

    def streaming(self, engine: OCR) -> bool:
        """Batches of this engine go to a long-lived GPU stream (``--gpu-pipeline``, torch)."""
        return streams_to_gpu(engine, self.gpu_pipeline)

    def _stream(self, engine: OCR, det_limit: int) -> Any:
        from ocrforge.scheduling.gpu_stream import GpuStream

        retired = None
        with self._streams_lock:
            st = self._streams.get((id(engine), det_limit))
            if st is None or not st.alive:  # a failed run fails its own pages, not the server
                retired = st
                st = self._streams[(id(engine), det_limit)] = (
                    self.stream_factory(engine, det_limit) if self.stream_factory else GpuStream(
                        engine.gpu_scheduler(det_limit), ReadOptions(det_limit_side=det_limit)))
        if retired is not None:  # a dead engine child is reaped, and its queues let go
            retired.close(5.0)
        return st

    def takes_encoded(self, key: EngineKey) -> bool:
        """Pages of this key may be queued still encoded (``EncodedPage``): they go to streams
        whose engine decodes in its own process (``stream_factory``, ``--engine-process``),
        never through ``ocr_images`` here (cls=on requests)."""
        return (self.stream_factory is not None and not key[1]
                and all(self.streaming(e) for e in self.engines))

    def stream_for(self, engine: OCR, det_limit: int) -> Any:
        """The stream this engine's pages of this detection limit go to (started if need be)."""
        return self._stream(engine, det_limit)

    def stop(self, timeout: float | None = None) -> bool:
        """Take no new requests, finish every admitted page, stop the workers. True if they
        all stopped."""
        self.admission.stop()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._streams_lock:
            streams, self._streams = list(self._streams.values()), {}
        for st in streams:
            st.close(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    # ------------------------------------------------------------------ requests
    def admit(self, units: list[float], time_left_s: float) -> Reservation:
        """Reserve room for a request with pages of these work units (see admission.py);
        raises Overloaded (answer 429) or Stopped (503)."""
        if self._stopping:
            raise Stopped("server is shutting down")
        return self.admission.admit(units, time_left_s)

    def open(self, key: EngineKey, reservation: Reservation | None = None) -> Job:
        """A job for one admitted request; call from the event loop."""
        loop = asyncio.get_running_loop()
        job = Job(key, loop.create_future(), loop, reservation)
        with self._cond:
            self._seq += 1
            job.seq = self._seq
            self._incoming += 1
        return job

    async def acquire_slot(self) -> None:
        """Wait for room for one more decoded page (given back by ``put``'s page when read)."""
        await self._slots.acquire()
        with self._cond:
            self._decoded += 1

    def release_slot(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Give back a slot whose page never reached the queue (or left it); any thread."""
        with self._cond:
            self._decoded -= 1
        if loop is None:
            self._slots.release()
            return
        try:
            loop.call_soon_threadsafe(self._slots.release)
        except RuntimeError:  # loop closed: nobody waits for slots any more
            pass

    def put(self, job: Job, page: PageImage | EncodedPage) -> None:
        """Queue the job's next page (its slot is taken with ``acquire_slot`` first)."""
        with self._cond:
            if job.cancelled:
                self._decoded -= 1
                self._slots.release()
                return
            job.results.append(None)
            self._queue.append(_Item(job, job.put_count, page, time.perf_counter()))
            job.put_count += 1
            self._cond.notify_all()

    def finish(self, job: Job) -> None:
        """No more pages for this job: it resolves when the queued ones are read."""
        with self._cond:
            if job.input_done:
                return
            job.input_done = True
            self._incoming -= 1
            self._cond.notify_all()
            done = job.done_count == job.put_count and not job.cancelled
        if job.reservation is not None:
            job.reservation.release(job.put_count)  # pages the probe counted, decode did not yield
        if done:
            _resolve(job, result=job.results)

    def cancel(self, job: Job) -> None:
        """Drop the job's pages that have not started (its request timed out or failed)."""
        with self._cond:
            job.cancelled = True
            dropped = [it for it in self._queue if it.job is job]
            if dropped:
                self._queue = deque(it for it in self._queue if it.job is not job)
                self._decoded -= len(dropped)
            if not job.input_done:
                job.input_done = True
                self._incoming -= 1
            self._cond.notify_all()
        for _ in dropped:
            self._slots.release()
        if job.reservation is not None:
            job.reservation.release()

    # ------------------------------------------------------------------ workers
    def _next_batch(self, eager: bool = False) -> list[_Item] | None:
        """Called with the lock held; blocks until a batch is due (at once when ``eager``: a
        GPU stream batches by itself). None: stop."""
        while True:
            if not self._queue:
                if self._stopping and self._incoming <= 0:
                    return None
                self._cond.wait()
                continue
            head = self._queue[0]
            chosen, full = self._fill()
            wait = head.enqueued + self.max_wait_s - time.perf_counter()
            due = eager or wait <= 0 or self._incoming <= 0 or self._stopping
            if full or due:
                ids = {id(it) for it in chosen}
                self._queue = deque(it for it in self._queue if id(it) not in ids)
                for it in chosen:
                    it.job.dispatched += 1
                return chosen
            self._cond.wait(wait)

    def _fill(self) -> tuple[list[_Item], bool]:
        """The next batch: queued pages by (pages of their request already taken, request
        order), of the options key of the first, up to max_batch_pages pages and max_batch_ms
        of estimated time. ``full``: pages were left out by those caps (waiting cannot grow
        the batch)."""
        taken: dict[int, int] = {}
        order = []
        for it in self._queue:
            k = taken.get(id(it.job), it.job.dispatched)
            taken[id(it.job)] = k + 1
            order.append((k, it.job.seq, it.index, it))
        order.sort(key=lambda t: t[:3])
        key = order[0][3].job.key
        chosen: list[_Item] = []
        est, unit_s = 0.0, self.admission.unit_s
        for *_, it in order:
            if it.job.key != key:
                continue
            cost = _units(it) * unit_s
            if chosen and (len(chosen) >= self.max_batch_pages or est + cost > self.max_batch_s):
                return chosen, True
            chosen.append(it)
            est += cost
        return chosen, len(chosen) >= self.max_batch_pages

    def _worker(self, index: int, engine: OCR) -> None:
        while True:
            with self._cond:
                batch = self._next_batch(eager=self.streaming(engine))
                if batch is None:
                    return
            self._execute(engine, batch)

    def _execute(self, engine: OCR, batch: list[_Item]) -> None:
        key = batch[0].job.key
        self.keys_seen.add(key)
        t0 = time.perf_counter()
        for j in _jobs(batch):
            if j.started is None:
                j.started = t0
        if self.streaming(engine) and not key[1]:  # the line classifier: the runner's path
            self._submit_to_stream(engine, batch, key, t0)
            return
        try:
            pages = run_engine(engine, [it.page for it in batch], key)
            error: BaseException | None = None
        except BaseException as e:  # an engine failure fails this batch's requests, not the server
            pages, error = [], e
        dt = time.perf_counter() - t0
        if error is None:
            self.admission.observe(sum(_units(it) for it in batch), dt)
        self._note_batch(batch, dt)
        self._complete(batch, pages, error)

    def _submit_to_stream(self, engine: OCR, batch: list[_Item], key: EngineKey, t0: float
                          ) -> None:
        """Hand the batch's pages to the engine's GPU stream and return: the stream batches
        across every page in flight, so this worker goes on to the next batch, and each page
        completes its request's share on its own (a bad page fails only its own request)."""
        try:
            stream = self._stream(engine, key[0])
            futs = [stream.submit(it.page.image) for it in batch]
        except BaseException as e:  # the stream is closed or failed: these requests get it
            self._note_batch(batch, time.perf_counter() - t0)
            self._complete(batch, [], e)
            return
        left = [len(batch)]
        for it, fut in zip(batch, futs, strict=True):
            fut.add_done_callback(lambda f, it=it: self._page_read(it, f, batch, left, t0))

    def _page_read(self, it: _Item, fut: Any, batch: list[_Item], left: list[int], t0: float
                   ) -> None:
        """One streamed page is read (the stream's or a layout worker's thread)."""
        try:
            page, error = fut.result(), None
            if page.error:
                # an encoded page's error is its decode's: bad input, not an engine failure
                fail = UnreadablePage if isinstance(it.page, EncodedPage) else RuntimeError
                page, error = None, fail(f"{it.page.source}: {page.error}")
            else:
                page.source, page.page_index = it.page.source, it.page.index
        except BaseException as e:
            page, error = None, e
        now = time.perf_counter()
        with self._cond:
            # time between pages read: the stream reads many at once, so a page's own latency
            # would overstate what a unit of work costs (the admission's drain estimate)
            since, self._last_read = max(t0, self._last_read), now
            left[0] -= 1
            last = left[0] == 0
        if error is None:
            self.admission.observe(_units(it), now - since)
        if last:
            self._note_batch(batch, now - t0)
        self._complete([it], [page] if page is not None else [], error)

    def _note_batch(self, batch: list[_Item], dt: float) -> None:
        jobs = _jobs(batch)
        if self._on_batch is not None:
            try:
                self._on_batch(len(batch), len(jobs), dt)
            except Exception:
                pass
        for j in jobs:
            j.infer_s += dt
            if len(batch) > j.batch_pages:
                j.batch_pages, j.batch_requests = len(batch), len(jobs)

    def _complete(self, items: list[_Item], pages: list[Page], error: BaseException | None
                  ) -> None:
        """Pages read (or failed): results into their jobs, slots back, finished jobs resolved."""
        t1 = time.perf_counter()
        finished: list[Job] = []
        with self._cond:
            self._decoded -= len(items)
            for n, it in enumerate(items):
                j = it.job
                if error is None:
                    j.results[it.index] = pages[n]
                    if j.first_done is None:
                        j.first_done = t1
                j.done_count += 1
                if j.input_done and j.done_count == j.put_count and j not in finished:
                    finished.append(j)
        for it in items:
            if it.job.reservation is not None:
                it.job.reservation.page_done(it.index)
            try:
                it.job.loop.call_soon_threadsafe(self._slots.release)
            except RuntimeError:
                pass
            it.page = None  # type: ignore[assignment]  # the image is not needed any more
        if error is not None:
            for j in _jobs(items):
                _resolve(j, error=error)
            return
        for j in finished:
            _resolve(j, result=j.results)


def _jobs(items: list[_Item]) -> list[Job]:
    return list({id(it.job): it.job for it in items}.values())


def _units(it: _Item) -> float:
    r = it.job.reservation
    if r is not None and it.index < len(r.units):
        return r.units[it.index]
    return 1.0


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
