"""A whole engine in a child process, driven like an engine: ``read_many`` streams inputs to it
and its pages back. Several of them on one GPU make one engine that keeps the GPU busy.

Why processes: one GPU engine issues all device work from one driver thread, and that thread's
Python (taking pages, launching graphs, crops, CTC collapse) bounds a process at roughly 90 real
pages/s while the GPU is a third busy (docs/BENCHMARKS.md). Threads in one process share its
GIL, so a second driver thread gains nothing; a second process has its own interpreter, CUDA
context and graphs, and the GPU interleaves both processes' kernels.

    parent: DevicePool (scheduling/multi_device.py) -> one thread per EngineProcess
              -> sender thread: items -> jobs queue (bounded)     -> child: OCR(config)
              <- results queue: pages in input order, then "done" <-   .read_many(items)

The child is a full engine with ``gpu.processes`` = 1, so its pages are exactly what an
in-process engine reads. A child that dies or fails is reported as an exception from
``read_many``; the DevicePool then gives its pages to the other processes.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ocrforge.config import EngineConfig, ReadOptions
from ocrforge.io.inputs import PageImage, decode_pages
from ocrforge.result import Page
from ocrforge.scheduling.parent_watch import exit_with_parent

JOB_QUEUE = 8  # inputs waiting for one child beyond what its own scheduler has taken
START_TIMEOUT_S = 900.0  # import torch, load the networks (and capture every bucket if asked)
GPU_ENGINE_MEMORY = 24 * 2**30  # what one GPU engine may take (18 GiB measured, H200, 12-03)
CPUS_PER_GPU_ENGINE = 5  # driver thread, decoder threads, its DB and layout processes


def auto_gpu_processes(cpus: int, free_bytes: int, most: int = 4) -> int:
    """Driver processes for one GPU: as many as its free memory and the CPUs carry, at most
    ``most``; 1 (in this process) on a small card or a small host."""
    return max(1, min(most, cpus // CPUS_PER_GPU_ENGINE, free_bytes // GPU_ENGINE_MEMORY))


def child_config(cfg: EngineConfig, processes: int, cpus: int) -> EngineConfig:
    """A child engine's config: no processes of its own beyond its share of the host's DB and
    layout workers (left as given when set)."""
    g = cfg.gpu
    # DB boxes ~10 ms and layout 8-19 ms of CPU per real page (docs/BENCHMARKS.md): half the
    # child's share of the CPUs each, at least two of each
    share = max(1, cpus // max(1, processes))
    post = g.post_processes if g.post_processes is not None else max(2, min(12, share // 2))
    lay = g.layout_processes if g.layout_processes is not None else max(2, min(4, share // 2))
    return cfg.with_(**{"gpu.processes": 1, "gpu.post_processes": post,
                        "gpu.layout_processes": lay})


def _session_items(jobs: Any) -> Iterator[Any]:
    while True:
        msg = jobs.get()
        if msg[0] == "end":
            return
        yield msg[1]


def _child_main(factory: Callable[[EngineConfig], Any], cfg: dict[str, Any], jobs: Any,
                results: Any, parent: int) -> None:
    try:
        engine = factory(EngineConfig.from_dict(cfg))
    except BaseException as e:
        results.put(("error", f"engine did not start ({type(e).__name__}: {e})"))
        return
    exit_with_parent(parent, engine.close)
    results.put(("ready", os.getpid()))
    try:
        while True:
            msg = jobs.get()
            if msg is None:
                return
            _, options, batch_pages = msg
            for page in engine.read_many(_session_items(jobs), options=options,
                                         batch_pages=batch_pages):
                results.put(("page", page))
            results.put(("done", None))
    except BaseException as e:  # the parent retires this process and re-reads its pages
        results.put(("error", f"{type(e).__name__}: {e}"))
    finally:
        engine.close()


class EngineProcess:
    """One engine in a child process (spawned: CUDA and ONNX Runtime thread pools must not be
    forked). ``read_many`` runs one session at a time; ``decode`` reads inputs on the host with
    the engine's limits (the DevicePool splits multi-page inputs with it)."""

    def __init__(self, factory: Callable[[EngineConfig], Any], config: EngineConfig,
                 name: str = "ocrforge-engine"):
        ctx = mp.get_context("spawn")
        self.config = config
        self.name = name
        self._jobs = ctx.Queue(maxsize=JOB_QUEUE)
        self._results = ctx.Queue()
        # not daemonic: the child engine starts processes of its own (DB and layout workers)
        self._proc = ctx.Process(target=_child_main, name=name, args=(
            factory, config.to_dict(), self._jobs, self._results, os.getpid()))
        self._proc.start()
        self.pid = self._proc.pid
        self.dead = ""  # why the child can no longer be used
        atexit.register(self.close)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        kind, val = self._get(timeout)
        if kind != "ready":
            self._fail(str(val))

    def decode(self, item: Any, *, rgb: bool = False, max_pages: int | None = None
               ) -> Iterator[PageImage]:
        lim = self.config.limits
        return decode_pages(item, max_pixels=lim.max_pixels, pdf_dpi=lim.pdf_dpi,
                            max_pdf_pages=lim.max_pdf_pages, pages=lim.pages, rgb=rgb,
                            max_pages=max_pages)

    def read_many(self, items: Iterable[Any], *, options: ReadOptions | None = None,
                  batch_pages: int | None = None) -> Iterator[Page]:
        """Pages of ``items`` read by the child, in input order. Raises RuntimeError when the
        child fails or dies (this object is then unusable)."""
        if self.dead:
            raise RuntimeError(self.dead)
        self._put(("start", options, batch_pages))
        sent_err: list[BaseException] = []
        sender = threading.Thread(target=self._send, args=(items, sent_err), daemon=True,
                                  name=f"{self.name}-send")
        sender.start()
        finished = False
        try:
            while True:
                kind, val = self._get()
                if kind == "page":
                    yield val
                elif kind == "done":
                    finished = True
                    break
                else:
                    self._fail(str(val))
        finally:
            if not finished:  # abandoned mid-session: the child's state is unknown
                self.close()
            sender.join(timeout=5)
        if sent_err:
            raise sent_err[0]

    def _send(self, items: Iterable[Any], err: list[BaseException]) -> None:
        try:
            for item in items:
                self._put(("item", item))
        except BaseException as e:  # the items iterator itself failed: the caller gets it
            err.append(e)
        finally:
            with contextlib.suppress(RuntimeError):
                self._put(("end",))

    def _put(self, msg: Any) -> None:
        while True:
            if self.dead:
                raise RuntimeError(self.dead)
            try:
                self._jobs.put(msg, timeout=1.0)
                return
            except queue.Full:
                if not self._proc.is_alive():
                    self._fail(f"engine process {self.pid} died (exit code {self._proc.exitcode})")

    def _get(self, timeout: float | None = None) -> tuple[str, Any]:
        t_end = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self._results.get(timeout=1.0)
            except queue.Empty:
                if not self._proc.is_alive():
                    return "error", (f"engine process {self.pid} died "
                                     f"(exit code {self._proc.exitcode})")
                if t_end is not None and time.monotonic() > t_end:
                    return "error", f"engine process {self.pid} did not start in {timeout:.0f} s"

    def _fail(self, why: str) -> None:
        self.dead = why
        self.close()
        raise RuntimeError(why)

    def close(self) -> None:
        if self._proc.is_alive():
            self.dead = self.dead or "closed"
            with contextlib.suppress(Exception):
                self._jobs.put_nowait(None)
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5)
        # the child is gone: inputs it never took are dropped, not waited for at exit
        self._jobs.cancel_join_thread()


def start_engines(factory: Callable[[EngineConfig], Any], config: EngineConfig, n: int
                  ) -> Sequence[EngineProcess]:
    """``n`` engine processes started side by side; those that fail to start are left out
    (with a warning), and if none starts the first one's error is raised."""
    import sys

    procs = [EngineProcess(factory, config, name=f"ocrforge-engine-{k}") for k in range(n)]
    ready, errors = [], []
    for p in procs:
        try:
            p.wait_ready()
            ready.append(p)
        except RuntimeError as e:
            errors.append(str(e))
    if not ready:
        raise RuntimeError("no engine process started: " + "; ".join(errors))
    for e in errors:
        print(f"ocrforge: an engine process did not start ({e}); going on with {len(ready)}",
              file=sys.stderr)
    return ready


__all__ = ["EngineProcess", "auto_gpu_processes", "child_config", "start_engines"]
