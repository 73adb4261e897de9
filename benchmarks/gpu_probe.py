"""Two probes of the GPU scheduler for gpu_bench.py's variants section (issue 19).

``stage_kernels``: GPU kernel time per stage of the driver loop. Every device-work entry point
of the scheduler (decode, upload, orientation, turning, detection, crops, recognition) runs
inside a ``torch.profiler.record_function`` range for one pass, and the profiler sums the device
time of the kernels each range launched. Against the pass's wall time this says how much GPU
work a page costs and which stage owns it.

``MemoryTrace``: what is allocated at the peak. The CUDA caching allocator's history is recorded
from before the engine opens; the alloc / free events are replayed to find the moment of the
largest live total, and the live blocks then are grouped by the ocrforge line that allocated
them (innermost frame in src/ocrforge)."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from typing import Any

_WRAP = {  # (owner, method) -> stage name
    ("sch", "decode_jpegs"): "decode", ("sch", "receive"): "decode", ("sch", "upload"): "upload",
    ("sch", "run_orient"): "orient", ("sch", "run_det"): "det", ("sch", "rec_chunk"): "rec",
    ("loop", "_crop"): "crop", ("loop", "finish_orient"): "turn", ("sch", "to_host"): "to_host",
}


# stages timed on the device by CUDA events around their launches (to_host runs inside orient,
# det and rec; decode runs on its own stream in the decoder threads)
_TIMED = ("upload", "orient", "turn", "det", "crop", "rec")


@contextmanager
def _wrapped(sch: Any, spans: dict | None = None):
    """The stage entry points inside profiler ranges; with ``spans`` (CUDA only), also a pair
    of timing events around each top-level stage call on the driver's stream: the device time
    from the GPU reaching the stage's first launch to its last one finishing, idle gaps inside
    the stage (launches the GPU waited for) included."""
    import torch

    from ocrforge.scheduling import gpu_loop

    saved = []

    def wrap(obj: Any, meth: str, stage: str) -> None:
        fn = getattr(obj, meth)
        saved.append((obj, meth, fn))
        timed = spans is not None and sch.cuda and stage in _TIMED

        def inner(*a, **k):
            with torch.profiler.record_function("stage:" + stage):
                if not timed:
                    return fn(*a, **k)
                ev0 = torch.cuda.Event(enable_timing=True)
                ev0.record()
                out = fn(*a, **k)
                ev1 = torch.cuda.Event(enable_timing=True)
                ev1.record()
                spans.setdefault(stage, []).append((ev0, ev1))
                return out
        setattr(obj, meth, inner)

    for (owner, meth), stage in _WRAP.items():
        wrap(sch if owner == "sch" else gpu_loop.DriverLoop, meth, stage)
    try:
        yield
    finally:
        for obj, meth, fn in reversed(saved):
            if obj is sch:
                delattr(obj, meth)  # back to the class's method
            else:
                setattr(obj, meth, fn)


def stage_kernels(sch: Any, pages: list) -> dict:
    """One pass of ``pages`` under the profiler: device ms per stage, per page, top kernels.
    The profiler records the CPU ops of the thread that starts it only, so it is started in
    the driver thread (DriverLoop.run wrapped); CUDA kernels are recorded from every thread."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ocrforge.scheduling import gpu_loop

    if sch.cuda:  # kineto's CUPTI client is set up on the main thread first
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            torch.ones(1, device=sch.dev).add_(1)
            torch.cuda.synchronize()
    run = gpu_loop.DriverLoop.run
    got: list = []

    def profiled_run(self) -> None:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run(self)
            if sch.cuda:
                torch.cuda.synchronize()
        got.append(prof)

    gpu_loop.DriverLoop.run = profiled_run
    spans: dict[str, list] = {}
    try:
        with _wrapped(sch, spans):
            t0 = time.perf_counter()
            n = sum(1 for _ in sch.run(pages))
            wall = time.perf_counter() - t0
    finally:
        gpu_loop.DriverLoop.run = run
    avg = got[0].key_averages()
    # CPU-side rows (ops, the stage ranges) carry their children's device time too: only the
    # device's own rows are summed
    dev_rows = [e for e in avg if e.device_type.name == "CUDA" and not e.key.startswith("stage:")]
    busy = sum(e.self_device_time_total for e in dev_rows) / 1e3
    stage_cpu = {e.key[6:]: e.cpu_time_total / 1e3 for e in avg if e.key.startswith("stage:")}
    top = [{"kernel": e.key[:90], "calls": e.count, "device_ms": e.self_device_time_total / 1e3}
           for e in sorted(dev_rows, key=lambda e: -e.self_device_time_total)[:20]]
    return {"pages": n, "wall_s": wall, "pages_per_s_under_profiler": n / wall,
            "device_ms_all": busy, "device_ms_per_page": busy / max(n, 1),
            "stage_cpu_ms": stage_cpu, "stage_device_ms_per_page": _span_ms(spans, n),
            "top_kernels": top}


def _span_ms(spans: dict, n: int) -> dict:
    """Device ms per page of each timed stage (the events are done: the run synchronised)."""
    import torch

    if not spans:
        return {}
    try:
        torch.cuda.synchronize()
        return {k: round(sum(a.elapsed_time(b) for a, b in v) / max(n, 1), 3)
                for k, v in spans.items()}
    except Exception as e:  # noqa: BLE001 - a probe must not lose the row it belongs to
        return {"error": repr(e)[:300]}


def fmt_stage_kernels(r: dict) -> str:
    return (f"    kernels: {r['pages']} pages in {r['wall_s']:.1f}s under the profiler, device "
            f"kernels {r['device_ms_per_page']:.2f} ms/page; device ms/page by stage "
            f"{r.get('stage_device_ms_per_page')}"
            + "\n    top kernels: " + "; ".join(f"{t['kernel'][:50]} {t['device_ms']:.0f}ms"
                                            for t in r["top_kernels"][:8]))


class MemoryTrace:
    """Records the caching allocator's history from construction to ``report()``."""

    def __init__(self, max_entries: int = 2_000_000):
        import torch

        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")

    def report(self, top: int = 20) -> dict:
        import torch

        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = [e for dev in snap.get("device_traces", []) for e in dev]
        live: dict[int, tuple[int, str]] = {}
        total = peak = seg = seg_peak = 0
        peak_live: dict[int, tuple[int, str]] = {}
        for e in events:
            act = e.get("action")
            if act in ("segment_alloc", "segment_map"):
                seg += e["size"]
                seg_peak = max(seg_peak, seg)
            elif act in ("segment_free", "segment_unmap"):
                seg -= e["size"]
            elif act == "alloc":
                live[e["addr"]] = (e["size"], _where(e.get("frames", [])))
                total += e["size"]
                if total > peak:
                    peak = total
                    peak_live = dict(live)
            elif act in ("free_completed",) and e["addr"] in live:
                total -= live.pop(e["addr"])[0]
        by: Counter = Counter()
        for size, where in peak_live.values():
            by[where] += size
        reserved = sum(s["total_size"] for s in snap.get("segments", []))
        return {"events": len(events), "peak_live_GiB": peak / 2**30,
                "peak_segments_GiB": seg_peak / 2**30,
                "reserved_now_GiB": reserved / 2**30,
                "segments_now": len(snap.get("segments", [])),
                "segments_made_by_MiB": segment_makers(events),
                "at_peak_MiB": {k: round(v / 2**20, 1) for k, v in by.most_common(top)}}


def reserved_by_stream(sch: Any) -> dict:
    """What the caching allocator holds now, per stream it was allocated on (the allocator
    caches freed blocks per stream, and a graph pool's blocks apart): MiB reserved and MiB
    allocated in each, named by the scheduler's streams."""
    import torch

    names = {0: "default"}
    for net, rt in (("det", sch.det), ("rec", sch.rec), ("orient", sch.orient_runtime())):
        for attr in ("_capture_stream", "_copy_stream"):
            s = getattr(rt, attr, None)
            if s is not None:  # a stream the runtimes share (runtime.shared_graph_pool): "det+rec..."
                have = names.get(s.cuda_stream)
                names[s.cuda_stream] = f"{have.split('_')[0]}+{net}_{attr[1:-7]}" if have \
                    else f"{net}{attr[:-7]}"
    if getattr(sch, "_decode_stream", None) is not None:
        names[sch._decode_stream.cuda_stream] = "_decode"
    out: dict[str, dict] = {}
    for seg in torch.cuda.memory_snapshot():
        pool = tuple(seg.get("segment_pool_id", (0, 0)))
        key = names.get(seg["stream"], f"stream{seg['stream']:#x}")
        key += " (graph pool)" if pool != (0, 0) else ""
        d = out.setdefault(key, {"reserved_MiB": 0.0, "allocated_MiB": 0.0, "segments": 0})
        d["reserved_MiB"] += seg["total_size"] / 2**20
        d["allocated_MiB"] += seg["allocated_size"] / 2**20
        d["segments"] += 1
    return {k: {kk: round(vv, 1) for kk, vv in v.items()} for k, v in
            sorted(out.items(), key=lambda kv: -kv[1]["reserved_MiB"])}


def segment_makers(events: list, top: int = 12) -> dict:
    """Reserved MiB now by the ocrforge line whose allocation made the allocator reserve the
    segment (replayed from the history's segment_alloc / segment_free events)."""
    made: dict[int, tuple[int, str]] = {}
    for e in events:
        if e.get("action") in ("segment_alloc", "segment_map"):
            made[e["addr"]] = (e["size"], _where(e.get("frames", [])))
        elif e.get("action") in ("segment_free", "segment_unmap"):
            made.pop(e["addr"], None)
    by: Counter = Counter()
    for size, where in made.values():
        by[where] += size
    return {k: round(v / 2**20, 1) for k, v in by.most_common(top)}


def _where(frames: list) -> str:
    for f in frames:
        fn = f.get("filename", "")
        if "/ocrforge/" in fn and "/benchmarks/" not in fn:
            return f"{fn.rsplit('/', 1)[-1]}:{f.get('name')}:{f.get('line')}"
    return "(outside ocrforge)"


def fmt_memory(r: dict) -> str:
    return (f"    memory trace: peak live {r['peak_live_GiB']:.2f} GiB, reserved now "
            f"{r['reserved_now_GiB']:.2f} GiB (peak {r['peak_segments_GiB']:.2f}) in {r['segments_now']} segments; at the peak (MiB): "
            + "; ".join(f"{k} {v}" for k, v in list(r["at_peak_MiB"].items())[:12])
            + "\n    segments made by (MiB): " + "; ".join(
                f"{k} {v}" for k, v in r.get("segments_made_by_MiB", {}).items()))
