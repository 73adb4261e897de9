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
- ``pages_per_s``: end to end, start-up included,
- ``cpu_s_per_page`` and ``steady_cpu_s_per_page`` (the same steady part): CPU-seconds per page
  by role, ``driver`` (this process), ``actors`` (the OCR actors), ``ray_workers`` (read tasks,
  Ray Data's helper actors, idle workers), ``ray_daemons`` (raylet, GCS, log monitor, agents),
  and ``total``; ``cpu_s_by_process``: the whole run's CPU by process title. CPU-seconds stay
  meaningful on a shared machine; pages/s do not.

Modes: ``local`` (ocrforge batch as one engine: the page pipeline, which overlaps detection and
recognition on more than one core), ``localserial`` (pipeline off: one page at a time on one
thread, what one Ray actor does), ``rayN`` (N actors of 1 CPU and 1 ONNX Runtime thread each).
Run it alone on a quiet machine (timings taken under other load say nothing). On a many-core
host ``--host`` runs local, localserial and Ray with 1, 2, 4, 8 actors, each pinned to a core of
its own (benchmarks/ray_scaling_host.sh: the lent 16-core host, nothing installed from the
network):

    python benchmarks/ray_scaling.py --host --images /path/to/page/images --n 64 --reps 2 \
        --model-set ppocrv6-tiny --budget-s 400 --out ray_scaling_host.json

Needs, beyond ocrforge's own dependencies: ray[data] (ray, pyarrow, pandas, fsspec) and psutil.

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

SAMPLER = -1  # pseudo pid in the snapshots: minus the sampler thread's CPU
DAEMONS = ("raylet", "gcs_server", "log_monitor", "dashboard", "runtime_env", "monitor.py")


def _label(p) -> str:
    """What a process is: a Ray worker's title (ray::NAME), a Ray daemon, or its name."""
    import psutil

    try:
        name, cmd = p.name(), " ".join(p.cmdline()[:4])
    except psutil.Error:
        return ""
    if name.startswith("ray::"):
        return name
    for key in DAEMONS:
        if key in name or key in cmd:
            return "daemon:" + key
    return "ray::starting" if "default_worker.py" in cmd else name


class CpuMeter:
    """CPU seconds (user + system) of this process and every descendant (the Ray daemons it
    started and their workers), sampled every ``period`` s by a thread, so that a worker that
    exits mid-run still counts up to its last sample. The sampler's own CPU is taken off the
    driver. CPU seconds, unlike wall time, stay meaningful on a shared machine.

    ``pin``: each OCR actor process gets a core of its own (``cpu_affinity``), from core
    ``pin_from`` on, as it appears."""

    def __init__(self, period: float = 0.2, pin: bool = False, pin_from: int = 0):
        import threading

        self.me, self.period, self.pin, self.next_core = os.getpid(), period, pin, pin_from
        self.base: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.pinned: dict[int, int] = {}
        self.snaps: list[tuple[float, dict[int, float]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self) -> dict[int, float]:
        import psutil

        me, got = psutil.Process(), {}
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            got[p.pid] = t.user + t.system
            if self.names.get(p.pid, "") in ("", "ray::starting", "ray::IDLE", "python",
                                             "python3"):
                self.names[p.pid] = _label(p) or self.names.get(p.pid, "")
                label = self.names[p.pid]
            else:
                label = self.names[p.pid]
            # actors of an earlier run still exiting are in base: not pinned
            if (self.pin and "OCRActor" in label and p.pid not in self.pinned
                    and p.pid not in self.base):
                self._pin(p)
        return got

    def _pin(self, p) -> None:
        import psutil

        cores = sorted(os.sched_getaffinity(0))
        core = cores[self.next_core % len(cores)]
        try:
            p.cpu_affinity([core])
        except psutil.Error:
            return
        self.pinned[p.pid], self.next_core = core, self.next_core + 1

    def _sample(self, sampler_t0: float | None = None) -> None:
        got = self._read()
        cur = dict(self.snaps[-1][1]) if self.snaps else {SAMPLER: 0.0}
        cur.update({pid: c - self.base.get(pid, 0.0) for pid, c in got.items()})
        if sampler_t0 is not None:  # the sampler's own CPU, taken off the driver's
            cur[SAMPLER] = -(time.thread_time() - sampler_t0)
        self.snaps.append((time.time(), cur))

    def _loop(self) -> None:
        t0 = time.thread_time()
        while not self.stop.wait(self.period):
            self._sample(t0)

    def __enter__(self) -> CpuMeter:
        pin, self.pin = self.pin, False  # what runs now is not this run's
        self.base = self._read()
        self.pin = pin
        self._sample()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()

    def roles(self, snap: dict[int, float], actor_pids: set[int]) -> dict[str, float]:
        """CPU seconds by role: driver (this process), actors (the OCR actors), ray_workers
        (Ray's other workers: read tasks, Ray Data's helper actors, idle workers), ray_daemons
        (raylet, GCS, log monitor, agents), other (anything else started)."""
        out = dict.fromkeys(("driver", "actors", "ray_workers", "ray_daemons", "other"), 0.0)
        for pid, c in snap.items():
            name = self.names.get(pid, "")
            role = ("driver" if pid in (self.me, SAMPLER) else "actors" if pid in actor_pids
                    else "ray_daemons" if name.startswith("daemon:")
                    else "ray_workers" if name.startswith("ray::") else "other")
            out[role] += c
        return out

    def by_name(self, actor_pids: set[int]) -> dict[str, float]:
        """CPU seconds of the whole run by process title (actors as one)."""
        out: dict[str, float] = {}
        for pid, c in self.snaps[-1][1].items():
            name = ("driver" if pid in (self.me, SAMPLER) else "OCR actors" if pid in actor_pids
                    else self.names.get(pid, "?"))
            out[name] = out.get(name, 0.0) + c
        return {k: round(v, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v > 0.005}

    def at(self, t: float) -> dict[int, float]:
        """The last snapshot taken at or before wall time ``t``."""
        best = self.snaps[0][1]
        for ts, snap in self.snaps:
            if ts > t:
                break
            best = snap
        return best


def per_page(cpu: dict[str, float], pages: int) -> dict[str, float]:
    out = {k: round(v / max(1, pages), 4) for k, v in cpu.items()}
    out["total"] = round(sum(cpu.values()) / max(1, pages), 4)
    return out


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


def steady_window(out: Path, ready_at: float | None) -> tuple[float, float, int]:
    """(first, last, pages) of the steady part of a run: the output files written after
    ``ready_at`` (wall clock; None: every page), from the first of them to the last."""
    mt = sorted(p.stat().st_mtime for p in out.rglob("*.json"))
    if ready_at is not None:
        mt = [t for t in mt if t >= ready_at]
    if len(mt) < 2 or mt[-1] <= mt[0]:
        return 0.0, 0.0, 0
    return mt[0], mt[-1], len(mt) - 1  # pages finished after the first one


def run_mode(mode: str, src: Path, out: Path, cfg, pin: bool = False) -> dict:
    from ocrforge.jobs import run_job
    from ocrforge.ray import read_dataset

    # the local job as one engine: on 4+ cores read_many would start engine processes
    one = cfg.with_(**{"pipeline.processes": 1})
    # pinned actors take cores 1..N: core 0 is left to the driver and Ray's own processes
    with CpuMeter(pin=pin, pin_from=1) as meter:
        t_wall, t0 = time.time(), time.perf_counter()
        if mode.startswith("local"):
            c = one.with_(pipeline=False) if mode == "localserial" else one
            s = run_job([src], out, config=c, progress=False)
        else:
            s = read_dataset([src], out, num_actors=int(mode[3:]), num_cpus_per_actor=1,
                             config=cfg, progress=False, quiet=True)
        wall = time.perf_counter() - t0
    assert not s.failures, s.failures
    actors = sorted(s.workers.values(), key=lambda w: w.get("engine_started_at", 0))
    pids = {a["pid"] for a in actors}
    ready = max((a["ready_at"] for a in actors), default=None)
    first, last, steady_pages = steady_window(out, ready)
    a, b = meter.roles(meter.at(first), pids), meter.roles(meter.at(last), pids)
    steady_cpu = {k: b[k] - a[k] for k in a}
    first_page = min(p.stat().st_mtime for p in out.rglob("*.json"))
    return {"mode": mode, "pages": s.pages_read, "wall_s": round(wall, 3),
            "pages_per_s": round(s.pages_read / wall, 4),
            "steady_pages_per_s": round(steady_pages / (last - first), 4) if steady_pages else 0.0,
            "steady_pages": steady_pages, "first_page_s": round(first_page - t_wall, 3),
            # CPU seconds per page by role: the whole run (start-up included) and the steady part
            "cpu_s_per_page": per_page(meter.roles(meter.snaps[-1][1], pids), s.pages_read),
            "steady_cpu_s_per_page": per_page(steady_cpu, steady_pages),
            "cpu_s_by_process": meter.by_name(pids),
            "actors": [{"pages": a["pages"], "busy_s": round(a["busy_s"], 3),
                        "actor_launch_s": round(a["engine_started_at"] - t_wall, 3),
                        "engine_start_s": a["engine_start_s"],
                        "process_cpu_s": round(a.get("process_cpu_s", 0.0), 3),
                        "core": meter.pinned.get(a["pid"]),
                        "peak_rss_mb": a.get("peak_rss_mb")} for a in actors],
            "load1_before": os.getloadavg()[0]}


def paired(rows: list[dict], a: str, b: str, key: str) -> list[float]:
    xs = [r for r in rows if r["mode"] == a]
    ys = [r for r in rows if r["mode"] == b]
    return [round(x[key] / y[key], 3) if y[key] else 0.0 for x, y in zip(xs, ys, strict=False)]


def summarize(rows: list[dict], modes: list[str]) -> dict:
    done = [m for m in modes if any(r["mode"] == m for r in rows)]

    def med(get) -> dict:
        return {m: round(statistics.median(get(r) for r in rows if r["mode"] == m), 4)
                for m in done}

    summary = {"median": {
        "steady_pages_per_s": med(lambda r: r["steady_pages_per_s"]),
        "pages_per_s": med(lambda r: r["pages_per_s"]),
        "cpu_s_per_page": med(lambda r: r["cpu_s_per_page"]["total"]),
        "steady_cpu_s_per_page": med(lambda r: r["steady_cpu_s_per_page"]["total"]),
        "steady_cpu_s_per_page_by_role": {
            m: {k: round(statistics.median(r["steady_cpu_s_per_page"][k] for r in rows
                                           if r["mode"] == m), 4)
                for k in ("driver", "actors", "ray_workers", "ray_daemons", "other")}
            for m in done}}}
    ratios = {}
    rays = [m for m in done if m.startswith("ray") and m != "ray1"]
    pairs = [(m, "ray1") for m in rays] + [("ray1", "local"), ("ray1", "localserial")]
    for a, b in pairs:
        if a in done and b in done:
            for key in ("steady_pages_per_s", "pages_per_s"):
                ratios[f"{a}/{b} {key}"] = paired(rows, a, b, key)
    summary["paired_ratios"] = ratios
    return summary


def copy_pages(images: str, src: Path, n: int) -> None:
    """The first n images of the folder (sorted by name); past its end, again with a prefix."""
    files = sorted(p for p in Path(images).iterdir() if p.is_file())
    if not files:
        raise SystemExit(f"no images in {images}")
    for i in range(n):
        p = files[i % len(files)]
        shutil.copy(p, src / (p.name if i < len(files) else f"r{i // len(files)}_{p.name}"))


def default_modes(host: bool) -> list[str]:
    cores = len(os.sched_getaffinity(0))
    if host:  # actors 1, 2, 4, 8 where the cores allow one per actor plus one for the rest
        return ["local", "localserial"] + [f"ray{k}" for k in (1, 2, 4, 8) if k < cores]
    return ["local", "localserial", "ray1", "ray2"] + (["ray4"] if cores >= 5 else [])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", help="folder of page images (default with --smoke: generated)")
    ap.add_argument("--n", type=int, default=None,
                    help="pages per run: the first N images (sorted; repeated past the end); "
                         "default 48, 64 with --host")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--model-set", default=None)
    ap.add_argument("--modes", help="comma separated (default local,localserial,ray1,ray2 and "
                    "ray4 when the machine has 5 or more cores; --host: ray1,2,4,8)")
    ap.add_argument("--host", action="store_true",
                    help="a bigger quiet host: actors 1,2,4,8 of one thread, each pinned to a "
                         "core of its own (core 0 left to the driver and Ray)")
    ap.add_argument("--pin", action="store_true", help="pin each actor to a core (--host: on)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no run after this many seconds (0: no limit); the report "
                         "has what finished")
    ap.add_argument("--smoke", action="store_true", help="6 generated pages, 1 rep: does it run")
    ap.add_argument("--out", help="write the JSON report here (rewritten after every run)")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.reps = min(args.n or 6, 6), 1
        args.modes = args.modes or "local,ray1,ray2"
    if not args.images and not args.smoke:
        ap.error("--images is required (or --smoke)")
    args.n = args.n or (64 if args.host else 48)
    args.pin = args.pin or args.host
    return args


def main() -> int:
    args = parse_args()
    modes = args.modes.split(",") if args.modes else default_modes(args.host)
    started = time.perf_counter()

    import ray

    from ocrforge.config import EngineConfig

    work = Path(tempfile.mkdtemp(prefix="ray_scaling_"))
    src, warm = work / "in", work / "warm"
    src.mkdir()
    warm.mkdir()
    if args.images:
        copy_pages(args.images, src, args.n)
        copy_pages(args.images, warm, min(args.n, 8))
    else:
        make_pages(src, args.n)
        make_pages(warm, 2)
    n = len(list(src.iterdir()))
    cfg = EngineConfig(intra_op_threads=1)
    if args.model_set:
        cfg = cfg.with_(model_set=args.model_set)
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
             log_to_driver=False)
    ray_start = time.perf_counter() - t0
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()} {os.cpu_count()} cores "
                         f"({len(os.sched_getaffinity(0))} usable)",
              "ray": ray.__version__, "images": args.images or "generated", "n": n,
              "reps": args.reps, "smoke": args.smoke, "host": args.host, "pin": args.pin,
              "config": {"model_set": cfg.models.name, "intra_op_threads": 1},
              "ray_start_s": round(ray_start, 3)}
    rows, texts = [], {}
    try:
        # warm: model files in the page cache, Ray's per-session helper actors started (a
        # cluster that runs jobs has them already)
        run_mode("local", warm, work / "warm-local", cfg)
        if any(m.startswith("ray") for m in modes):
            run_mode("ray1", warm, work / "warm-ray", cfg)
        for rep in range(args.reps):
            for mode in modes[rep % len(modes):] + modes[: rep % len(modes)]:
                if args.budget_s and time.perf_counter() - started > args.budget_s:
                    print(f"budget of {args.budget_s:g} s spent: {mode} rep {rep} not run",
                          flush=True)
                    continue
                out = work / f"{mode}-{rep}"
                row = {"rep": rep, **run_mode(mode, src, out, cfg, pin=args.pin)}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "cpu_s_by_process"}),
                      flush=True)
                texts[mode] = {p.name: p.read_text() for p in out.glob("*.txt")}
                shutil.rmtree(out, ignore_errors=True)
                write_report(args.out, report, rows, modes, texts)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    final = write_report(args.out, report, rows, modes, texts)
    print(json.dumps({k: v for k, v in final.items() if k != "runs"}, indent=1))
    return 0 if final["same_text_in_every_mode"] else 1


def write_report(path: str | None, head: dict, rows: list[dict], modes: list[str],
                 texts: dict[str, dict[str, str]]) -> dict:
    first = next(iter(texts.values()), {})
    report = {**head, "load1_at_end": os.getloadavg()[0], **summarize(rows, modes),
              "same_text_in_every_mode": all(t == first for t in texts.values()),
              "elapsed_runs": len(rows), "runs": rows}
    if path:
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        tmp.replace(path)
    return report


if __name__ == "__main__":
    raise SystemExit(main())
