"""One long-lived run of a GpuScheduler fed from a queue: what the server feeds on the GPU.

Callers (the server's batch worker, or any threads) submit single pages and wait on (or attach
callbacks to) their own futures; the scheduler batches across all of them, as it does for one
``read_many`` over many pages. Before, every server batch started a run of its own (threads, pools, an empty
pipeline), so the GPU saw one small batch at a time.

    stream = GpuStream(engine.gpu_scheduler(limit), options)
    page = stream.submit(image).result()
    stream.close()

Each page resolves its caller's future as soon as it is read (``run_as_read``: its position
in submission order names the future), so a slow page holds back no other caller's. When the
queue runs dry the stream tells the scheduler to flush (``gpu.FLUSH``), so a lone request is
not held back waiting for more pages.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any

from ocrforge.config import ReadOptions
from ocrforge.scheduling.gpu import FLUSH, GpuScheduler, laid_out
from ocrforge.scheduling.layout_workers import PendingLayout

_CLOSE = object()
_IDLE_S = 0.1  # how often an idle stream hands control back to the run's producer


class GpuStream:
    def __init__(self, sch: GpuScheduler, options: ReadOptions | None = None):
        self.sch = sch
        self.options = options
        self._q: queue.Queue = queue.Queue()
        # futures by submission position, until their page is read (one page per submit)
        self._pending: dict[int, Future] = {}
        self._submitted = 0
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ocrforge-gpu-stream", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False once closed or once its run failed (a new stream is then needed)."""
        return not self._closed

    def submit(self, image: Any) -> Future:
        """One page (an image array or anything that decodes to exactly one page)."""
        fut: Future = Future()
        with self._lock:  # the pending order is the queue order
            if self._closed:
                raise RuntimeError("the GPU stream is closed")
            self._pending[self._submitted] = fut
            self._submitted += 1
            self._q.put(image)
        return fut

    def close(self, timeout: float | None = None) -> None:
        """Finish what was submitted, then end the scheduler's run."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._q.put(_CLOSE)
        self._thread.join(timeout)

    def _items(self):
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                yield FLUSH  # nothing more queued now: what is in hand goes to the device
                try:
                    item = self._q.get(timeout=_IDLE_S)
                except queue.Empty:
                    # FLUSH again: the run's producer looks for a stop between items, so a
                    # failed run can end its threads instead of waiting here for a page
                    continue
            if item is _CLOSE:
                return
            yield item

    def _run(self) -> None:
        try:
            for pos, page in self.sch.run_as_read(self._items(), self.options):
                with self._lock:
                    fut = self._pending.pop(pos)
                if isinstance(page, PendingLayout):  # resolved when its worker is done
                    page.fut.add_done_callback(lambda _f, page=page, fut=fut: _settle(fut, page))
                else:
                    fut.set_result(page)
        except BaseException as e:  # the run failed: every waiting caller gets the error
            self._fail(e)
        else:
            self._fail(RuntimeError("the GPU stream ended with pages still pending"))

    def _fail(self, err: BaseException) -> None:
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
        for fut in pending:
            if not fut.done():
                fut.set_exception(err)


def _settle(fut: Future, page: PendingLayout) -> None:
    """The caller's future from a page laid out in a worker (its result or its error)."""
    try:
        fut.set_result(laid_out(page))
    except RuntimeError as e:  # a worker died or layout failed: this page's caller gets it
        fut.set_exception(e)
