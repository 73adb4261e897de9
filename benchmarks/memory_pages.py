"""Peak memory (VmHWM) of the engine on real page sizes: one A4 page, then a stream of A4 PDF
pages, under engine settings given as JSON (EngineConfig.with_ keys), each in a fresh process.

    python benchmarks/memory_pages.py --pages 16 --json out.json \\
        --case default='{}' --case no-arena='{"enable_cpu_mem_arena": false}'

Pages: A4 at 200 dpi (1654x2339), 45 lines of mixed English/Chinese text each, written as a
PDF at 200 dpi so rendering gives that size. Memory only: this prints no timings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

A4 = (1654, 2339)


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def make_pdf(path: Path, pages: int) -> None:
    from PIL import Image, ImageDraw, ImageFont

    from ocrforge.evaluation.synth import wheel_font

    font = ImageFont.truetype(str(wheel_font()), 34)

    def page(i: int) -> Image.Image:
        img = Image.new("RGB", A4, "white")
        d = ImageDraw.Draw(img)
        for k in range(45):
            t = (f"Page {i + 1} line {k + 1}: invoice {1000 + 7 * k} total {k * 3.5:.2f} EUR"
                 if k % 3 else f"第{i + 1}页 第{k + 1}行 光学字符识别 流式测试")
            d.text((120, 120 + 47 * k), t, font=font, fill="black")
        return img

    first = page(0)
    first.save(path, save_all=True, append_images=(page(i) for i in range(1, pages)),
               resolution=200)


def child(pdf: str, pages: int, changes: dict, mode: str) -> dict:
    from ocrforge.engine import OCR
    from ocrforge.io.inputs import iter_pages

    eng = OCR(**changes) if changes else OCR()
    out = {"after_load_mib": vm_hwm_mib()}
    if mode == "one":
        page = next(iter_pages(pdf, pdf_dpi=200, max_pdf_pages=10_000)).image
        eng.read(page)
        out["peak_one_page_mib"] = vm_hwm_mib()
        return out
    n = 0
    rss = []
    for p in eng.read_many([pdf]):
        assert p.ok, p.error
        n += 1
        rss.append(round(vm_rss_mib()))
    out.update(pages=n, peak_stream_mib=vm_hwm_mib(), rss_mib_per_page=rss)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=16)
    ap.add_argument("--case", action="append", default=[], help="NAME=JSON engine changes")
    ap.add_argument("--modes", default="one,stream", help="one (a single page), stream, or both")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=4, metavar=("PDF", "PAGES", "JSON", "MODE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        pdf, pages, changes, mode = args.child
        print(json.dumps(child(pdf, int(pages), json.loads(changes), mode)))
        return 0
    cases = dict(c.split("=", 1) for c in args.case) or {"default": "{}"}
    root = Path(tempfile.mkdtemp(prefix="ocrforge-mem-"))
    pdf = root / f"a4-{args.pages}.pdf"
    make_pdf(pdf, args.pages)
    results = {}
    for name, changes in cases.items():
        res = {}
        for mode in args.modes.split(","):
            cmd = [sys.executable, __file__, "--child", str(pdf), str(args.pages), changes, mode]
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
            if r.returncode:
                res[mode] = {"error": r.stderr[-2000:]}
            else:
                res.update(json.loads(r.stdout.strip().splitlines()[-1]))
        results[name] = {"changes": json.loads(changes), **res}
        print(name, json.dumps({k: v for k, v in res.items() if k != "rss_mib_per_page"}),
              flush=True)
    out = {"pages": args.pages, "page_size": A4, "cpus": os.cpu_count(), "cases": results}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
