"""The GPU server's engine path without HTTP: closed-loop clients submit pages straight to the
GPU stream that `ocrforge serve --device cuda` feeds (same engine, same warm-up).

Compared with `load_test.py` on the same host, it says how much of the serving gap to
`read_many` lies in the HTTP process (request handling, upload decoding, the response's JSON,
all sharing the interpreter lock with the engine's driver thread) rather than in the stream.
Mode ``json`` adds the response's JSON (to_dict + body) for every page in the client threads
(the GIL time the server spends on it); ``plain`` only waits for the page.

    python benchmarks/stream_load.py IMAGES_DIR [--concurrency 1,8,64] [--requests 384]
        [--modes plain,json] [--server-args "--device cuda"] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import threading
import time
from pathlib import Path

import cv2


def start(server_args: str):
    """(engine, stream, state) as `ocrforge serve SERVER_ARGS` sets them up before ready."""
    from ocrforge.commands.serve import register, settings_from_args
    from ocrforge.server.service import ServiceState, load_engines

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    state = ServiceState(settings_from_args(parser.parse_args(["serve", *shlex.split(server_args)])))
    t0 = time.perf_counter()
    load_engines(state)
    if not state.ready:
        raise RuntimeError(state.load_error)
    eng = state.batcher.engines[0]
    # the server's own stream: in this process, or with --engine-process in its child
    stream = state.batcher.stream_for(eng, eng.config.det.limit_side)
    return stream, state, time.perf_counter() - t0


def run_level(stream, images: list, conc: int, n: int, to_json: bool) -> dict:
    from ocrforge.server.formats import envelope, json_body

    lat: list[float] = []
    lock = threading.Lock()
    taken = [0]

    def client() -> None:
        while True:
            with lock:
                k = taken[0]
                taken[0] += 1
            if k >= n:
                return
            t = time.perf_counter()
            page = stream.submit(images[k % len(images)]).result(timeout=300)
            if to_json:
                json_body(envelope("r", "x", "jpeg", [page], {"total": 1.0}, {"pages": 1}))
            with lock:
                lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
    return {"concurrency": conc, "requests": len(lat), "req_per_s": round(len(lat) / wall, 2),
            "p50_ms": round(1000 * q[49], 1), "p95_ms": round(1000 * q[94], 1),
            "p99_ms": round(1000 * q[98], 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("images")
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--requests", type=int, default=384)
    ap.add_argument("--warmup", type=int, default=16, help="pages one at a time first")
    ap.add_argument("--modes", default="plain,json", help="plain and/or json, each level in turn")
    ap.add_argument("--server-args", default="--device cuda")
    ap.add_argument("--out")
    a = ap.parse_args()
    files = sorted(p for p in Path(a.images).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    images = [im for im in (cv2.imread(str(p), cv2.IMREAD_COLOR) for p in files) if im is not None]
    stream, state, ready_s = start(a.server_args)
    modes = a.modes.split(",")
    out = {"server_args": a.server_args, "ready_s": round(ready_s, 1),
           "warmup_shapes": state.info.get("warmup_shapes"), "levels": []}
    print(f"ready in {ready_s:.1f} s ({out['warmup_shapes']} shapes captured)", flush=True)
    try:
        out["warmup"] = run_level(stream, images, 1, a.warmup, False)
        for c in (int(x) for x in a.concurrency.split(",")):
            for mode in modes:
                row = {"mode": mode, **run_level(stream, images, c, a.requests, mode == "json")}
                out["levels"].append(row)
                print(json.dumps(row), flush=True)
                if a.out:  # as it goes: a call cut short keeps what was measured
                    Path(a.out).write_text(json.dumps(out, indent=1))
    finally:
        state.batcher.stop(timeout=60)  # closes the stream too


if __name__ == "__main__":
    main()
