"""`ocrforge bench`: speed, memory and accuracy of engine configurations and peers, same run.

Method (docs/BENCHMARKS.md repeats it):

* Every configuration (and every ``--compare`` peer) runs in its own worker process, so peak
  memory and thread settings are its own; all workers are started before measuring and only one
  measures at a time. Repetitions are interleaved (rep 1: A, B, C; rep 2: A, B, C; ...), so slow
  phases of a shared machine hit every configuration alike.
* Warm-up: ``warmup`` passes over the first ``warmup_pages`` pages through every measured path,
  not counted.
* Per repetition and configuration: a throughput pass (``read_many`` over the whole set; pages/s
  and lines/s = pages or lines / wall time), a latency pass (one ``read()`` per page, wall time per
  call incl. decode: p50/p95/p99) and, for ocrforge configurations, a batch pass (``ocr_images``
  on groups of ``batch_pages`` decoded pages, 4 unless set: latency per batch). The throughput
  pass uses the engine's own ``pipeline.batch_pages`` unless ``batch_pages`` is set, so it
  measures what a user's ``read_many`` does. Peers have
  no batch API: their throughput pass is one call per page, and those calls are their latencies.
* Reported value = median over repetitions; every value is also given as a ratio to the
  baseline configuration measured in the same run.
* Peak RSS: the worker's resident set size, sampled every 10 ms by a thread (psutil) during the
  measured passes; ``ru_maxrss`` (lifetime peak, incl. model loading) is kept in the JSON too.
  Peak GPU memory: ``torch.cuda.max_memory_allocated`` when the torch runtime runs on CUDA.
* Stage split: per-page ``Page.timings`` of the throughput pass, averaged per page and grouped
  (decode; detection = det_prep + det_infer; orientation = page_orient + cls; recognition = crop + rec_prep +
  rec_infer; post-processing = det_post + rec_post). In the pipelined path stages overlap, so
  their sum can exceed wall time per page.
* Accuracy (labeled sets): the first repetition's throughput pages scored by
  ``ocrforge.evaluation.eval.score_pages`` (same code for ocrforge and peers).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ocrforge.config import EngineConfig, atomic_write_bytes, atomic_write_text, load_profile

SCHEMA = "ocrforge.bench/1"
STAGE_GROUPS: dict[str, tuple[str, ...]] = {
    "decode": ("decode",),
    "detection": ("det_prep", "det_infer"),
    "orientation": ("page_orient", "cls"),  # whole-page 0/90/180/270 and 0/180 per line
    "recognition": ("crop", "rec_prep", "rec_infer"),
    "post-processing": ("det_post", "rec_post"),
}
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ORT_NUM_THREADS")


# ------------------------------------------------------------------------------------ specs
@dataclass
class Entry:
    """One column of the matrix: an ocrforge configuration or a peer engine."""

    name: str
    kind: str  # "ocrforge" | "peer"
    config: dict[str, Any] | None = None
    peer: str | None = None
    source: str = ""  # how it was given (--config text, profile path, default)


def parse_value(s: str) -> Any:
    low = s.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    if "|" in s:  # lists, e.g. providers=cuda|cpu
        return [p for p in s.split("|") if p]
    return s


def parse_config_spec(spec: str, base: EngineConfig | None = None) -> Entry:
    """``NAME=key=val,key=val`` (or just ``NAME`` for the base configuration) -> Entry."""
    base = base or EngineConfig()
    name, _, rest = spec.partition("=")
    name = name.strip()
    if not name:
        raise ValueError(f"--config {spec!r}: expected NAME=key=val,key=val")
    changes: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, val = part.partition("=")
        if not eq:
            raise ValueError(f"--config {spec!r}: {part!r} is not key=val")
        key = key.strip().replace("-", "_")
        val_p = parse_value(val)
        if key == "providers" and isinstance(val_p, str):
            val_p = [val_p]
        changes[key] = val_p
    try:
        cfg = base.with_(**changes) if changes else base
    except ValueError as e:  # ConfigError: names the unknown key or bad value
        raise ValueError(f"--config {spec!r}: {e}") from None
    return Entry(name, "ocrforge", cfg.to_dict(), source=spec)


def parse_profile_spec(spec: str) -> Entry:
    name, eq, path = spec.partition("=")
    if not eq or not name or not path:
        raise ValueError(f"--profile {spec!r}: expected NAME=path.json")
    return Entry(name.strip(), "ocrforge", load_profile(path).to_dict(), source=f"profile {path}")


# ------------------------------------------------------------------------------------ worker
class RssSampler(threading.Thread):
    """Samples this process's RSS every ``interval`` s; ``take()`` returns the peak since last take."""

    def __init__(self, interval: float = 0.01):
        super().__init__(daemon=True, name="ocrforge-rss")
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def run(self) -> None:
        kids: list = []
        n = 0
        while not self._stop.is_set():
            if n % 50 == 0:  # the engine's own worker processes count too (scheduling/processes)
                kids = self._children()
            n += 1
            rss = self._proc.memory_info().rss + sum(self._rss(k) for k in kids)
            with self._lock:
                self._peak = max(self._peak, rss)
            self._stop.wait(self._interval)

    def _children(self) -> list:
        try:
            return self._proc.children(recursive=True)
        except Exception:  # psutil.Error: a child that just ended
            return []

    @staticmethod
    def _rss(p: Any) -> int:
        try:
            return int(p.memory_info().rss)
        except Exception:
            return 0

    def take(self) -> int:
        rss = self._proc.memory_info().rss + sum(self._rss(k) for k in self._children())
        with self._lock:
            peak, self._peak = max(self._peak, rss), rss
        return peak

    def stop(self) -> None:
        self._stop.set()


def _gpu_reset(engine: Any) -> bool:
    cfg = getattr(engine, "config", None)
    if cfg is None or cfg.runtime.backend != "torch" or not str(cfg.runtime.device).startswith("cuda"):
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return True


def _gpu_peak(active: bool) -> int | None:
    if not active:
        return None
    import torch

    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def _build(entry: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from ocrforge.tools.peers import session_threads

    env = {k: os.environ.get(k) for k in THREAD_ENV}
    if entry["kind"] == "peer":
        from ocrforge.tools.peers import PeerEngine

        eng = PeerEngine(entry["peer"])
        return eng, {**eng.description, "env": env}
    from ocrforge.engine import OCR
    from ocrforge.evaluation.eval import engine_description

    eng = OCR(EngineConfig.from_dict(entry["config"]))
    return eng, {**engine_description(eng), "threads": session_threads(eng), "env": env}


def _worker_main(conn: Any, entry: dict[str, Any]) -> None:
    """Child process: build the engine, then answer measurement commands until 'exit'."""
    sampler = RssSampler()
    sampler.start()
    try:
        t0 = time.perf_counter()
        engine, desc = _build(entry)
        conn.send({"ok": True, "init_s": time.perf_counter() - t0, "describe": desc})
    except Exception as e:
        conn.send({"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
        return
    is_ocrforge = entry["kind"] == "ocrforge"
    while True:
        try:
            cmd, arg = conn.recv()
        except EOFError:
            return
        if cmd == "exit":
            conn.send({"ok": True})
            return
        try:
            conn.send({"ok": True, **_command(engine, is_ocrforge, cmd, arg, sampler)})
        except Exception as e:
            conn.send({"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})


BATCH_LATENCY_PAGES = 4  # pages per ocr_images call of the batch pass unless batch_pages is set


def _read_many(engine: Any, paths: list[str], batch_pages: int | None, is_ocrforge: bool) -> list[Any]:
    if not is_ocrforge:
        return list(engine.read_many(paths))
    from ocrforge.evaluation.eval import first_pages

    return first_pages(engine.read_many(paths, batch_pages=batch_pages), paths)


def _read_one(engine: Any, path: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    try:
        page = engine.read(path)
    except Exception as e:  # a bad page is recorded, the run goes on
        from ocrforge.result import Page

        page = Page([], 0, 0, source=path, error=f"{type(e).__name__}: {e}")
    return time.perf_counter() - t0, page


def _command(engine: Any, is_ocrforge: bool, cmd: str, arg: dict[str, Any], sampler: RssSampler) -> dict:
    paths = arg["paths"]
    bp = arg.get("batch_pages")  # None: read_many's own default
    batch = bp or BATCH_LATENCY_PAGES
    if cmd == "warmup":
        _read_many(engine, paths, bp, is_ocrforge)
        for p in paths:
            _read_one(engine, p)
        if is_ocrforge and batch > 1 and arg.get("batch"):
            _batches(engine, paths, batch)
        return {}
    sampler.take()
    gpu = _gpu_reset(engine)
    if cmd == "throughput":
        per_page: list[float] | None = None
        t0 = time.perf_counter()
        if is_ocrforge:
            pages = _read_many(engine, paths, bp, is_ocrforge)
        else:  # peers have no batch API: one call per page, which is also their latency
            timed = [_read_one(engine, p) for p in paths]
            pages, per_page = [pg for _, pg in timed], [dt for dt, _ in timed]
        wall = time.perf_counter() - t0
        stages: dict[str, float] = {}
        for pg in pages:
            for k, v in pg.timings.items():
                stages[k] = stages.get(k, 0.0) + float(v)
        return {"wall_s": wall, "pages": len(pages), "lines": sum(len(p.lines) for p in pages),
                "errors": [f"{p.source}: {p.error}" for p in pages if p.error], "stage_sums_s": stages,
                "latencies_s": per_page,
                "page_dicts": [p.to_dict() for p in pages] if arg.get("want_pages") else None,
                "rss_peak": sampler.take(), "gpu_peak": _gpu_peak(gpu),
                "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if cmd == "latency":
        lat, errors = [], []
        for p in paths:
            dt, page = _read_one(engine, p)
            lat.append(dt)
            if page.error:
                errors.append(f"{p}: {page.error}")
        return {"latencies_s": lat, "errors": errors, "rss_peak": sampler.take(), "gpu_peak": _gpu_peak(gpu)}
    if cmd == "batch":
        lat = _batches(engine, paths, batch)
        return {"batch_latencies_s": lat, "rss_peak": sampler.take(), "gpu_peak": _gpu_peak(gpu)}
    raise ValueError(f"unknown command {cmd!r}")


def _batches(engine: Any, paths: list[str], bp: int) -> list[float]:
    from ocrforge.io.inputs import InputError, iter_pages

    cfg = engine.config
    imgs = []
    for p in paths:  # decoding is not part of a batch's latency here
        try:
            imgs.append(next(iter(iter_pages(p, max_pixels=cfg.limits.max_pixels, pdf_dpi=cfg.limits.pdf_dpi,
                                             max_pdf_pages=cfg.limits.max_pdf_pages))))
        except (InputError, StopIteration):
            continue
    out = []
    for i in range(0, len(imgs), bp):
        t0 = time.perf_counter()
        engine.ocr_images(imgs[i : i + bp])
        out.append(time.perf_counter() - t0)
    return out


class Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, entry: Entry):
        ctx = mp.get_context("spawn")
        self.entry = entry
        self.conn, child = ctx.Pipe()
        # not daemonic: an ocrforge engine may start its own engine processes (many CPUs)
        self.proc = ctx.Process(target=_worker_main, args=(child, entry.__dict__), daemon=False,
                                name=f"ocrforge-bench-{entry.name}")
        self.proc.start()
        child.close()
        self.hello: dict[str, Any] = {}
        self.error: str | None = None

    def wait_ready(self) -> None:
        self.hello = self._recv()
        if not self.hello.get("ok"):
            self.error = self.hello.get("error", "worker failed")

    def _recv(self) -> dict[str, Any]:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self.proc.exitcode
            return {"ok": False, "error": f"worker process died (exit code {code})"}

    def call(self, cmd: str, **arg: Any) -> dict[str, Any]:
        if self.error:
            return {"ok": False, "error": self.error}
        try:
            self.conn.send((cmd, arg))
        except (BrokenPipeError, OSError):
            self.error = f"worker process died (exit code {self.proc.exitcode})"
            return {"ok": False, "error": self.error}
        res = self._recv()
        if not res.get("ok"):
            self.error = res.get("error")
        return res

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("exit", {}))
                self.conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                pass
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join(5)


# ------------------------------------------------------------------------------------ run
def host_info() -> dict[str, Any]:
    import onnxruntime
    import psutil

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "thread_env": {k: os.environ.get(k) for k in THREAD_ENV},
    }


def code_info() -> dict[str, Any]:
    """The ocrforge version and, in a git checkout, its commit and locally modified files."""
    import subprocess

    from ocrforge.version import __version__

    out: dict[str, Any] = {"ocrforge": __version__}
    root = Path(__file__).resolve().parents[3]
    try:
        out["commit"] = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                       text=True, timeout=10, check=True).stdout.strip()
        st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, timeout=10, check=True).stdout
        out["modified"] = [ln[3:] for ln in st.splitlines() if ln.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values), q))


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


@dataclass
class BenchInput:
    paths: list[str]
    records: list[Any] | None  # labeled records, aligned with paths
    dataset: str


def load_inputs(dataset: str | Path, limit: int | None = None) -> BenchInput:
    """A labeled set (folder with labels.jsonl) or plain images/folders (unlabeled: no accuracy)."""
    from ocrforge.evaluation.dataset import LABELS, load_dataset

    p = Path(dataset)
    if (p / LABELS).is_file() or p.suffix == ".jsonl":
        recs = load_dataset(p)
        recs = recs[:limit] if limit else recs
        return BenchInput([str(r.image) for r in recs], recs, str(dataset))
    from ocrforge.io.inputs import expand_paths

    files = expand_paths([str(dataset)])
    if not files:
        raise FileNotFoundError(f"{dataset}: no images found")
    files = files[:limit] if limit else files
    return BenchInput(files, None, str(dataset))


@dataclass
class BenchSettings:
    repeat: int = 3
    warmup: int = 1
    warmup_pages: int = 4
    batch_pages: int | None = None  # None: the engine's read_many default; batch pass of 4
    batch_latency: bool = True
    latency_limit: int | None = None
    casefold: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)


def run_bench(inp: BenchInput, entries: list[Entry], baseline: str | None = None,
              settings: BenchSettings | None = None,
              log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Measure every entry on the same pages; returns the report dict (see ``SCHEMA``)."""
    from ocrforge.evaluation.eval import score_pages
    from ocrforge.result import Page

    st = settings or BenchSettings()
    if st.repeat < 1 or st.warmup < 0:
        raise ValueError("repeat must be >= 1 and warmup >= 0")
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"configuration names must be unique: {', '.join(names)}")
    baseline = baseline or names[0]
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of {', '.join(names)}")
    order = [baseline] + [n for n in names if n != baseline]
    code = code_info()  # before the workers import the engine code
    by_name = {e.name: e for e in entries}
    paths = inp.paths
    lat_paths = paths[: st.latency_limit] if st.latency_limit else paths
    warm = paths[: max(1, st.warmup_pages)]
    log(f"{len(paths)} pages, {len(order)} configurations, repeat {st.repeat}, warm-up {st.warmup}")
    workers = {n: Worker(by_name[n]) for n in order}
    raw: dict[str, list[dict[str, Any]]] = {n: [] for n in order}
    try:
        for n, w in workers.items():
            w.wait_ready()
            log(f"{n}: " + (f"ready in {w.hello['init_s']:.1f} s" if not w.error else f"FAILED: {w.error}"))
        for w in workers.values():
            for _ in range(st.warmup):
                w.call("warmup", paths=warm, batch_pages=st.batch_pages, batch=st.batch_latency)
        for rep in range(st.repeat):
            for n, w in workers.items():
                if w.error:
                    continue
                is_of = by_name[n].kind == "ocrforge"
                run: dict[str, Any] = {}
                tp = w.call("throughput", paths=paths, batch_pages=st.batch_pages, want_pages=rep == 0)
                run["throughput"] = tp
                if tp.get("ok"):
                    log(f"rep {rep + 1}/{st.repeat} {n}: {tp['pages']} pages in {tp['wall_s']:.1f} s "
                        f"({tp['pages'] / tp['wall_s']:.3f} pages/s)")
                if is_of:
                    run["latency"] = w.call("latency", paths=lat_paths)
                elif tp.get("ok"):  # a peer's throughput pass is already one read per page
                    run["latency"] = {"ok": True, "latencies_s": tp["latencies_s"][: len(lat_paths)],
                                      "errors": [], "rss_peak": tp["rss_peak"], "gpu_peak": tp["gpu_peak"]}
                if is_of and st.batch_latency and (st.batch_pages or BATCH_LATENCY_PAGES) > 1:
                    run["batch"] = w.call("batch", paths=paths, batch_pages=st.batch_pages)
                raw[n].append(run)
    finally:
        for w in workers.values():
            w.close()

    out_entries: dict[str, Any] = {}
    for n in order:
        e, w = by_name[n], workers[n]
        ent: dict[str, Any] = {"kind": e.kind, "source": e.source, "peer": e.peer,
                               "config": e.config, "describe": w.hello.get("describe"),
                               "init_s": w.hello.get("init_s"), "error": w.error}
        runs = raw[n]
        ent["runs"] = [_slim(r) for r in runs]
        if inp.records is not None and runs and runs[0]["throughput"].get("ok"):
            pages = [Page.from_dict(d) for d in runs[0]["throughput"]["page_dicts"]]
            acc = score_pages(inp.records, pages, casefold=st.casefold, dataset=inp.dataset)
            ent["accuracy"] = {k: acc[k] for k in ("overall", "by_lang", "by_kind", "options")}
        out_entries[n] = ent
    report = {
        "schema": SCHEMA,
        "dataset": inp.dataset,
        "pages": len(paths),
        "latency_pages": len(lat_paths),
        "labeled": inp.records is not None,
        "settings": {k: v for k, v in st.__dict__.items()},
        "host": host_info(),
        "code": code,
        "baseline": baseline,
        "order": order,
        "entries": out_entries,
    }
    return finalize(report)


def finalize(report: dict[str, Any]) -> dict[str, Any]:
    """(Re)compute each entry's medians and ratios from its recorded runs and accuracy.

    Runs that completed count even when a later one failed (the entry keeps its ``error`` and
    ``completed_reps`` says how many repetitions the medians are over).
    """
    st = BenchSettings(**{k: v for k, v in report["settings"].items() if k in BenchSettings.__dataclass_fields__})
    for ent in report["entries"].values():
        runs = [r for r in ent.get("runs", []) if r.get("throughput", {}).get("ok")]
        ent["completed_reps"] = len(runs)
        ent["metrics"] = _metrics(runs, st) if runs else {}
        acc = ent.get("accuracy")
        if acc:
            o = acc["overall"]
            ent["metrics"].update(cer=o["cer"], cer_aligned=o["cer_aligned"], cer_nospace=o["cer_nospace"],
                                  det_f1=o["det_f1"], line_acc=o["line_acc"])
    base = report["entries"][report["baseline"]]["metrics"]
    for ent in report["entries"].values():
        ent["ratios"] = {k: _ratio(k, v, base.get(k)) for k, v in ent["metrics"].items()}
    return report


def _ratio(key: str, v: Any, b: Any) -> float | None:
    """v / b; none when either is missing or b is ~0 (a stage that did not run, e.g. 0.003 ms)."""
    if not isinstance(v, (int, float)) or not isinstance(b, (int, float)):
        return None
    if abs(b) < (0.1 if key.startswith("stage_") else 1e-12):
        return None
    return v / b


def _slim(run: dict[str, Any]) -> dict[str, Any]:
    """A run without the bulky per-page dicts."""
    out = {}
    for k, v in run.items():
        out[k] = {kk: vv for kk, vv in v.items() if kk != "page_dicts"} if isinstance(v, dict) else v
    return out


def _metrics(runs: list[dict[str, Any]], st: BenchSettings) -> dict[str, Any]:
    per: dict[str, list[float | None]] = {}

    def add(k: str, v: float | None) -> None:
        per.setdefault(k, []).append(v)

    for r in runs:
        tp, lat, bt = r.get("throughput", {}), r.get("latency", {}), r.get("batch")
        if tp.get("ok"):
            add("pages_per_s", tp["pages"] / tp["wall_s"])
            add("lines_per_s", tp["lines"] / tp["wall_s"])
            n = max(1, tp["pages"])
            for g, keys in STAGE_GROUPS.items():
                vals = [tp["stage_sums_s"][k] for k in keys if k in tp["stage_sums_s"]]
                add(f"stage_{g}_ms", 1000.0 * sum(vals) / n if vals else None)
            if "engine" in tp["stage_sums_s"]:  # peers: one opaque engine call per page
                add("stage_engine_ms", 1000.0 * tp["stage_sums_s"]["engine"] / n)
            add("rss_peak_mib", tp["rss_peak"] / 2**20)
            add("ru_maxrss_mib", tp["ru_maxrss"] / 2**20)
            add("gpu_peak_mib", None if tp["gpu_peak"] is None else tp["gpu_peak"] / 2**20)
            add("errors", float(len(tp["errors"])))
        if lat.get("ok"):
            ls = lat["latencies_s"]
            for q in (50, 95, 99):
                add(f"latency_p{q}_ms", None if not ls else 1000.0 * _pct(ls, q))
            add("latency_mean_ms", 1000.0 * sum(ls) / len(ls) if ls else None)
            add("rss_peak_mib", lat["rss_peak"] / 2**20)
        if bt and bt.get("ok") and bt["batch_latencies_s"]:
            add("batch_p50_ms", 1000.0 * _pct(bt["batch_latencies_s"], 50))
            add("batch_p95_ms", 1000.0 * _pct(bt["batch_latencies_s"], 95))
    out: dict[str, Any] = {}
    for k, vals in per.items():
        out[k] = max(v for v in vals if v is not None) if k == "rss_peak_mib" and any(
            v is not None for v in vals) else _median(vals)
    return out


# ------------------------------------------------------------------------------------ output
ROWS: list[tuple[str, str, str]] = [  # key, label, format
    ("pages_per_s", "pages/s (read_many)", "{:.3f}"),
    ("lines_per_s", "lines/s (read_many)", "{:.1f}"),
    ("latency_p50_ms", "latency p50 ms (read)", "{:.0f}"),
    ("latency_p95_ms", "latency p95 ms (read)", "{:.0f}"),
    ("latency_p99_ms", "latency p99 ms (read)", "{:.0f}"),
    ("batch_p50_ms", "batch latency p50 ms", "{:.0f}"),
    ("batch_p95_ms", "batch latency p95 ms", "{:.0f}"),
    ("rss_peak_mib", "peak RSS MiB", "{:.0f}"),
    ("gpu_peak_mib", "peak GPU MiB", "{:.0f}"),
    ("stage_decode_ms", "decode ms/page", "{:.1f}"),
    ("stage_detection_ms", "detection ms/page", "{:.1f}"),
    ("stage_orientation_ms", "orientation ms/page", "{:.1f}"),
    ("stage_recognition_ms", "recognition ms/page", "{:.1f}"),
    ("stage_post-processing_ms", "post-processing ms/page", "{:.1f}"),
    ("stage_engine_ms", "peer engine call ms/page", "{:.1f}"),
    ("cer", "CER %", "pct"),
    ("cer_aligned", "CER, lines aligned to labels %", "pct"),
    ("cer_nospace", "CER without spaces %", "pct"),
    ("det_f1", "detection F1 %", "pct"),
    ("line_acc", "line accuracy %", "pct"),
]


def _fmt(v: Any, fmt: str) -> str:
    if v is None:
        return "n/a"
    return f"{100.0 * v:.2f}" if fmt == "pct" else fmt.format(v)


def _label(report: dict[str, Any], n: str) -> str:
    e = report["entries"][n]
    tag = e["describe"].get("version") if e["kind"] == "peer" and e.get("describe") else None
    return f"{n} ({e['peer']} {tag})" if tag else n


def markdown(report: dict[str, Any]) -> str:
    order = report["order"]
    ents = report["entries"]
    h = report["host"]
    st = report["settings"]
    lines = [
        f"Data: `{report['dataset']}`, {report['pages']} pages"
        f"{' (labeled)' if report['labeled'] else ''}; latency over {report['latency_pages']} pages. "
        f"Host: {h['cpu_model']}, {h['affinity_cpus'] or h['logical_cpus']} CPUs, {h['memory_gib']} GiB; "
        f"onnxruntime {h['onnxruntime']}. Repeat {st['repeat']} (median), warm-up {st['warmup']} "
        f"x {st['warmup_pages']} pages, read_many batch_pages {st['batch_pages'] or 'the engine default'}. "
        f"Ratios (x) are against `{report['baseline']}` measured in the same run.",
        "",
        "| metric | " + " | ".join(_label(report, n) + (" (baseline)" if n == report["baseline"] else "")
                              for n in order) + " |",
        "| --- |" + " ---: |" * len(order),
    ]
    for key, label, fmt in ROWS:
        vals = [ents[n]["metrics"].get(key) for n in order]
        if all(v is None for v in vals):
            continue
        cells = []
        for n, v in zip(order, vals, strict=True):
            r = ents[n]["ratios"].get(key)
            cells.append(_fmt(v, fmt) + (f" ({r:.2f}x)" if r is not None and n != report["baseline"] else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for n in order:
        if ents[n]["error"]:
            done = ents[n].get("completed_reps", 0)
            lines.append(f"\n`{n}` failed: {ents[n]['error']} (after {done} of {st['repeat']} "
                         f"repetitions; its values are over the completed ones)")
    return "\n".join(lines) + "\n"


def chart_png(report: dict[str, Any]) -> bytes:
    """Throughput vs CER (labeled sets) or throughput bars (unlabeled), as PNG bytes."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [n for n in report["order"] if report["entries"][n]["metrics"].get("pages_per_s")]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    xs = [report["entries"][n]["metrics"].get("cer") for n in order]
    ys = [report["entries"][n]["metrics"]["pages_per_s"] for n in order]
    if report["labeled"] and all(x is not None for x in xs):
        for n, x, y in zip(order, xs, ys, strict=True):
            peer = report["entries"][n]["kind"] == "peer"
            ax.scatter([100 * x], [y], s=60, marker="s" if peer else "o",
                       color="tab:gray" if peer else ("tab:red" if n == report["baseline"] else "tab:blue"))
            label = f"{n} (baseline)" if n == report["baseline"] else (f"{n} (peer)" if peer else n)
            ax.annotate(label, (100 * x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
        ax.set_xlabel("CER % (lower is better)")
        ax.set_ylabel("pages/s (higher is better)")
        ax.set_title(f"throughput vs CER: {Path(report['dataset']).name} ({report['pages']} pages)")
        ax.grid(alpha=0.3)
    else:
        ax.bar(order, ys, color=["tab:red" if n == report["baseline"] else "tab:blue" for n in order])
        ax.set_ylabel("pages/s")
        ax.set_title(f"throughput: {Path(report['dataset']).name} ({report['pages']} pages)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_outputs(report: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """bench.json, bench.md and bench.png in out_dir, each written atomically (no bench.png
    without matplotlib: the 'bench' extra)."""
    from ocrforge.extras import installed

    out = Path(out_dir)
    paths = {"json": out / "bench.json", "md": out / "bench.md", "png": out / "bench.png"}
    atomic_write_text(paths["json"], json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    atomic_write_text(paths["md"], markdown(report))
    if installed("matplotlib"):
        atomic_write_bytes(paths["png"], chart_png(report))
    else:
        del paths["png"]
    return paths
