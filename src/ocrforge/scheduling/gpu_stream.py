"""One long-lived run of a GpuScheduler fed from a queue: what the server feeds on the GPU.

Callers (the server's batch workers, several at once) submit single pages and wait on their
own futures; the scheduler batches across all of them, as it does for one ``read_many`` over
many pages. Before, every server batch started a run of its own (threads, pools, an empty
pipeline), so the GPU saw one small batch at a time.

    stream = GpuStream(engine.gpu_scheduler(limit), options)
    page = stream.submit(image).result()
    stream.close()

Pages come out of the scheduler in submission order; each resolves the oldest pending future.
When the queue runs dry the stream tells the scheduler to flush (``gpu.FLUSH``), so a lone
request is not held back waiting for more pages.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

from ocrforge.config import ReadOptions
from ocrforge.scheduling.gpu import FLUSH, GpuScheduler

_CLOSE = object()
_IDLE_S = 0.1  # how often an idle stream hands control back to the run's producer


class GpuStream:
    def __init__(self, sch: GpuScheduler, options: ReadOptions | None = None):
        self.sch = sch
        self.options = options
        self._q: queue.Queue = queue.Queue()
        self._pending: deque[Future] = deque()
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
            self._pending.append(fut)
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
            for page in self.sch.run(self._items(), self.options):
                with self._lock:
                    fut = self._pending.popleft()
                fut.set_result(page)
        except BaseException as e:  # the run failed: every waiting caller gets the error
            self._fail(e)
        else:
            self._fail(RuntimeError("the GPU stream ended with pages still pending"))

    def _fail(self, err: BaseException) -> None:
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending), deque()
        for fut in pending:
            if not fut.done():
                fut.set_exception(err)
