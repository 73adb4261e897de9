"""A GPU stream (scheduling/gpu_stream.py) whose engine runs in a child process.

Why: a server's request handling (HTTP, uploads, the response's JSON) runs in the same
process as the GPU engine's driver thread and shares its interpreter lock. Fed without HTTP,
the server's stream read 110-137 requests/s at concurrency 64 where the server answered 69,
and 59 against 38 at concurrency 8 (H100, 2026-12-07, docs/BENCHMARKS.md). In a child process
the driver thread has an interpreter of its own; the parent only moves pages and results.

    parent: submit(image) -> jobs queue  ->  child: factory(config).gpu_scheduler(limit)
            future  <- reader thread <- results queue <- GpuStream, each page when read

Same interface as GpuStream (``submit`` -> Future, ``close``, ``alive``). A page the child
could not read fails only its own future; a child that dies fails every pending one, and the
stream is then no longer ``alive`` (the caller starts another).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ocrforge.config import EngineConfig, ReadOptions

START_TIMEOUT_S = 900.0  # import torch, load the networks, capture the warm-up plan


def _warm(sch: Any, options: ReadOptions | None, page: Any, warmup_s: float) -> int:
    """The warm-up page twice through the scheduler, then up to ``warmup_s`` of captures of
    the common shapes; how many shapes were captured."""
    if page is not None:
        for _ in range(2):
            list(sch.run([page], options))
    if warmup_s <= 0:
        return 0
    n0 = sch.stats.warmup_shapes
    with contextlib.suppress(Exception):  # pages capture their shapes as they come instead
        sch.warmup(budget_s=warmup_s)
    return sch.stats.warmup_shapes - n0


def _send(results: Any, pos: int, fut: Future) -> None:
    err = fut.exception()
    if err is None:
        results.put(("page", pos, fut.result()))
    else:
        results.put(("error", pos, f"{type(err).__name__}: {err}"))


def _child_main(factory: Callable[[EngineConfig], Any], cfg: dict[str, Any], det_limit: int,
                options: ReadOptions | None, page: Any, warmup_s: float, jobs: Any,
                results: Any, parent: int) -> None:
    from ocrforge.scheduling.gpu_stream import GpuStream
    from ocrforge.scheduling.parent_watch import exit_with_parent

    try:
        engine = factory(EngineConfig.from_dict(cfg))
        sch = engine.gpu_scheduler(det_limit)
        captured = _warm(sch, options, page, warmup_s)
        stream = GpuStream(sch, options)
    except BaseException as e:
        results.put(("fatal", f"engine did not start ({type(e).__name__}: {e})"))
        return
    exit_with_parent(parent, engine.close)
    results.put(("ready", {"pid": os.getpid(), "warmup_shapes": captured}))
    try:
        while (msg := jobs.get()) is not None:
            pos, image = msg
            if not stream.alive:  # its run failed: its pages were answered; a new run
                stream = GpuStream(sch, options)
            try:
                fut = stream.submit(image)
            except BaseException as e:
                results.put(("error", pos, f"{type(e).__name__}: {e}"))
                continue
            fut.add_done_callback(lambda f, pos=pos: _send(results, pos, f))
        stream.close()
    finally:
        engine.close()
        results.put(("closed",))


class ProcessStream:
    """One engine in a spawned child (CUDA must not be forked), fed page by page."""

    def __init__(self, factory: Callable[[EngineConfig], Any], config: EngineConfig,
                 det_limit: int, options: ReadOptions | None = None, *, warm_page: Any = None,
                 warmup_s: float = 0.0, name: str = "ocrforge-stream"):
        ctx = mp.get_context("spawn")
        self.name = name
        self._jobs = ctx.Queue()
        self._results = ctx.Queue()
        # not daemonic: the child engine starts processes of its own (DB and layout workers)
        self._proc = ctx.Process(target=_child_main, name=name, args=(
            factory, config.to_dict(), det_limit, options, warm_page, warmup_s, self._jobs,
            self._results, os.getpid()))
        self._proc.start()
        self.pid = self._proc.pid
        self.info: dict[str, Any] = {}
        self._pending: dict[int, Future] = {}
        self._submitted = 0
        self._lock = threading.Lock()
        self._closed = False
        self.dead = ""  # why the child can no longer read
        self._reader: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return not self._closed and not self.dead

    @property
    def pending(self) -> int:
        """Pages submitted and not yet answered."""
        return len(self._pending)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Block until the child's engine is warmed up; its info (pid, shapes captured).
        Raises RuntimeError (and ends the child) when it did not start."""
        try:
            msg = self._get(timeout)
        except queue.Empty:
            msg = ("fatal", f"engine process {self.pid} did not start in {timeout:.0f} s")
        if msg[0] != "ready":
            self.dead = str(msg[1])
            self.close(5.0)
            raise RuntimeError(self.dead)
        self.info = msg[1]
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-read", daemon=True)
        self._reader.start()
        return self.info

    def submit(self, image: Any) -> Future:
        """One page (an image array or anything that decodes to exactly one page)."""
        fut: Future = Future()
        with self._lock:
            if not self.alive:
                raise RuntimeError(self.dead or "the engine process stream is closed")
            pos = self._submitted
            self._submitted += 1
            self._pending[pos] = fut
            self._jobs.put((pos, image))
        return fut

    def close(self, timeout: float | None = None) -> None:
        """Finish what was submitted, then end the child."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(Exception):
            self._jobs.put(None)
        if self._reader is not None:
            self._reader.join(timeout)
        self._proc.join(timeout if timeout is not None else None)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5.0)
        self._jobs.cancel_join_thread()
        self._fail("the engine process stream is closed")

    def _get(self, timeout: float) -> tuple:
        """The child's next message; queue.Empty after ``timeout``, or at once if it died."""
        waited = 0.0
        while True:
            try:
                return self._results.get(timeout=min(1.0, timeout - waited))
            except queue.Empty:
                waited += 1.0
                if not self._proc.is_alive():
                    return ("fatal", f"engine process {self.pid} died "
                                     f"(exit code {self._proc.exitcode})")
                if waited >= timeout:
                    raise

    def _read(self) -> None:
        while True:
            try:
                msg = self._get(3600.0)
            except queue.Empty:
                continue
            kind = msg[0]
            if kind in ("page", "error"):
                with self._lock:
                    fut = self._pending.pop(msg[1], None)
                if fut is not None and kind == "page":
                    fut.set_result(msg[2])
                elif fut is not None:
                    fut.set_exception(RuntimeError(msg[2]))
                continue
            # "closed" or "fatal": nothing more comes, and nothing reads the pages left in the
            # jobs pipe; without this the interpreter would wait at exit for them to be sent
            self._jobs.cancel_join_thread()
            self.dead = self.dead or (str(msg[1]) if kind == "fatal" else "closed")
            self._fail(self.dead)
            return

    def _fail(self, why: str) -> None:
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for fut in pending:
            if not fut.done():
                fut.set_exception(RuntimeError(why))


__all__ = ["ProcessStream"]
