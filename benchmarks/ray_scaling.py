"""Ray backend on one machine: 2 single-thread actors vs 1, and 1 actor vs the local job.

Every configuration reads the same pages into a fresh output folder (nothing to resume), in
an order rotated each repetition; wall time covers the whole job call including engine
construction (local: ``ocrforge.jobs.run_job``; Ray: ``ocrforge.ray.read_dataset`` on a Ray
instance started once, before the timings, as a cluster would be). The 1-minute load average
is recorded around every run: on a shared machine the other processes' load moves both the
absolute numbers and the ratios.

    python benchmarks/ray_scaling.py --images /work/shared/data/ocr-dev/images --n 24 \
        --reps 3 --out benchmarks/results/ray_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def cpu_snapshot() -> dict[int, float]:
    """CPU seconds (user + system) of this process and each descendant (Ray's daemons and
    workers), by pid."""
    import psutil

    me = psutil.Process()
    got = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        got[p.pid] = t.user + t.system
    return got


def cpu_between(start: dict[int, float], end: dict[int, float], actors: list[dict]) -> float:
    """CPU spent between two snapshots: processes alive at the end (their growth, or all of it
    when new), plus actors that already exited (their own last report). Processes that exited
    and are not actors (idle Ray workers) are not counted."""
    total = sum(v - start.get(pid, 0.0) for pid, v in end.items())
    for a in actors:
        if a["pid"] not in end:
            total += a.get("process_cpu_s", 0.0)
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", required=True, help="folder of page images")
    ap.add_argument("--n", type=int, default=24, help="first N images (sorted by name)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model-set", default=None)
    ap.add_argument("--no-pipeline", action="store_true", help="engine pipeline off (serial)")
    ap.add_argument("--modes", default="local,localserial,ray1,ray2")
    ap.add_argument("--out")
    args = ap.parse_args()

    import ray

    from ocrforge.config import EngineConfig
    from ocrforge.jobs import run_job
    from ocrforge.ray import read_dataset

    work = Path(tempfile.mkdtemp(prefix="ray_scaling_"))
    src = work / "in"
    src.mkdir()
    files = sorted(p for p in Path(args.images).iterdir() if p.is_file())[: args.n]
    for p in files:
        shutil.copy(p, src / p.name)
    cfg = EngineConfig(intra_op_threads=1)
    if args.model_set:
        cfg = cfg.with_(model_set=args.model_set)
    if args.no_pipeline:
        cfg = cfg.with_(pipeline=False)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)

    def run(mode: str, out: Path) -> tuple[int, list[int], list[float], list[dict]]:
        if mode == "local":
            s = run_job([src], out, config=cfg, progress=False)
        elif mode == "localserial":  # engine pipeline off: one page at a time, one thread
            s = run_job([src], out, config=cfg.with_(pipeline=False), progress=False)
        else:
            s = read_dataset([src], out, num_actors=int(mode[3:]), num_cpus_per_actor=1,
                             config=cfg, progress=False)
        assert not s.failures, s.failures
        ws = sorted(s.workers.values(), key=lambda w: w["pages"])
        return (s.pages_read, [w["pages"] for w in ws], [round(w["busy_s"], 2) for w in ws], ws)

    # model files into the page cache; Ray's per-session helper actors (stats, autoscaling
    # coordinator) started: a cluster that runs jobs has them already
    run("local", work / "warmup")
    if any(m.startswith("ray") for m in args.modes.split(",")):
        run("ray1", work / "warmup-ray")
    modes = args.modes.split(",")
    rows = []
    texts: dict[str, dict[str, str]] = {}
    for rep in range(args.reps):
        order = modes[rep % len(modes):] + modes[: rep % len(modes)]
        for mode in order:
            out = work / f"{mode}-{rep}"
            load0 = os.getloadavg()[0]
            c0 = cpu_snapshot()
            t0 = time.perf_counter()
            n, per_actor, busy, actors = run(mode, out)
            wall = time.perf_counter() - t0
            cpu = cpu_between(c0, cpu_snapshot(), actors)
            # steady rate: pages between the first and the last output file written (no
            # start-up: engine construction, Ray actor start)
            mt = sorted(p.stat().st_mtime for p in out.rglob("*.json"))
            steady = (len(mt) - 1) / (mt[-1] - mt[0]) if len(mt) > 1 and mt[-1] > mt[0] else 0.0
            row = {"rep": rep, "mode": mode, "pages": n, "pages_per_actor": per_actor,
                   "actor_busy_s": busy, "cpu_s": round(cpu, 2),
                   "cpu_s_per_page": round(cpu / n, 4),
                   "wall_s": round(wall, 3), "steady_pages_per_s": round(steady, 4),
                   "pages_per_s": round(n / wall, 4), "load1_before": load0,
                   "load1_after": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
            texts[mode] = {p.name: p.read_text() for p in out.glob("*.txt")}
    same = all(texts[m] == texts[modes[0]] for m in modes)
    med = {m: statistics.median(r["pages_per_s"] for r in rows if r["mode"] == m) for m in modes}
    med_steady = {m: statistics.median(r["steady_pages_per_s"] for r in rows if r["mode"] == m)
                  for m in modes}
    med_cpu = {m: statistics.median(r["cpu_s_per_page"] for r in rows if r["mode"] == m)
               for m in modes}
    paired = {}
    for key in ("pages_per_s", "steady_pages_per_s", "cpu_s_per_page"):
        for a, b in (("ray2", "ray1"), ("ray1", "local"), ("ray1", "localserial")):
            if a in modes and b in modes:
                paired[f"{a}/{b} {key}"] = [round(x[key] / y[key], 3) for x, y in zip(
                    [r for r in rows if r["mode"] == a], [r for r in rows if r["mode"] == b],
                    strict=True)]
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()} {os.cpu_count()} cores", "ray": ray.__version__,
              "images": str(args.images), "n": len(files), "config": {
                  "model_set": cfg.model_set, "intra_op_threads": 1,
                  "pipeline": cfg.pipeline},
              "median_pages_per_s": med, "median_steady_pages_per_s": med_steady,
              "median_cpu_s_per_page": med_cpu,
              "paired_ratios": paired,
              "median_ratios": {k: round(statistics.median(v), 3) for k, v in paired.items()},
              "same_text_in_every_mode": same, "runs": rows}
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
