"""What `ocrforge serve` costs per request besides the engine: HTTP, upload, decode, JSON.

The engine's reading is replaced by pages read once beforehand (the default CPU engine on the
same images), so the server process's CPU time per request is what the HTTP layer, the
upload's decoding on the host, the batcher and the response's JSON take. On a GPU server all
of that runs in the process whose driver thread feeds the GPU, and its Python shares that
process's interpreter lock with the driver.

    python benchmarks/serve_overhead.py [IMAGES_DIR] [REQUESTS] [CONCURRENCY]

Prints JSON: requests/s, server CPU ms a request (user + system, all its threads), the
response bytes. The client runs on the same host: read CPU ms, not requests/s, on a small one.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path("/tmp/ocrforge_serve_overhead_pages.pkl")


def read_pages(images: list[Path]) -> dict:
    """Pages of every image by (height, width), read once by the default engine."""
    if CACHE.exists():
        return pickle.loads(CACHE.read_bytes())
    import cv2

    from ocrforge import OCR

    eng = OCR()
    out = {}
    for p in images:
        img = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if img is not None:
            out[img.shape[:2]] = eng.read(p)
    CACHE.write_bytes(pickle.dumps(out))
    return out


def child(port: str) -> None:
    """The server, with ``run_engine`` answering from the cache (no reading)."""
    import ocrforge.server.batcher as batcher
    from ocrforge.commands.serve import main

    pages = pickle.loads(CACHE.read_bytes())

    def cached(engine, images, key):  # noqa: ANN001, ARG001
        return [copy.copy(pages[im.image.shape[:2]]) for im in images]

    batcher.run_engine = cached
    sys.exit(main(["--host", "127.0.0.1", "--port", port, "--no-access-log", "--log-level",
                   "warning", "--no-warmup", "--runtime", "onnxruntime"]))


async def load(url: str, images: list[Path], n: int, conc: int) -> tuple[float, int, int]:
    import httpx

    blobs = [(p.name, p.read_bytes()) for p in images]
    ok = 0
    nbytes = 0
    k = 0

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal ok, nbytes, k
        while k < n:
            name, data = blobs[k % len(blobs)]
            k += 1
            r = await c.post(url + "/v1/ocr", files={"file": (name, data)}, timeout=120)
            ok += r.status_code == 200
            nbytes += len(r.content)

    t0 = time.perf_counter()
    async with httpx.AsyncClient() as c:
        await asyncio.gather(*(client(c) for _ in range(conc)))
    return time.perf_counter() - t0, ok, nbytes


def main(argv: list[str]) -> None:
    import httpx
    import psutil

    folder = Path(argv[0]) if argv else Path("/work/shared/data/ocr-dev/images")
    n = int(argv[1]) if len(argv) > 1 else 400
    conc = int(argv[2]) if len(argv) > 2 else 8
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    read_pages(images)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        asyncio.run(load(url, images, 2 * conc, conc))  # warm-up
        ps = psutil.Process(proc.pid)
        c0 = ps.cpu_times()
        wall, ok, nbytes = asyncio.run(load(url, images, n, conc))
        c1 = ps.cpu_times()
    finally:
        proc.terminate()
        proc.wait(30)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    print(json.dumps({"requests": n, "ok": ok, "concurrency": conc,
                      "requests_per_s": round(n / wall, 1),
                      "server_cpu_ms_per_request": round(1000 * cpu / n, 2),
                      "server_user_ms_per_request": round(1000 * (c1.user - c0.user) / n, 2),
                      "response_kb_mean": round(nbytes / max(ok, 1) / 1024, 1)}, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main(sys.argv[1:])
