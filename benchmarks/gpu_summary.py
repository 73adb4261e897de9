"""Issue 19's table from a gpu_bench.py result: every row measured next to its goal.

    python benchmarks/gpu_summary.py gpu_bench.json [serve.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(v: object, fmt: str = "{:.1f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "not measured"


def _ms(seconds: object) -> object:
    return seconds * 1e3 if isinstance(seconds, (int, float)) else None


def _row(d: dict, kind: str) -> dict:
    return next((r for r in d.get("e2e", {}).values() if r.get("page_buckets") == kind), {})


def _variant_default(d: dict) -> dict:
    vs = d.get("variants", {})
    return vs.get("default") or vs.get("default#1") or {}


def _variant_real_mix(d: dict) -> dict:
    """The variants section's default row as an e2e real_mix row (when e2e did not run); the
    rate is the median of its uninstrumented passes where it has them."""
    v = _variant_default(d)
    if "pages_per_s" not in v:
        return {}
    row = {k: v.get(k) for k in ("pages_per_s", "gpu_util", "host_cpu_ms_per_page",
                                 "peak_mem_GiB", "reserved_GiB")}
    if v.get("clean_pages_per_s"):
        row["pages_per_s"] = v["clean_pages_per_s"]
    return row


def _default_rows(d: dict) -> list[tuple[str, str, str]]:
    e = _row(d, "engine-defaults")
    rm = e.get("real_mix") or _variant_real_mix(d)
    if not e and rm:
        e = {"start_to_first_page_s": _variant_default(d).get("first_page_s")}
    util = rm.get("gpu_util", {}).get("util_mean")
    rows = [
        ("real-page mix, default engine, 1 process",
         f"{_f(rm.get('pages_per_s'))} pages/s, GPU util {_f(util, '{:.0f}')} %, host CPU "
         f"{_f(rm.get('host_cpu_ms_per_page'))} ms/page", ">= 300 pages/s, host <= 2 ms/page"),
        ("1000 synthetic pages, default engine",
         f"{_f(e.get('pages_per_s'))} pages/s, host CPU {_f(_ms(e.get('host_cpu_s_per_page')))} ms/page",
         ">= 1,000 pages/s"),
        ("peak GPU memory per engine (allocated, real mix)",
         f"{_f(rm.get('peak_mem_GiB'), '{:.2f}')} GiB (reserved {_f(rm.get('reserved_GiB'), '{:.2f}')} GiB)",
         "<= 4 GiB"),
        ("start: engine -> first page", f"{_f(e.get('start_to_first_page_s'), '{:.2f}')} s", "<= 10 s"),
        ("single-page latency p50 / p95", f"{_f(e.get('latency_ms_p50'))} / {_f(e.get('latency_ms_p95'))} ms",
         "<= 10 ms"),
    ]
    lim = _row(d, "engine-defaults-1280")
    if lim:
        rows.append(("det.limit_side=1280, real-page mix",
                     f"{_f(lim.get('real_mix', {}).get('pages_per_s'))} pages/s",
                     "finishes, faster than 2048"))
    return rows


def _variant_table(d: dict) -> list[str]:
    """Every variant of the variants section, in the order run (one process)."""
    vs = d.get("variants", {})
    if not vs:
        return []
    out = ["| variant | clean passes: median (each) | pages/s pass 3 (1 / 2) | GPU util | host CPU ms/page "
           "| peak allocated GiB | reserved GiB | first page s | dev CER / det F1 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, v in vs.items():
        if "pages_per_s" not in v:
            out.append(f"| {name} | {v.get('error', 'no row')[:80]} | | | | | | | |")
            continue
        p1, p2 = v.get("first_pass", {}), v.get("second_pass", {})
        clean = v.get("clean_passes") or []
        each = " / ".join(_f(c) for c in clean)
        out.append(f"| {name} | {_f(v.get('clean_pages_per_s'))} ({each}) | "
                   f"{_f(v['pages_per_s'])} ({_f(p1.get('pages_per_s'))} / "
                   f"{_f(p2.get('pages_per_s'))}) | {_f(v.get('gpu_util', {}).get('util_mean'), '{:.0f}')} % "
                   f"| {_f(v.get('host_cpu_ms_per_page'))} | {_f(v.get('peak_mem_GiB'), '{:.2f}')} | "
                   f"{_f(v.get('reserved_GiB'), '{:.2f}')} | {_f(v.get('first_page_s'))} | "
                   f"{_f((v.get('dev_cer') or 0) * 100, '{:.2f}')} / {_f((v.get('dev_det_f1') or 0) * 100, '{:.2f}')} % |")
    return out


def _stage_rows(d: dict) -> list[tuple[str, str, str]]:
    rows = []
    for r in d.get("stage", {}).values():
        bs = [k for k in r if k.startswith("b") and k[1:].isdigit()]
        if not bs:
            continue
        best = max(bs, key=lambda k: r[k]["items_per_s"])
        unit, goal = ("pages/s", ">= 3,000 pages/s") if r["role"] == "det" else ("lines/s", ">= 60k lines/s")
        rows.append((f"{r['role']} alone {'x'.join(map(str, r['shape'][1:]))}, {r['config']}",
                     f"{r[best]['items_per_s']:.0f} {unit} (batch {best[1:]})", goal))
    return rows


def _serve_rows(s: dict) -> list[tuple[str, str, str]]:
    rows = []
    for c in s.get("sweep", []):
        rows.append((f"HTTP serve --device cuda, concurrency {c.get('concurrency')}",
                     f"{_f(c.get('pages_per_s', c.get('req_per_s')))} pages/s, p50/p95/p99 "
                     f"{_f(c.get('p50_ms'))} / {_f(c.get('p95_ms'))} / {_f(c.get('p99_ms'))} ms",
                     ">= 250 pages/s at 64, p95 <= 100 ms"))
    return rows


def _accuracy_rows(d: dict) -> list[str]:
    ort = d.get("ort_cpu16", {})
    out = ["| config | synth CER (first N) | synth CER (all) | dev CER pass 1 / 2 | rotated 90/180/270 CER |",
           "|---|---|---|---|---|"]
    for e in d.get("e2e", {}).values():
        fn = e.get("synth_cer_first_n", {})
        p1, p2 = e.get("dev_pass1", {}), e.get("dev_pass2", {})
        rot = e.get("rotated", {})
        rot_s = " / ".join(_f((rot.get(a) or rot.get(str(a)) or {}).get("cer", None) and
                              (rot.get(a) or rot.get(str(a)))["cer"] * 100, "{:.2f}") for a in (90, 180, 270))
        out.append(f"| {e['config']} | {_f((fn.get('cer') or 0) * 100, '{:.2f}')} % (n={fn.get('n')}) | "
                   f"{_f((e.get('synth_cer') or 0) * 100, '{:.2f}')} % | {_f((p1.get('cer') or 0) * 100, '{:.2f}')}"
                   f" / {_f((p2.get('cer') or 0) * 100, '{:.2f}')} % | {rot_s} |")
    for k, v in ort.items():
        out.append(f"| ONNX Runtime FP32 (CPU) {k} | {v['cer'] * 100:.2f} % (n={v['pages']}) | | | |")
    return out


def main(argv: list[str]) -> None:
    d = json.loads(Path(argv[0]).read_text())
    s = json.loads(Path(argv[1]).read_text()) if len(argv) > 1 and Path(argv[1]).exists() else {}
    print(f"Device: {d.get('device')}, torch {d.get('torch')}, {d.get('cpu_count')} CPU cores\n")
    print("| what | measured | goal |\n|---|---|---|")
    for what, got, goal in _default_rows(d) + _stage_rows(d) + _serve_rows(s):
        print(f"| {what} | {got} | {goal} |")
    print()
    if d.get("variants"):
        print("\n".join(_variant_table(d)) + "\n")
    print("\n".join(_accuracy_rows(d)))
    prof = _row(d, "engine-defaults").get("profile")
    if prof:
        print(f"\nProfile ({prof['pages']} real pages, {prof['seconds']:.2f} s): top device ops")
        print("| op | calls | device ms | CPU ms |\n|---|---|---|---|")
        for r in prof["top_ops"][:15]:
            print(f"| {r['op'][:60]} | {r['calls']} | {r['device_ms']:.1f} | {r['cpu_ms']:.1f} |")
        print(f"\nscheduler clocks: {prof['stats']}")


if __name__ == "__main__":
    main(sys.argv[1:])
