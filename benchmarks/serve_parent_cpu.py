"""CPU time a request costs the server's own process when its engine runs in a child
(`ocrforge serve --engine-process`): HTTP, the upload, decoding or not, handing the page to
the child, the response. The child's CPU is reported beside it. On a GPU host the server
process is the one whose work bounds serving once the engine is in a child.

    python benchmarks/serve_parent_cpu.py IMAGES_DIR --requests 56 --concurrency 4 \
        [--src OTHER_TREE/src] [--server-args "--runtime torch ..."]

Real server, real engine (default: torch on the CPU, the default model set, det limit 736, so
the child reads fast enough on a small host). Prints JSON: the parent's and the children's CPU ms
a request (user + system, after a warm-up of 2 x concurrency requests), requests/s, errors.
`--src` runs another tree's sources (a baseline commit's worktree) with the same settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import time
from pathlib import Path

from load_test import Server  # the same server start as the load tool (benchmarks/ on sys.path)

DEFAULT_ARGS = ("--runtime torch --device cpu --gpu-pipeline --engine-process --det-limit 736 "
                "--timeout 3600")


async def load(url: str, blobs: list[tuple[str, bytes]], n: int, conc: int
               ) -> tuple[float, dict[str, int]]:
    import httpx

    status: dict[str, int] = {}
    k = 0

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal k
        while k < n:
            name, data = blobs[k % len(blobs)]
            k += 1
            r = await c.post(url + "/v1/ocr", files={"file": (name, data)}, timeout=600)
            key = str(r.status_code) if r.status_code == 200 else f"{r.status_code} {r.text[:120]}"
            status[key] = status.get(key, 0) + 1

    t0 = time.perf_counter()
    async with httpx.AsyncClient() as c:
        await asyncio.gather(*(client(c) for _ in range(conc)))
    return time.perf_counter() - t0, status


def _cpu(p) -> float:  # noqa: ANN001
    t = p.cpu_times()
    return t.user + t.system


def _children_cpu(parent) -> float:  # noqa: ANN001
    total = 0.0
    for c in parent.children(recursive=True):
        try:
            total += _cpu(c)
        except Exception:  # noqa: BLE001 - a worker that ended meanwhile
            pass
    return total


def measure(args: argparse.Namespace) -> dict:
    import psutil

    images = sorted(p for p in Path(args.images).iterdir()
                    if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    blobs = [(p.name, p.read_bytes()) for p in images]
    env = {"PYTHONPATH": str(Path(args.src).resolve())} if args.src else None
    server = Server(shlex.split(args.server_args), "parent-cpu",
                    Path(os.environ.get("TMPDIR", "/tmp")), env)
    try:
        server.wait_ready()
        url = server.url
        asyncio.run(load(url, blobs, 2 * args.concurrency, args.concurrency))  # warm-up
        ps = psutil.Process(server.proc.pid)
        p0, c0 = _cpu(ps), _children_cpu(ps)
        wall, status = asyncio.run(load(url, blobs, args.requests, args.concurrency))
        p1, c1 = _cpu(ps), _children_cpu(ps)
    finally:
        server.stop()
    n = args.requests
    return {"src": args.src or "installed", "requests": n, "status": status,
            "concurrency": args.concurrency, "requests_per_s": round(n / wall, 2),
            "parent_cpu_ms_per_request": round(1000 * (p1 - p0) / n, 2),
            "children_cpu_ms_per_request": round(1000 * (c1 - c0) / n, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("images")
    ap.add_argument("--requests", type=int, default=56)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--src", default="", help="another tree's src/ (a baseline)")
    ap.add_argument("--server-args", default=DEFAULT_ARGS)
    print(json.dumps(measure(ap.parse_args())), flush=True)


if __name__ == "__main__":
    main()
