"""Many inputs on many cores: several engine processes, each with a few threads (like OCRmyPDF -j).

One ONNX Runtime session does not scale past a few cores on these small networks (16 threads
read the dev set only 2.5x faster than 2), so on a bigger machine ``read_many`` hands whole
inputs to ``pipeline.processes`` worker processes of ``pipeline.process_threads`` threads each
(auto: half the usable CPUs, 2 threads each, from 4 CPUs up; fewer when memory is short).

* Each worker is a full engine (same config, its own runtimes) that reads one input at a time
  with the normal CPU pipeline, so its pages are exactly what the engine reads in-process.
* Inputs are dealt out one at a time to whichever worker is free (a 7000-px scan does not hold
  up a queue of receipts); at most ``2 x processes`` inputs are in flight, so memory stays
  bounded however long the job; pages come back in input order.
* A long PDF (given by path) is shared out as slices of a few pages (``PageSlice``), so one
  big file uses every worker too; its pages still come back in order, numbered as in the file.
* An input that cannot be pickled (an open file object, say) is read in this process in its turn.
* A worker that dies (crash, out of memory) turns its current input into an error page naming
  the input; a new worker takes its place and the rest of the job goes on.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ocrforge.config import EngineConfig, LimitsConfig, ReadOptions
from ocrforge.io.inputs import PageSlice, count_pages, describe, parse_page_range, sniff
from ocrforge.result import Page
from ocrforge.runtimes.cpu_budget import cpu_set

PROCESS_MEMORY = 1_200 * 2**20  # what one worker engine may need (dev set peak ~1.0 GiB)
SLICE_PAGES = (2, 16)  # pages per slice of a shared-out PDF: at least, at most


def auto_processes(cpus: int, threads: int, available: int | None = None) -> int:
    """Worker processes for ``cpus`` CPUs at ``threads`` each: 1 (in-process) below 4 CPUs, and
    never more than the available memory holds."""
    if cpus < 4:
        return 1
    n = max(1, cpus // max(1, threads))
    if available is None:
        try:
            import psutil

            available = int(psutil.virtual_memory().available)
        except Exception:  # no psutil or no /proc: trust the CPU count
            available = n * PROCESS_MEMORY
    return max(1, min(n, available // PROCESS_MEMORY))


def pdf_pages(item: Any, limits: LimitsConfig) -> list[int] | None:
    """The selected pages (0-based) of a PDF given by path, or None: another input, a PDF over
    the page limit or one that does not open (its reader then reports it as usual)."""
    if not isinstance(item, (str, os.PathLike)):
        return None
    try:
        with open(item, "rb") as f:
            if sniff(f.read(1024)) != "pdf":
                return None
        total = count_pages(item).total
        wanted = parse_page_range(limits.pages) if limits.pages else None
    except (OSError, ValueError):  # InputError is a ValueError
        return None
    sel = [i for i in range(total) if wanted is None or wanted(i)]
    return sel if len(sel) <= limits.max_pdf_pages else None


def pdf_slices(item: Any, limits: LimitsConfig, processes: int) -> list[Any]:
    """A PDF file of several pages as PageSlices for ``processes`` workers (about four slices
    each, for balance), else ``[item]``: other inputs, PDFs over the page limit or that do not
    open (the worker then reports them as usual)."""
    sel = pdf_pages(item, limits) if processes >= 2 else None
    lo, hi = SLICE_PAGES
    if sel is None or len(sel) < 2 * lo:
        return [item]
    size = min(hi, max(lo, -(-len(sel) // (4 * processes))))
    return [PageSlice(item, sel[k], sel[min(k + size, len(sel)) - 1])
            for k in range(0, len(sel), size)]


def worker_config(cfg: EngineConfig, threads: int) -> dict[str, Any]:
    """The engine config of one worker: its own thread count, no spinning (the workers share
    the machine), and no processes of its own."""
    return cfg.with_(**{"runtime.intra_op_threads": threads, "runtime.inter_op_threads": 1,
                        "runtime.allow_spinning": False, "pipeline.processes": 1}).to_dict()


def cpu_slots(processes: int, threads: int) -> list[set[int] | None]:
    """The CPUs of each worker: disjoint sets of ``threads`` CPUs of this process's set when
    they fit, else None (each worker shares the whole set). OpenVINO pins its threads to the
    first cores of its set, so unpinned workers all landed on the same cores (16-core host,
    2026-12-04: 8 workers read the dev set at 1.12 pages/s against 2.17 with ONNX Runtime)."""
    cpus = sorted(cpu_set() or ())
    if not cpus or processes * threads > len(cpus):
        return [None] * processes
    return [set(cpus[k * threads:(k + 1) * threads]) for k in range(processes)]


def _pin_all_threads(cpus: set[int]) -> None:
    """Every thread of this process onto ``cpus`` (threads started while the modules were
    imported keep the old set otherwise)."""
    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


def _worker_main(factory: Callable[[EngineConfig], Any], cfg: dict[str, Any], jobs: Any,
                 results: Any, cpus: set[int] | None = None) -> None:
    if cpus:
        _pin_all_threads(cpus)
    engine = factory(EngineConfig.from_dict(cfg))
    results.put(("ready", os.getpid(), None, None))
    while True:
        msg = jobs.get()
        if msg is None:
            return
        run_id, idx, blob, options, batch_pages = msg
        results.put(("start", os.getpid(), (run_id, idx), None))
        item = pickle.loads(blob)
        try:
            for page in engine.read_many([item], options=options, batch_pages=batch_pages):
                results.put(("page", os.getpid(), (run_id, idx), page))
        except Exception as e:  # read_many turns bad inputs into pages; this is anything else
            page = Page([], 0, 0, source=describe(item), error=f"{type(e).__name__}: {e}")
            results.put(("page", os.getpid(), (run_id, idx), page))
        results.put(("done", os.getpid(), (run_id, idx), None))


class ProcessPool:
    """``processes`` engine processes reading whole inputs; ``run`` streams pages in order."""

    def __init__(self, factory: Callable[[EngineConfig], Any], config: EngineConfig,
                 processes: int, threads: int):
        self._ctx = mp.get_context("spawn")  # the parent's ORT thread pools must not be forked
        self._factory = factory
        self._limits = config.limits
        self._cfg = worker_config(config, threads)
        self._jobs = self._ctx.Queue()
        self._results = self._ctx.Queue()
        self._procs: dict[int, Any] = {}
        self._slots: dict[int, set[int] | None] = {}  # pid -> its CPUs
        self._lock = threading.Lock()  # one run at a time (runs share the queues)
        self._run_id = 0
        self.processes = processes
        self.threads = threads
        for cpus in cpu_slots(processes, threads):
            self._spawn(cpus)
        ready = 0
        while ready < processes:
            kind, pid, _, _ = self._get_result()
            ready += kind == "ready"

    def _spawn(self, cpus: set[int] | None) -> None:
        p = self._ctx.Process(target=_worker_main, daemon=True, name="ocrforge-engine",
                              args=(self._factory, self._cfg, self._jobs, self._results, cpus))
        p.start()
        self._procs[p.pid] = p
        self._slots[p.pid] = cpus

    def _get_result(self) -> tuple[str, int, Any, Any]:
        while True:
            try:
                return self._results.get(timeout=1.0)
            except queue.Empty:
                dead = [pid for pid, p in self._procs.items() if not p.is_alive()]
                if dead:
                    return ("dead", dead[0], None, None)

    def run(self, items: Iterable[Any], options: ReadOptions | None, batch_pages: int,
            local: Callable[[Any], Iterator[Page]]) -> Iterator[Page]:
        """Pages of every input in input order; ``local(item)`` reads an input that cannot
        be sent to a worker."""
        with self._lock:
            self._run_id += 1
            try:
                shares = (s for item in items for s in pdf_slices(item, self._limits, self.processes))
                yield from self._run(self._run_id, shares, options, batch_pages, local)
            finally:  # closed early: inputs not yet taken by a worker are dropped
                with contextlib.suppress(queue.Empty, OSError, ValueError):
                    while True:
                        self._jobs.get_nowait()

    def _run(self, run_id: int, items: Iterator[Any], options: ReadOptions | None, batch_pages: int,
             local: Callable[[Any], Iterator[Page]]) -> Iterator[Page]:
        pages: dict[int, list[Page]] = {}
        done: set[int] = set()
        sent: dict[int, Any] = {}  # idx -> item description, for inputs in a worker
        current: dict[int, int] = {}  # pid -> idx it is reading
        nxt = fed = 0
        exhausted = False
        while True:
            while not exhausted and len(sent) < 2 * self.processes:
                try:
                    item = next(items)
                except StopIteration:
                    exhausted = True
                    break
                try:
                    blob = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:  # not picklable: read here, in its turn
                    pages[fed], done_now = list(local(item)), fed
                    done.add(done_now)
                else:
                    sent[fed] = describe(item)
                    self._jobs.put((run_id, fed, blob, options, batch_pages))
                fed += 1
            while nxt in done:
                yield from pages.pop(nxt, [])
                done.discard(nxt)
                nxt += 1
            if exhausted and nxt == fed:
                return
            kind, pid, key, page = self._get_result()
            if kind == "dead":
                self._replace(pid, run_id, current, sent, pages, done)
                continue
            if key is None or key[0] != run_id:
                continue  # a result of an earlier run that was closed early
            idx = key[1]
            if kind == "start":
                current[pid] = idx
            elif kind == "page":
                pages.setdefault(idx, []).append(page)
            elif kind == "done":
                current.pop(pid, None)
                sent.pop(idx, None)
                done.add(idx)

    def _replace(self, pid: int, run_id: int, current: dict[int, int], sent: dict[int, Any],
                 pages: dict[int, list[Page]], done: set[int]) -> None:
        p = self._procs.pop(pid)
        idx = current.pop(pid, None)
        if idx is not None:
            src = sent.pop(idx, "?")
            pages[idx] = pages.get(idx, []) + [Page([], 0, 0, source=str(src), error=(
                f"the engine process reading this input died (exit code {p.exitcode})"))]
            done.add(idx)
        self._spawn(self._slots.pop(pid, None))  # the new worker takes the dead one's CPUs

    def close(self) -> None:
        for _ in self._procs:
            with contextlib.suppress(Exception):
                self._jobs.put(None)
        for p in self._procs.values():
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self._procs.clear()
        self._jobs.cancel_join_thread()  # nothing reads what is left: not waited for at exit
