"""Ray scale-out on one machine: the local job vs Ray with 1, 2 (and 4) one-thread actors.

Every mode reads the same pages into a fresh output folder (nothing to resume); the modes are
interleaved and their order rotated each repetition, so a change in the machine's load hits
every mode alike. Per run it reports apart:

- ``ray_start_s``: ``ray.init`` of the local Ray instance (once, before every timing; a cluster
  has it already),
- ``actor_launch_s``: job start -> each actor's constructor entered (Ray Data's executor, actor
  processes, imports),
- ``engine_start_s``: each actor's engine construction (model files opened),
- ``steady_pages_per_s``: pages written after the last actor was ready (Ray) or after the first
  page (local), over the time between them: the rate a long job converges to,
- ``pages_per_s``: end to end, start-up included.

Modes: ``local`` (ocrforge batch: the engine's page pipeline, which overlaps detection and
recognition on more than one core), ``localserial`` (pipeline off: one page at a time on one
thread, what one Ray actor does), ``rayN`` (N actors of 1 CPU and 1 ONNX Runtime thread each).
Run it alone on a quiet machine (timings taken under other load say nothing), e.g. on a 16-core
host:

    python benchmarks/ray_scaling.py --images /path/to/page/images --n 64 --reps 2 \
        --model-set ppocrv6-tiny --out benchmarks/results/ray_scaling.json

``--smoke``: 6 generated pages, one repetition, local/ray1/ray2: checks that it runs (CI-sized;
its numbers mean nothing).
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
    """CPU seconds (user + system) of this process and each descendant, by pid."""
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
    """CPU between two snapshots: processes alive at the end (their growth), plus actors that
    already exited (their own last report)."""
    total = sum(v - start.get(pid, 0.0) for pid, v in end.items())
    return total + sum(a.get("process_cpu_s", 0.0) for a in actors if a["pid"] not in end)


def make_pages(folder: Path, n: int) -> None:
    """n small generated pages with a few lines each (smoke mode)."""
    from PIL import Image, ImageDraw

    for i in range(n):
        img = Image.new("RGB", (640, 320), "white")
        d = ImageDraw.Draw(img)
        for k in range(4):
            d.text((20, 20 + 70 * k), f"page {i} line {k}: scale-out {i * 7 + k}", fill="black",
                   font_size=28)
        img.save(folder / f"page{i:03d}.png")


def steady_rate(out: Path, ready_at: float | None) -> tuple[float, int]:
    """(pages/s, pages counted) of the output files written after ``ready_at`` (wall clock; None:
    after the first page), between the first and the last of them."""
    mt = sorted(p.stat().st_mtime for p in out.rglob("*.json"))
    if ready_at is not None:
        mt = [t for t in mt if t >= ready_at]
    if len(mt) < 2 or mt[-1] <= mt[0]:
        return 0.0, len(mt)
    return (len(mt) - 1) / (mt[-1] - mt[0]), len(mt)


def run_mode(mode: str, src: Path, out: Path, cfg) -> dict:
    from ocrforge.jobs import run_job
    from ocrforge.ray import read_dataset

    t_wall, c0, t0 = time.time(), cpu_snapshot(), time.perf_counter()
    if mode.startswith("local"):
        c = cfg.with_(pipeline=False) if mode == "localserial" else cfg
        s = run_job([src], out, config=c, progress=False)
    else:
        s = read_dataset([src], out, num_actors=int(mode[3:]), num_cpus_per_actor=1,
                         config=cfg, progress=False, quiet=True)
    wall = time.perf_counter() - t0
    assert not s.failures, s.failures
    actors = sorted(s.workers.values(), key=lambda w: w.get("engine_started_at", 0))
    cpu = cpu_between(c0, cpu_snapshot(), actors)
    ready = max((a["ready_at"] for a in actors), default=None)
    steady, counted = steady_rate(out, ready)
    first = min(p.stat().st_mtime for p in out.rglob("*.json"))
    return {"mode": mode, "pages": s.pages_read, "wall_s": round(wall, 3),
            "pages_per_s": round(s.pages_read / wall, 4),
            "steady_pages_per_s": round(steady, 4), "steady_pages": counted,
            "first_page_s": round(first - t_wall, 3), "cpu_s_per_page": round(cpu / s.pages_read, 4),
            "actors": [{"pages": a["pages"], "busy_s": round(a["busy_s"], 3),
                        "actor_launch_s": round(a["engine_started_at"] - t_wall, 3),
                        "engine_start_s": a["engine_start_s"],
                        "peak_rss_mb": a.get("peak_rss_mb")} for a in actors],
            "load1_before": os.getloadavg()[0]}


def paired(rows: list[dict], a: str, b: str, key: str) -> list[float]:
    xs = [r for r in rows if r["mode"] == a]
    ys = [r for r in rows if r["mode"] == b]
    return [round(x[key] / y[key], 3) if y[key] else 0.0 for x, y in zip(xs, ys, strict=True)]


def summarize(rows: list[dict], modes: list[str]) -> dict:
    med = {k: {m: statistics.median(r[k] for r in rows if r["mode"] == m) for m in modes}
           for k in ("steady_pages_per_s", "pages_per_s", "cpu_s_per_page")}
    ratios = {}
    for a, b in (("ray2", "ray1"), ("ray4", "ray1"), ("ray1", "local"), ("ray1", "localserial")):
        if a in modes and b in modes:
            for key in ("steady_pages_per_s", "pages_per_s"):
                ratios[f"{a}/{b} {key}"] = paired(rows, a, b, key)
    return {"median": med, "paired_ratios": ratios}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", help="folder of page images (default with --smoke: generated)")
    ap.add_argument("--n", type=int, default=48, help="first N images (sorted by name)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--model-set", default=None)
    ap.add_argument("--modes", help="comma separated (default local,localserial,ray1,ray2 and "
                    "ray4 when the machine has 5 or more cores)")
    ap.add_argument("--smoke", action="store_true", help="6 generated pages, 1 rep: does it run")
    ap.add_argument("--out", help="write the JSON report here")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.reps = min(args.n, 6), 1
        args.modes = args.modes or "local,ray1,ray2"
    if not args.images and not args.smoke:
        ap.error("--images is required (or --smoke)")
    modes = (args.modes or "local,localserial,ray1,ray2"
             + (",ray4" if (os.cpu_count() or 1) >= 5 else "")).split(",")

    import ray

    from ocrforge.config import EngineConfig

    work = Path(tempfile.mkdtemp(prefix="ray_scaling_"))
    src = work / "in"
    src.mkdir()
    if args.images:
        for p in sorted(p for p in Path(args.images).iterdir() if p.is_file())[: args.n]:
            shutil.copy(p, src / p.name)
    else:
        make_pages(src, args.n)
    n = len(list(src.iterdir()))
    cfg = EngineConfig(intra_op_threads=1)
    if args.model_set:
        cfg = cfg.with_(model_set=args.model_set)
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             log_to_driver=False)
    ray_start = time.perf_counter() - t0
    try:
        # warm: model files in the page cache, Ray's per-session helper actors started (a
        # cluster that runs jobs has them already)
        run_mode("local", src, work / "warm-local", cfg)
        if any(m.startswith("ray") for m in modes):
            run_mode("ray1", src, work / "warm-ray", cfg)
        rows, texts = [], {}
        for rep in range(args.reps):
            for mode in modes[rep % len(modes):] + modes[: rep % len(modes)]:
                out = work / f"{mode}-{rep}"
                row = {"rep": rep, **run_mode(mode, src, out, cfg)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                texts[mode] = {p.name: p.read_text() for p in out.glob("*.txt")}
    finally:
        ray.shutdown()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()} {os.cpu_count()} cores",
              "load1_at_end": os.getloadavg()[0], "ray": ray.__version__,
              "images": args.images or "generated", "n": n, "reps": args.reps,
              "smoke": args.smoke, "config": {"model_set": cfg.models.name,
                                              "intra_op_threads": 1},
              "ray_start_s": round(ray_start, 3), **summarize(rows, modes),
              "same_text_in_every_mode": all(t == texts[modes[0]] for t in texts.values()),
              "runs": rows}
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if report["same_text_in_every_mode"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
