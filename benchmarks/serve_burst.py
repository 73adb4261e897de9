#!/usr/bin/env python
"""A burst of concurrent requests against `ocrforge serve` (issue 14 item 7): how many are
admitted (200), refused (429, with which Retry-After) or time out (504), and the latency of
the admitted ones.

Starts the server itself (extra options from --server-args; --src runs another checkout's code
for a before/after comparison) and sends --requests uploads of one small image at once.

  python benchmarks/serve_burst.py --requests 200 --out burst.json
  python benchmarks/serve_burst.py --requests 200 --src /tmp/old/src --out burst-old.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from serve_pdfs import font, small_png, start_server, stop_server  # noqa: E402


async def burst(url: str, n: int, png: bytes, timeout: float) -> list[dict]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as c:
        async def one(i: int) -> dict:
            t = time.perf_counter()
            try:
                r = await c.post(url + "/v1/ocr", files={"file": (f"r{i}.png", png)})
            except httpx.HTTPError as e:
                return {"status": type(e).__name__, "latency_s": time.perf_counter() - t}
            return {"status": r.status_code, "latency_s": time.perf_counter() - t,
                    "retry_after": r.headers.get("retry-after")}
        return list(await asyncio.gather(*(one(i) for i in range(n))))


def lines_png() -> bytes:
    import io

    from PIL import Image, ImageDraw

    img = Image.new("RGB", (900, 232), "white")
    d = ImageDraw.Draw(img)
    for i, t in enumerate(["Hello ocrforge 2026", "你好世界 欢迎使用", "Invoice No. 4711"]):
        d.text((30, 20 + 64 * i), t, fill="black", font=font(40))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--image", choices=["small", "lines"], default="small",
                    help="small: 480x120, one line; lines: 900x232, three lines")
    ap.add_argument("--server-args", default="")
    ap.add_argument("--src", help="PYTHONPATH for the server (another checkout's src)")
    ap.add_argument("--out")
    args = ap.parse_args()
    proc, url = start_server(args.server_args, args.src)
    try:
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        png = small_png() if args.image == "small" else lines_png()
        rs = asyncio.run(burst(url, args.requests, png, 600))
        wall = time.perf_counter() - t0
    finally:
        stop_server(proc)
    ok = sorted(r["latency_s"] for r in rs if r["status"] == 200)
    waits = [int(r["retry_after"]) for r in rs if r["status"] == 429 and r["retry_after"]]
    res = {
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "load_avg_start": load0, "load_avg_end": os.getloadavg(), "wall_s": round(wall, 1),
        "status": dict(collections.Counter(str(r["status"]) for r in rs)),
        "admitted_latency_s": {"p50": round(statistics.median(ok), 2), "max": round(ok[-1], 2)}
        if ok else None,
        "retry_after_s": dict(sorted(collections.Counter(waits).items())),
    }
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
