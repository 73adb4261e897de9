"""OCR on a Ray cluster with Ray Data (``pip install 'ocrforge[ray]'``).

Shape of the job::

    read_binary_files(paths)                      bytes of every input (Ray tasks)
      -> flat_map(_pages_of_input)               pages, PDFs rendered one at a time with
                                                 pypdfium2; pages done earlier left out
      -> map_batches(OCRActor, compute=ActorPoolStrategy(size=num_actors),
                     num_cpus=..., num_gpus=..., batch_size=...)
                                                 one engine per actor, ONNX Runtime threads =
                                                 the actor's CPUs, so actors don't fight
      -> the driver writes each page with the local job's writer (``ocrforge.jobs``):
         <input>[.pN].json + .txt and manifest.jsonl in output_dir

Results are written by the driver, not by the workers: the output folder only has to exist
where the job is submitted, a page that arrives twice (a task retried after a node died) is
written once, and the same resume rule as ``ocrforge batch`` holds. The inputs must be
readable by every node (a shared file system), since Ray reads them where its tasks run.

For other sinks (Parquet, a table) build the dataset with ``ocr_dataset`` and write it with
Ray's own writers.

This module is ``ocrforge.ray``; ``import ray`` below is the real Ray (absolute import).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import ray
import ray.data
from ray.data import ActorPoolStrategy
from ray.data.exceptions import ExecutionTimeoutError

from ocrforge.io.inputs import expand_paths
from ocrforge.jobs.naming import config_hash, input_root, relative_name
from ocrforge.jobs.pages import (
    InputEnd,
    InputFailed,
    InputSkipped,
    PageSkipped,
    PageTask,
    count_pages,
    input_events,
)
from ocrforge.jobs.progress import JobProgress
from ocrforge.jobs.recorder import JobRecorder, JobSummary
from ocrforge.jobs.store import PageStore

_NO_IMAGE = np.zeros((1, 1, 3), np.uint8)


def _row(kind: str, source: str, rel: str = "", *, page: int = -1, sha256: str = "",
         pages: int = 0, emitted: int = 0, error: str = "",
         image: np.ndarray = _NO_IMAGE) -> dict[str, Any]:
    # every row has every column: Ray builds one schema per block
    return {"kind": kind, "source": source, "rel": rel, "page": page, "sha256": sha256,
            "pages": pages, "emitted": emitted, "error": error, "image": image}


def _pages_of_input(row: dict[str, Any], *, plan: dict[str, tuple[str, str]],
                    done_pages: dict[str, str], done_inputs: dict[str, tuple[str, int]],
                    limits: dict[str, int]) -> Iterator[dict[str, Any]]:
    """flat_map: one input file's bytes -> one row per page to read, plus bookkeeping rows."""
    source, rel = plan[os.path.abspath(row["path"])]

    def page_done(name: str, sha: str) -> bool:
        return done_pages.get(name) == sha

    def input_done(r: str, sha: str) -> int | None:
        got = done_inputs.get(r)
        return got[1] if got is not None and got[0] == sha else None

    for ev in input_events(bytes(row["bytes"]), source, rel, page_done=page_done,
                           input_done=input_done, **limits):
        if isinstance(ev, PageTask):
            yield _row("page", source, rel, page=ev.page, sha256=ev.sha256, image=ev.image)
        elif isinstance(ev, PageSkipped):
            yield _row("skipped", source, rel, page=ev.page)
        elif isinstance(ev, InputSkipped):
            yield _row("input_skipped", source, rel, pages=ev.pages)
        elif isinstance(ev, InputFailed):
            yield _row("failed", source, rel, page=-1 if ev.page is None else ev.page,
                       sha256=ev.sha256 or "", error=ev.error)
        elif isinstance(ev, InputEnd):
            yield _row("end", source, rel, sha256=ev.sha256, pages=ev.pages, emitted=ev.emitted)


class OCRActor:
    """map_batches callable class: one engine per actor, built once."""

    def __init__(self, config: Any, threads: int):
        from ocrforge.engine import OCR

        t0, ready0 = time.perf_counter(), time.time()
        # threads (and the device) come from the config the driver sent, never from the
        # environment: a GPU actor has CUDA_VISIBLE_DEVICES set by Ray, and still runs on the
        # CPU unless the config says cuda
        self.engine = OCR(config, intra_op_threads=threads)
        import cv2

        # OpenCV's own thread pool (resize, warps in the stages) would span every core of the
        # node, next to the other actors' cores: the actor keeps to the CPUs it reserved
        cv2.setNumThreads(threads)
        ctx = ray.get_runtime_context()
        self.worker = json.dumps({
            "pid": os.getpid(), "node_id": ctx.get_node_id(),
            "actor_id": ctx.get_actor_id(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "device": self.engine.config.runtime.device,
            # engine construction (model files opened, sessions built) and when it was ready
            # (wall clock): benchmarks report actor start apart from the steady rate
            "engine_start_s": round(time.perf_counter() - t0, 4), "ready_at": round(time.time(), 4),
            "engine_started_at": round(ready0, 4),
        })

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kinds = batch["kind"]
        todo = [i for i, k in enumerate(kinds) if k == "page"]
        docs = np.full(len(kinds), "", dtype=object)
        texts = np.full(len(kinds), "", dtype=object)
        errors = np.array([str(e) for e in batch["error"]], dtype=object)
        ocr_s = np.zeros(len(kinds), dtype=np.float64)
        for i in todo:
            # One page at a time on the calling thread: the actor uses the CPUs it reserved
            # (ONNX Runtime's intra-op threads) and no more; the engine's page pipeline would
            # overlap detection and recognition on extra cores, which here belong to other
            # actors. A page read alone is also what the local job does (see jobs.local).
            t0 = time.perf_counter()
            try:
                page = self.engine.read(batch["image"][i])
            except Exception as e:  # this page's failure, not the actor's
                errors[i] = f"{type(e).__name__}: {e}"
                continue
            finally:
                ocr_s[i] = time.perf_counter() - t0
            if page.ok:
                page.source, page.page_index = str(batch["source"][i]), int(batch["page"][i])
                docs[i] = json.dumps(page.to_dict(), ensure_ascii=False)
                texts[i] = page.text
            else:
                errors[i] = page.error or "failed"
        out = {k: v for k, v in batch.items() if k != "image"}
        # CPU seconds this actor process has used so far (for measurements: benchmarks/)
        cpu = np.full(len(kinds), time.process_time(), dtype=np.float64)
        rss = np.full(len(kinds), _peak_rss_mb(), dtype=np.float64)
        out.update(doc=docs, text=texts, error=errors, ocr_s=ocr_s, process_cpu_s=cpu,
                   peak_rss_mb=rss,
                   worker=np.full(len(kinds), self.worker, dtype=object))
        return out


def _peak_rss_mb() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def ocr_dataset(paths: Sequence[str], *, plan: dict[str, tuple[str, str]], config: Any,
                num_actors: int = 1, num_cpus_per_actor: float = 1.0,
                num_gpus_per_actor: float = 0.0, batch_size: int = 4,
                done_pages: dict[str, str] | None = None,
                done_inputs: dict[str, tuple[str, int]] | None = None,
                actor_options: dict[str, Any] | None = None,
                block_bytes: int = 1 << 20,
                actor_start_timeout_s: int = 600,
                read_tasks: int | None = None) -> ray.data.Dataset:
    """The lazy dataset of results (one row per page plus bookkeeping rows).

    ``plan`` maps each absolute input path to (source as reported, relative output name).
    Rows with ``kind == "page"`` carry ``doc`` (the page JSON) and ``text``.
    ``read_tasks``: how many read-and-render tasks run at once (default: one per 4 CPU actors,
    one per GPU actor).
    """
    limits = dict(pdf_dpi=config.limits.pdf_dpi, max_pixels=config.limits.max_pixels,
                  max_pdf_pages=config.limits.max_pdf_pages)
    threads = max(1, int(num_cpus_per_actor))
    # Small blocks: a block goes to one actor whole, so with Ray's default (128 MiB) a
    # 150-page PDF would be one block read by one actor while the others idle. At 1 MiB a
    # block holds one real page (a 200 dpi A4 page is ~11 MB) or a few small ones. The
    # dataset keeps a copy of the context taken here, so the global is restored at once.
    # Pages go out only once every actor has its engine: otherwise the first actor up takes
    # the early pages while the others still load their models (and a pool that cannot be
    # placed fails after actor_start_timeout_s instead of waiting for ever).
    ctx = ray.data.DataContext.get_current()
    saved = ctx.target_max_block_size, ctx.wait_for_min_actors_s
    ctx.target_max_block_size = block_bytes
    ctx.wait_for_min_actors_s = actor_start_timeout_s
    # Reading and rendering reserve no CPU: with every CPU held by an OCR actor they must
    # still run (they are light next to OCR), or the actors would starve. But with no CPU to
    # limit them Ray runs one task per input file at once, each in a new worker process (Ray
    # imports, ~3 CPU-seconds on the 2-core VM: measured 9.6 CPU-s of reading for 20 pages
    # with one actor, against 0.5 with this limit). A few tasks at once keep a few worker
    # processes busy, reused from file to file, and still one file per task, so a task retried
    # after a lost node redoes one file. Decoding or rendering a page takes a small part of
    # what one CPU thread takes to OCR it, so one reader feeds 4 CPU actors; a GPU actor reads
    # many times faster and gets one of its own. The same limit on both keeps them one task.
    reads = max(1, read_tasks or (num_actors if num_gpus_per_actor else -(-num_actors // 4)))
    try:
        ds = ray.data.read_binary_files(list(paths), include_paths=True, num_cpus=0,
                                        concurrency=reads)
        ds = ds.flat_map(_pages_of_input, num_cpus=0, concurrency=reads, fn_kwargs={
            "plan": plan, "done_pages": done_pages or {}, "done_inputs": done_inputs or {},
            "limits": limits})
    finally:
        ctx.target_max_block_size, ctx.wait_for_min_actors_s = saved
    return ds.map_batches(
        OCRActor, fn_constructor_kwargs={"config": config, "threads": threads},
        compute=ActorPoolStrategy(size=num_actors), num_cpus=num_cpus_per_actor,
        num_gpus=num_gpus_per_actor or None, batch_size=batch_size, batch_format="numpy",
        **(actor_options or {}))


def read_dataset(paths: Sequence[str | os.PathLike[str]], output_dir: str | os.PathLike[str], *,
                 num_actors: int = 1, num_cpus_per_actor: float = 1.0,
                 num_gpus_per_actor: float = 0.0, batch_size: int = 4, config: Any = None,
                 address: str | None = None, progress: bool = True,
                 actor_options: dict[str, Any] | None = None,
                 quiet: bool = False) -> JobSummary:
    """OCR files and folders on a Ray cluster into ``output_dir``, resumably.

    The output folder is the one ``ocrforge batch`` writes (per-page JSON and text, a
    manifest); a re-run skips pages done with the same input bytes and config, whichever
    backend did them. ``address``: None uses the running Ray (``ray.init()`` already called)
    or starts a local one; "auto" joins a cluster started with ``ray start``; "ray://host:10001"
    a remote one. ``actor_options`` go to ``map_batches`` (e.g. ``resources``,
    ``accelerator_type``). Returns the same JobSummary as the local job, with ``workers``
    filled (pages per actor, its node and CUDA_VISIBLE_DEVICES). A failure of Ray itself (it
    cannot start or be joined, an actor that cannot build its engine) is a RuntimeError with
    one line naming the cause; ``quiet`` keeps Ray's own log lines off the console.
    """
    from ocrforge.config import EngineConfig

    cfg = config if config is not None else EngineConfig()
    if num_actors < 1 or batch_size < 1:
        raise ValueError("num_actors and batch_size must be at least 1")
    srcs = [os.fspath(s) for s in paths]
    files = expand_paths(srcs)
    if not files:
        raise ValueError("no input files found in " + ", ".join(srcs))
    root = input_root(srcs)
    started = False
    if not ray.is_initialized():
        connect(address, quiet=quiet)
        started = True
    try:
        _check_resources(num_actors, num_cpus_per_actor, num_gpus_per_actor)
        with PageStore(output_dir, config_hash(cfg)) as store:
            try:
                return _run(store, files, root, cfg, num_actors, num_cpus_per_actor,
                            num_gpus_per_actor, batch_size, progress, actor_options)
            except (ray.exceptions.RayError, ExecutionTimeoutError) as e:
                raise RuntimeError(
                    f"the Ray job stopped ({_cause(e)}); the pages finished so far are in "
                    f"{os.fspath(output_dir)}: run the same command again to resume") from e
    finally:
        if started:
            ray.shutdown()


def connect(address: str | None, *, quiet: bool = False) -> None:
    """``ray.init`` for a job: None starts a private local instance, even when RAY_ADDRESS is set
    or a cluster started with ``ray start`` runs on this machine (plain ``ray.init()`` would join
    either); "auto", "HOST:PORT" or "ray://HOST:PORT" join the cluster asked for. A failure is a
    RuntimeError naming the address, not Ray's traceback."""
    if address and address != "auto":
        _check_listening(address)
    if quiet:  # the command prints its own progress and one line for an error
        logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    level = logging.ERROR if quiet else logging.INFO
    try:
        if address and address.startswith("ray://"):
            # Ray Client: only the address (pip install 'ray[client]')
            ray.init(address=address, logging_level=level)
        else:
            ray.init(address=address or "local", log_to_driver=False, include_dashboard=False,
                     logging_level=level)
    except Exception as e:
        what = f"join the Ray cluster at {address}" if address else "start a local Ray instance"
        raise RuntimeError(f"cannot {what}: {_first_line(e)}") from e


_ERROR_LINE = re.compile(r"^\s*((?:\w+\.)*(\w*(?:Error|Exception|Exit)\w*)): (.+)$")


def _cause(e: BaseException) -> str:
    """The root cause of a Ray error in one line: the last ``SomeError: message`` line of the
    remote traceback Ray puts in its message (e.g. an actor's engine that could not start),
    without the module path; else the error's first line."""
    for line in reversed(str(e).splitlines()):
        m = _ERROR_LINE.match(line)
        if m and "Traceback" not in m.group(3):
            what = "an OCR actor died" if isinstance(e, ray.exceptions.RayActorError) else ""
            return (what + ": " if what else "") + f"{m.group(2)}: {m.group(3).strip()}"
    return _first_line(e)


def _check_listening(address: str) -> None:
    """Ray retries an address where nothing listens for minutes; a TCP connect says at once."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # not HOST:PORT: Ray itself says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise RuntimeError(f"cannot join the Ray cluster at {address}: nothing answers there "
                           f"({e.strerror or e}); is the head node up (`ray status`)?") from None


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _run(store: PageStore, files: list[str], root: Any, cfg: Any, num_actors: int,
         num_cpus: float, num_gpus: float, batch_size: int, progress: bool,
         actor_options: dict[str, Any] | None) -> JobSummary:
    expected = {f: count_pages(f) for f in files}
    bar = JobProgress(sum(expected.values()), enabled=progress)
    rec = JobRecorder(store, bar, expected)
    plan: dict[str, tuple[str, str]] = {}
    for f in files:
        if os.path.isfile(f):
            plan[os.path.abspath(f)] = (f, relative_name(f, root))
        else:  # Ray would fail the whole dataset on a missing path
            rec.on_event(InputFailed(f, None, None, "file not found"))
    done_pages = {name: r["sha256"] for name, r in store.manifest.pages.items()
                  if store.page_done(name, r["sha256"])}
    done_inputs = {}
    for rel, r in store.manifest.inputs.items():
        n = store.input_done(rel, r["sha256"])
        if n is not None:
            done_inputs[rel] = (r["sha256"], n)
    t0 = time.perf_counter()
    with bar:
        if plan:
            bar.started()
            kw = dict(paths=list(plan), plan=plan, config=cfg, num_actors=num_actors,
                      num_cpus_per_actor=num_cpus, num_gpus_per_actor=num_gpus,
                      batch_size=batch_size, done_pages=done_pages, done_inputs=done_inputs,
                      actor_options=actor_options)
            for batch in _result_batches(kw):
                for i in range(len(batch["kind"])):
                    _record(rec, {k: v[i] for k, v in batch.items()})
    summary = rec.finish(time.perf_counter() - t0)
    return summary


def _result_batches(kw: dict[str, Any]) -> Iterator[dict[str, np.ndarray]]:
    """The job's result batches. Ray Data cannot run from a Ray Client driver
    (ray-project/ray#48682: it needs a core worker), so through ``ray://`` the dataset runs in a
    relay actor on the cluster and its batches come back one call at a time."""
    from ray.util.client import ray as client_ray

    if not client_ray.is_connected():
        yield from _iter_dataset(kw)
        return
    relay = _Relay.options(num_cpus=0).remote(kw)
    try:
        while (batch := ray.get(relay.next.remote())) is not None:
            yield batch
    finally:
        ray.kill(relay)


def _iter_dataset(kw: dict[str, Any]) -> Iterator[dict[str, np.ndarray]]:
    ray.data.DataContext.get_current().enable_progress_bars = False  # ours counts pages
    ds = ocr_dataset(**kw)
    yield from ds.iter_batches(batch_size=None, batch_format="numpy")


@ray.remote
class _Relay:
    """Runs the dataset on the cluster for a Ray Client driver (see _result_batches)."""

    def __init__(self, kw: dict[str, Any]):
        self.batches = _iter_dataset(kw)

    def next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def _record(rec: JobRecorder, row: dict[str, Any]) -> None:
    kind = str(row["kind"])
    source, rel, page = str(row["source"]), str(row["rel"]), int(row["page"])
    sha, error = str(row["sha256"]), str(row["error"])
    if kind == "page":
        worker = json.loads(str(row["worker"]))
        w = rec.summary.workers.setdefault(worker["actor_id"] or str(worker["pid"]),
                                           {**worker, "pages": 0, "busy_s": 0.0})
        w["pages"] += 1
        w["busy_s"] += float(row["ocr_s"])  # seconds inside engine.read
        w["process_cpu_s"] = max(w.get("process_cpu_s", 0.0), float(row["process_cpu_s"]))
        w["peak_rss_mb"] = max(w.get("peak_rss_mb", 0.0), float(row["peak_rss_mb"]))
        if error:
            rec.on_page_error(source=source, rel=rel, page=page, sha256=sha, error=error)
        else:
            rec.on_page(source=source, rel=rel, page=page, sha256=sha,
                        doc=json.loads(str(row["doc"])), text=str(row["text"]))
    elif kind == "skipped":
        rec.on_event(PageSkipped(source, rel, page))
    elif kind == "input_skipped":
        rec.on_event(InputSkipped(source, rel, int(row["pages"])))
    elif kind == "failed":
        rec.on_event(InputFailed(source, None if page < 0 else page, sha or None, error))
    elif kind == "end":
        rec.on_event(InputEnd(source, rel, sha, int(row["pages"]), int(row["emitted"])))


def _check_resources(num_actors: int, cpus: float, gpus: float) -> None:
    have = ray.cluster_resources()
    need_cpu, need_gpu = num_actors * cpus, num_actors * gpus
    if need_cpu > have.get("CPU", 0) or need_gpu > have.get("GPU", 0):
        raise ValueError(
            f"{num_actors} actor(s) need {need_cpu:g} CPU and {need_gpu:g} GPU; the Ray cluster "
            f"has {have.get('CPU', 0):g} CPU and {have.get('GPU', 0):g} GPU. Use fewer actors "
            "(--actors), fewer CPUs per actor (--cpus-per-actor), or add nodes")


__all__ = ["OCRActor", "ocr_dataset", "read_dataset"]
