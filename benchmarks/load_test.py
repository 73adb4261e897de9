#!/usr/bin/env python
"""Load test for `ocrforge serve` over loopback HTTP (client: httpx only).

Scenarios (all bounded in requests and time):
  sweep     concurrency 1, 8, 32 on a folder of images -> p50/p95/p99 latency, req/s, errors
  batching  dynamic batching on vs off at concurrency 32 (alternating rounds, same images)
            -> throughput ratio
  overload  more concurrent clients than the server admits -> 429s, zero 5xx, zero lost
            responses, latency of admitted requests
  soak      N requests of small images -> server RSS after warm-up, at the end, growth %
  ab        two servers started side by side (A: --server-args, B: those + --ab-args, with
            --ab-env), then every concurrency level on each in turn, A B then B A, --rounds
            times -> each server's median req/s and latency a level, and B / A. One start for
            both instead of one cold start per row, and the order cancels drift within the call

By default the script starts the servers itself (`python -m ocrforge.cli serve` on free
loopback ports, extra options from --server-args). With --url it targets a running server
instead (then `batching` needs --url-nobatch, and `overload` expects that server's queue to be
smaller than --overload-concurrency).

  python benchmarks/load_test.py --out results.json --markdown serving.md
  python benchmarks/load_test.py --server-args "--runtime torch --device cuda --precision fp16"
  python benchmarks/load_test.py --url http://127.0.0.1:8000 --scenarios sweep
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

DEFAULT_IMAGES = "/work/shared/data/ocr-dev/images"
IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".pdf"}


# ---------------------------------------------------------------------- servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`ocrforge serve` as a child process on a free loopback port."""

    def __init__(self, args: list[str], name: str, log_dir: Path,
                 env_extra: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        self.args = args
        self.log_path = log_dir / f"server-{name}.log"
        cmd = [sys.executable, "-m", "ocrforge.commands.serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--no-access-log", "--log-level", "warning", *args]
        self.cmd = cmd
        self._log = open(self.log_path, "wb")
        env = {k: v for k, v in os.environ.items() if k != "OCRFORGE_API_KEY"}
        env.update(env_extra or {})
        self.started = time.monotonic()
        self.ready_s: float | None = None  # start -> /readyz 200
        self.ready_info: dict = {}  # what /readyz said then
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"server {self.name} exited ({self.proc.returncode}); "
                                   f"{self.log_path} ends:\n{tail}")
            try:
                r = httpx.get(self.url + "/readyz", timeout=2)
                if r.status_code == 200:
                    self.ready_s = round(time.monotonic() - self.started, 2)
                    self.ready_info = r.json()
                    print(f"server {self.name} ready in {self.ready_s} s", flush=True)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"server {self.name} not ready within {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def server_rss(url: str, headers: dict[str, str]) -> float | None:
    """Resident memory of the server process (bytes) from its own /metrics."""
    try:
        text = httpx.get(url + "/metrics", headers=headers, timeout=10).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("process_resident_memory_bytes "):
            return float(line.split()[1])
    return None


def start_ab(args: argparse.Namespace, base: list[str], log_dir: Path,
             servers: dict[str, Server]) -> dict:
    """Servers A and B, started side by side (registered in ``servers`` at once, so however
    the run ends they are stopped); what each said when ready."""
    env = dict(kv.split("=", 1) for kv in shlex.split(args.ab_env))
    servers["A"] = Server(base, "A", log_dir)
    servers["B"] = Server(base + shlex.split(args.ab_args), "B", log_dir, env)
    for name in ("A", "B"):
        servers[name].wait_ready()
    return {"a_args": args.server_args, "b_args": f"{args.server_args} {args.ab_args}".strip(),
            "b_env": args.ab_env, "ready_s": {n: servers[n].ready_s for n in ("A", "B")},
            "ready_info": {n: servers[n].ready_info for n in ("A", "B")}}


# ---------------------------------------------------------------------- load generator
def load_payloads(folder: str, limit: int | None = None, max_side: int | None = None) -> list[tuple[str, bytes]]:
    files = sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in IMAGE_EXTS)
    if max_side:
        from PIL import Image

        files = [p for p in files if max(Image.open(p).size) <= max_side]
    if limit:
        files = files[:limit]
    if not files:
        raise SystemExit(f"no images in {folder}")
    return [(p.name, p.read_bytes()) for p in files]


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def run_load(url: str, payloads: list[tuple[str, bytes]], concurrency: int, requests: int,
                   max_seconds: float, headers: dict[str, str], honor_retry_after: bool = False,
                   offset: int = 0) -> dict:
    """`requests` POSTs by `concurrency` clients (or until max_seconds); every outcome counted."""
    lat_ok: list[float] = []
    statuses: dict[str, int] = {}
    lost: list[str] = []
    batch_pages: list[int] = []
    counter = iter(range(requests))
    t_end = time.perf_counter() + max_seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(300.0)) as client:
        async def worker() -> None:
            for i in counter:
                if time.perf_counter() > t_end:
                    return
                name, data = payloads[(i + offset) % len(payloads)]
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/ocr", files={"file": (name, data)})
                except Exception as e:  # a response that never came back
                    lost.append(f"{type(e).__name__}: {e}")
                    continue
                dt = time.perf_counter() - t0
                statuses[str(r.status_code)] = statuses.get(str(r.status_code), 0) + 1
                if r.status_code == 200:
                    lat_ok.append(dt)
                    batch_pages.append(r.json().get("batch", {}).get("pages", 0))
                elif r.status_code == 429 and honor_retry_after:
                    await asyncio.sleep(float(r.headers.get("retry-after", "1")))

        t_start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t_start
    sent = sum(statuses.values()) + len(lost)
    n5xx = sum(v for k, v in statuses.items() if k.startswith("5"))
    errors = sent - statuses.get("200", 0)
    ms = [x * 1000 for x in lat_ok]
    return {
        "concurrency": concurrency, "requests": sent, "ok": len(lat_ok), "wall_s": round(wall, 2),
        "req_per_s": round(len(lat_ok) / wall, 3) if wall else None,
        "p50_ms": _r(pct(ms, 50)), "p95_ms": _r(pct(ms, 95)), "p99_ms": _r(pct(ms, 99)),
        "max_ms": _r(max(ms) if ms else None),
        "error_rate": round(errors / sent, 4) if sent else None,
        "status": statuses, "5xx": n5xx, "lost": len(lost), "lost_examples": lost[:3],
        "mean_batch_pages": _r(statistics.mean(batch_pages) if batch_pages else None, 2),
    }


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def load(url, payloads, concurrency, requests, max_seconds, headers, **kw) -> dict:
    res = asyncio.run(run_load(url, payloads, concurrency, requests, max_seconds, headers, **kw))
    print(f"  c={concurrency:<3} {res['ok']}/{res['requests']} ok  {res['req_per_s']} req/s  "
          f"p50 {res['p50_ms']} p95 {res['p95_ms']} p99 {res['p99_ms']} ms  status {res['status']}  "
          f"lost {res['lost']}  mean batch {res['mean_batch_pages']}", flush=True)
    return res


# ---------------------------------------------------------------------- scenarios
def scenario_sweep(url, payloads, args, headers, out: dict) -> dict:
    """Fills ``out`` level by level (the caller saves it after each: a run cut short keeps
    the levels it finished)."""
    print(f"sweep: {len(payloads)} images, warm-up {args.warmup} requests", flush=True)
    # a fresh server's first requests, one at a time: what its warm-up left to them
    out["warmup"] = load(url, payloads, 1, args.warmup, args.max_seconds, headers)
    args.save()
    for c in args.concurrency:
        if args.pause_s:  # a server between bursts: what idle-time work can use
            time.sleep(args.pause_s)
        out[str(c)] = load(url, payloads, c, args.requests, args.max_seconds, headers)
        args.save()
    return out


def scenario_batching(url_on, url_off, payloads, args, headers) -> dict:
    c = args.batch_concurrency
    print(f"batching on vs off at concurrency {c}, {args.rounds} alternating round(s)", flush=True)
    for u in (url_on, url_off):
        load(u, payloads, min(c, 8), args.warmup, args.max_seconds, headers)
    on, off = [], []
    for _ in range(args.rounds):
        on.append(load(url_on, payloads, c, args.requests, args.max_seconds, headers))
        off.append(load(url_off, payloads, c, args.requests, args.max_seconds, headers))
    rps_on = statistics.median(r["req_per_s"] for r in on)
    rps_off = statistics.median(r["req_per_s"] for r in off)
    return {"concurrency": c, "on": on, "off": off, "req_per_s_on": rps_on,
            "req_per_s_off": rps_off, "ratio": round(rps_on / rps_off, 3) if rps_off else None}


def scenario_ab(urls: dict[str, str], payloads, args, headers, out: dict) -> dict:
    """Each level on server A and B in turn (A B, then B A in the next round), filling
    ``out`` as it goes (saved after each run); then the medians and B / A a level."""
    print(f"a/b: {len(payloads)} images, warm-up {args.warmup} requests each", flush=True)
    out["warmup"] = {name: load(u, payloads, 1, args.warmup, args.max_seconds, headers)
                     for name, u in urls.items()}
    args.save()
    runs: dict[str, dict[str, list]] = out.setdefault("runs", {})
    for k in range(args.rounds):
        order = list(urls) if k % 2 == 0 else list(urls)[::-1]
        for c in args.concurrency:
            for name in order:
                if args.pause_s:
                    time.sleep(args.pause_s)
                print(f"round {k + 1}, server {name}:", flush=True)
                r = load(urls[name], payloads, c, args.requests, args.max_seconds, headers)
                runs.setdefault(str(c), {}).setdefault(name, []).append(r)
                args.save()
    out["median"] = ab_medians(runs)
    return out


def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]  # a run with no answer has no latency
    return _r(statistics.median(xs), 1) if xs else None


def ab_medians(runs: dict[str, dict[str, list]]) -> dict:
    """Per level: each server's median req/s and p50 / p95 over its rounds, and B / A."""
    med: dict = {}
    for c, by in runs.items():
        row = {name: {k: _median([r[k] for r in rs]) for k in ("req_per_s", "p50_ms", "p95_ms")}
               | {"rounds": len(rs)} for name, rs in by.items()}
        a, b = row.get("A", {}).get("req_per_s"), row.get("B", {}).get("req_per_s")
        row["b_over_a"] = round(b / a, 3) if a and b else None
        med[c] = row
    return med


def scenario_overload(url, payloads, args, headers) -> dict:
    info = httpx.get(url + "/v1/info", headers=headers, timeout=10).json()
    limit = info["limits"]["queue_size"]
    c = args.overload_concurrency
    print(f"overload: {c} clients against a queue of {limit} pages", flush=True)
    res = load(url, payloads, c, args.overload_requests, args.overload_seconds, headers,
               honor_retry_after=True)
    res["queue_size"] = limit
    res["request_timeout_s"] = info["limits"]["request_timeout_s"]
    return res


def scenario_soak(url, payloads, args, headers) -> dict:
    n = args.soak
    print(f"soak: {n} requests of {len(payloads)} small images at concurrency {args.soak_concurrency}",
          flush=True)
    load(url, payloads, args.soak_concurrency, args.soak_warmup, args.max_seconds, headers)
    rss0 = server_rss(url, headers)
    samples = [(0, rss0)]
    done, step, runs = 0, max(n // 10, 1), []
    t0 = time.perf_counter()
    while done < n:
        k = min(step, n - done)
        runs.append(asyncio.run(run_load(url, payloads, args.soak_concurrency, k, args.soak_seconds,
                                         headers, offset=done)))
        done += k
        samples.append((done, server_rss(url, headers)))
        print(f"  {done}/{n}: RSS {samples[-1][1] / 2**20:.1f} MiB", flush=True)
    wall = time.perf_counter() - t0
    rss1 = samples[-1][1]
    statuses: dict[str, int] = {}
    for r in runs:
        for k, v in r["status"].items():
            statuses[k] = statuses.get(k, 0) + v
    return {
        "requests": sum(r["requests"] for r in runs), "ok": sum(r["ok"] for r in runs),
        "lost": sum(r["lost"] for r in runs), "status": statuses, "wall_s": round(wall, 1),
        "req_per_s": round(sum(r["ok"] for r in runs) / wall, 2),
        "rss_start_mib": _r(rss0 / 2**20 if rss0 else None),
        "rss_end_mib": _r(rss1 / 2**20 if rss1 else None),
        "rss_max_mib": _r(max(s[1] for s in samples if s[1]) / 2**20 if rss0 else None),
        "growth_pct": _r((rss1 - rss0) / rss0 * 100 if rss0 and rss1 else None, 2),
        "samples_mib": [(i, _r(v / 2**20 if v else None)) for i, v in samples],
        "images": sorted({p[0] for p in payloads}),
    }


# ---------------------------------------------------------------------- report
def markdown(res: dict) -> str:
    out = []
    if "sweep" in res:
        out += ["| concurrency | requests | req/s | p50 ms | p95 ms | p99 ms | error rate | mean batch (pages) |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for c, r in res["sweep"].items():
            out.append(f"| {c} | {r['requests']} | {r['req_per_s']} | {r['p50_ms']} | {r['p95_ms']} | "
                       f"{r['p99_ms']} | {r['error_rate']} | {r['mean_batch_pages']} |")
        out.append("")
    for key in [k for k in res if k.startswith("batching")]:
        b = res[key]
        out += [f"Dynamic batching ({key}), concurrency {b['concurrency']}: on {b['req_per_s_on']} req/s, "
                f"off {b['req_per_s_off']} req/s, ratio **{b['ratio']}x** "
                f"(median of {len(b['on'])} alternating round(s); p50 on/off "
                f"{statistics.median(r['p50_ms'] for r in b['on'])} / "
                f"{statistics.median(r['p50_ms'] for r in b['off'])} ms)", ""]
    if "ab" in res and res["ab"].get("median"):
        ab = res["ab"]
        out += [f"A: `{ab['a_args']}`; B: `{ab['b_args']}` {ab['b_env'] or ''} (median of the "
                f"rounds; ready after A {ab['ready_s'].get('A')} s, B {ab['ready_s'].get('B')} s, "
                "started side by side)", "",
                "| concurrency | A req/s | B req/s | B / A | A p50 / p95 ms | B p50 / p95 ms |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for c, r in ab["median"].items():
            a, b = r.get("A", {}), r.get("B", {})
            out.append(f"| {c} | {a.get('req_per_s')} | {b.get('req_per_s')} | {r['b_over_a']} | "
                       f"{a.get('p50_ms')} / {a.get('p95_ms')} | {b.get('p50_ms')} / "
                       f"{b.get('p95_ms')} |")
        out.append("")
    if "overload" in res:
        o = res["overload"]
        out += [f"Overload: {o['concurrency']} clients, queue {o['queue_size']}: {o['requests']} requests, "
                f"status {o['status']}, 5xx {o['5xx']}, lost {o['lost']}; admitted requests p50 "
                f"{o['p50_ms']} / p99 {o['p99_ms']} / max {o['max_ms']} ms "
                f"(request timeout {o['request_timeout_s']} s)", ""]
    if "soak" in res:
        s = res["soak"]
        out += [f"Soak: {s['requests']} requests ({s['ok']} ok, lost {s['lost']}, status {s['status']}) "
                f"in {s['wall_s']} s ({s['req_per_s']} req/s); server RSS after warm-up "
                f"{s['rss_start_mib']} MiB, end {s['rss_end_mib']} MiB, max {s['rss_max_mib']} MiB, "
                f"growth **{s['growth_pct']} %**", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="target a running server instead of starting one")
    ap.add_argument("--url-nobatch", help="with --url: a second server started with --no-batching")
    ap.add_argument("--api-key", default=os.environ.get("OCRFORGE_API_KEY"))
    ap.add_argument("--server-timeout", type=float, default=600,
                    help="request timeout of the servers the script starts (s); long, so that a "
                    "deep queue on a slow machine is measured rather than cut off by 504s")
    ap.add_argument("--server-args", default="", help="extra `ocrforge serve` options, e.g. "
                    "\"--runtime torch --device cuda --precision fp16\"")
    ap.add_argument("--images", default=DEFAULT_IMAGES, help="folder of images (and PDFs)")
    ap.add_argument("--scenarios", default="sweep,batching,overload,soak")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--requests", type=int, default=64, help="requests per sweep/batching run")
    ap.add_argument("--warmup", type=int, default=8, help="warm-up requests before measuring")
    ap.add_argument("--max-seconds", type=float, default=240, help="time cap per run")
    ap.add_argument("--pause-s", type=float, default=0,
                    help="sweep, ab: seconds without requests before each level (each run, ab)")
    ap.add_argument("--ab-args", default="", help="ab: server B's options beyond --server-args")
    ap.add_argument("--ab-env", default="", help="ab: server B's environment, 'KEY=VAL ...'")
    ap.add_argument("--batch-concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2,
                    help="batching: alternating on/off rounds; ab: rounds of A B / B A")
    ap.add_argument("--batch-small", action="store_true",
                    help="also compare batching on the small images (--small-max-side)")
    ap.add_argument("--overload-queue", type=int, default=8, help="queue of the overload server")
    ap.add_argument("--overload-concurrency", type=int, default=64)
    ap.add_argument("--overload-requests", type=int, default=400)
    ap.add_argument("--overload-seconds", type=float, default=90, help="time cap of the overload run")
    ap.add_argument("--soak", type=int, default=5000, help="soak requests")
    ap.add_argument("--soak-concurrency", type=int, default=8)
    ap.add_argument("--soak-warmup", type=int, default=200)
    ap.add_argument("--soak-seconds", type=float, default=1800)
    ap.add_argument("--small-max-side", type=int, default=128,
                    help="soak uses the images whose long side is at most this")
    ap.add_argument("--out", help="write all results as JSON here")
    ap.add_argument("--markdown", help="write a Markdown summary here")
    args = ap.parse_args(argv)
    # SIGTERM (kill, CI timeouts) unwinds like Ctrl-C, so the servers started here are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.concurrency = [int(x) for x in args.concurrency.split(",") if x]
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    base = ["--timeout", str(args.server_timeout), *shlex.split(args.server_args)]
    if args.api_key and not args.url:
        base += ["--api-key", args.api_key]
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"ocrforge-load-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)

    payloads = load_payloads(args.images)
    small = load_payloads(args.images, max_side=args.small_max_side)
    res: dict = {
        "host": {"platform": platform.platform(), "python": platform.python_version(),
                 "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()},
        "images": args.images, "n_images": len(payloads), "n_small": len(small),
        "server_args": args.server_args, "command": " ".join(sys.argv),
    }
    servers: dict[str, Server] = {}

    def server(name: str, extra: list[str]) -> str:
        if args.url:
            return args.url_nobatch if name == "nobatch" and args.url_nobatch else args.url
        if name not in servers:
            servers[name] = Server(base + extra, name, log_dir)
            servers[name].wait_ready()
        return servers[name].url

    from ocrforge.config import atomic_write_text

    def save() -> None:  # after each sweep level, and however the run ends
        if args.out:
            atomic_write_text(args.out, json.dumps(res, indent=2, ensure_ascii=False) + "\n")

    args.save = save
    try:
        if "sweep" in scenarios:
            url = server("batch", [])
            if "batch" in servers:
                res["ready_s"] = servers["batch"].ready_s
                res["ready_info"] = servers["batch"].ready_info
            res["sweep"] = {}
            scenario_sweep(url, payloads, args, headers, res["sweep"])
        if "ab" in scenarios and not args.url:
            res["ab"] = start_ab(args, base, log_dir, servers)
            urls = {name: servers[name].url for name in ("A", "B")}
            scenario_ab(urls, payloads, args, headers, res["ab"])
            for name in ("A", "B"):
                servers.pop(name).stop()
        if "batching" in scenarios and (not args.url or args.url_nobatch):
            on, off = server("batch", []), server("nobatch", ["--no-batching"])
            res["batching"] = scenario_batching(on, off, payloads, args, headers)
            if args.batch_small:
                res["batching_small"] = scenario_batching(on, off, small, args, headers)
        if "overload" in scenarios:
            url = server("overload", ["--queue-size", str(args.overload_queue)])
            res["overload"] = scenario_overload(url, payloads, args, headers)
        for name in ("batch", "nobatch", "overload"):
            if name in servers:
                servers.pop(name).stop()
        if "soak" in scenarios:
            res["soak"] = scenario_soak(server("soak", []), small, args, headers)
    except SystemExit:  # SIGTERM (above): what was measured so far is saved below
        res["interrupted"] = "SIGTERM"
        raise
    finally:
        for s in servers.values():
            s.stop()
        save()
    res["host"]["load_avg_end"] = os.getloadavg()
    text = markdown(res)
    print("\n" + text)
    save()
    if args.markdown:
        atomic_write_text(args.markdown, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
