"""Worker threads of one scheduler run, stopped and joined however the run ends.

A consumer may leave a ``read_many()`` loop at any time: ``break``, an exception in the loop
body, Ctrl-C, or the interpreter exiting with the generator still suspended. A worker thread
that is still inside ONNX Runtime (or PyTorch) while the interpreter tears down aborts the
process (``terminate called without an active exception``). So every run registers its
threads here; closing the run, and ``atexit`` for runs nobody closed, sets the stop flag,
keeps draining the queues and joins every thread. A worker blocks only on a queue (``get``
below wakes up on the stop flag; any put is freed by the draining) or in a network call,
which returns, so the join ends.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
_POLL_S = 0.05
_LIVE: weakref.WeakSet[Workers] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class Stopped(Exception):
    """Raised by ``Workers.get`` in a worker once the run is being shut down."""


class Workers:
    """Threads and queues of one run: start them, hand objects over, then ``close()``."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.stop = threading.Event()
        self.queues: list[queue.Queue] = []
        self.threads: list[threading.Thread] = []
        self.jobs: list[threading.Event] = []  # set when a job run on a Reusable thread ends

    def queue(self, maxsize: int) -> queue.Queue:
        q: queue.Queue = queue.Queue(maxsize=maxsize)
        self.queues.append(q)
        return q

    def start(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, daemon=True, name=f"{self.prefix}-{name}")
        self.threads.append(t)
        with _LIVE_LOCK:
            _LIVE.add(self)
        t.start()

    def start_on(self, threads: Reusable, target: Callable[[], None]) -> None:
        """Run ``target`` on one of ``threads`` (kept between runs); ``close()`` waits for it
        as for the run's own threads."""
        done = threading.Event()
        self.jobs.append(done)
        with _LIVE_LOCK:
            _LIVE.add(self)
        threads.submit(target, done)

    def put(self, q: queue.Queue, obj: Any) -> bool:
        """Put unless the run is stopping (then drop it); True when it was put."""
        while not self.stop.is_set():
            try:
                q.put(obj, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self, q: queue.Queue) -> Any:
        """Next object, waiting; raises Stopped once the run is stopping."""
        while not self.stop.is_set():
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        raise Stopped

    def close(self) -> None:
        """Stop the workers and wait for each (one that is inside a network call finishes that
        call first). Safe to call more than once and from atexit."""
        self.stop.set()
        me = threading.current_thread()
        while alive := [t for t in self.threads if t is not me and t.is_alive()]:
            for q in self.queues:  # free a worker blocked on a plain put into a full queue
                _drain(q)
            alive[0].join(timeout=_POLL_S)
        while pending := [e for e in self.jobs if not e.is_set()]:
            for q in self.queues:
                _drain(q)
            pending[0].wait(timeout=_POLL_S)
        with _LIVE_LOCK:
            _LIVE.discard(self)


class Reusable:
    """Daemon threads that each run one job at a time and then wait for the next, so that
    thread-local state survives from one run to the next: PyTorch keeps cuDNN's execution plans
    per thread, and a GPU driver thread that was new for every run built them again for every
    shape it ran eagerly or captured (docs/BENCHMARKS.md, 2026-12-06). A job takes an idle
    thread, or a new one when all are busy (runs may overlap)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._idle: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()
        self._made = 0
        self._closing = False

    def submit(self, target: Callable[[], None], done: threading.Event) -> None:
        with self._lock:
            self._closing = False
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                inbox = queue.SimpleQueue()
                self._made += 1
                threading.Thread(target=self._serve, args=(inbox,), daemon=True,
                                 name=f"{self.prefix}_{self._made}").start()
        inbox.put((target, done))

    def busy(self) -> int:
        """Threads running a job now."""
        with self._lock:
            return self._made - len(self._idle)

    def close(self) -> None:
        """Idle threads end now, busy ones when their job is done (a later submit starts
        new ones). Their owner's state is then no longer referenced from a thread."""
        with self._lock:
            self._closing = True
            idle, self._idle = self._idle, []
            self._made -= len(idle)
        for inbox in idle:
            inbox.put(None)

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            job = inbox.get()
            if job is None:
                return
            target, done = job
            try:
                target()
            except BaseException:  # a job reports its own errors; the thread must stay usable
                log.exception("%s: a job failed", threading.current_thread().name)
            finally:
                # an idle thread must not keep its last job (and all that job reaches) alive
                del job, target
                with self._lock:
                    leave = self._closing
                    if leave:
                        self._made -= 1
                    else:
                        self._idle.append(inbox)
                done.set()
            if leave:
                return


def _drain(q: queue.Queue) -> None:
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass


def live_threads() -> list[threading.Thread]:
    """Worker threads of runs not yet closed (for tests and diagnostics)."""
    with _LIVE_LOCK:
        runs = list(_LIVE)
    return [t for w in runs for t in w.threads if t.is_alive()]


@atexit.register
def _close_all() -> None:
    with _LIVE_LOCK:
        runs = list(_LIVE)
    for w in runs:
        w.close()
