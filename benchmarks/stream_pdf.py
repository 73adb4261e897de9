"""A long PDF through `ocrforge read -o DIR/`: memory over time and time to the first page.

    python benchmarks/stream_pdf.py --pages 1000 --json out.json [-- extra read options]

Writes a PDF of ``--pages`` letter pages (a few text lines each, JPEG images at 100 dpi, in a
temp folder), runs the real CLI on it in a subprocess (default 200 dpi render), and samples
the process's RSS and the number of page files written every ``--every`` seconds. Reports the
time to the first written page, the RSS peak, RSS at 10/25/50/75/100 % of the pages, and
pages/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_pdf(path: Path, pages: int) -> None:
    from PIL import Image, ImageDraw, ImageFont

    from ocrforge.evaluation.synth import wheel_font

    font = ImageFont.truetype(str(wheel_font()), 28)

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


def main() -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--json")
    ap.add_argument("--keep", help="folder for the PDF and outputs (default: a temp folder)")
    ap.add_argument("read_args", nargs="*", help="extra `ocrforge read` options (after --)")
    args = ap.parse_args()

    root = Path(args.keep or tempfile.mkdtemp(prefix="ocrforge-stream-"))
    root.mkdir(parents=True, exist_ok=True)
    pdf = root / f"long-{args.pages}.pdf"
    if not pdf.exists():
        t0 = time.perf_counter()
        make_pdf(pdf, args.pages)
        print(f"wrote {pdf} ({pdf.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    out = root / "out"
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    cmd = [sys.executable, "-m", "ocrforge.cli", "read", str(pdf), "-o", f"{out}/", "--no-progress",
           "--max-pdf-pages", str(max(args.pages, 1000)), *args.read_args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ})
    ps = psutil.Process(proc.pid)
    samples = []
    first = None
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss
        except psutil.NoSuchProcess:
            break
        done = sum(1 for _ in out.iterdir())
        t = time.perf_counter() - t0
        if done and first is None:
            first = t
        samples.append((round(t, 2), rss, done))
        time.sleep(args.every)
    total = time.perf_counter() - t0
    done = sum(1 for _ in out.iterdir())
    peak = max(s[1] for s in samples) if samples else None

    def rss_at(frac: float) -> int | None:
        want = frac * args.pages
        hit = [s for s in samples if s[2] >= want]
        return hit[0][1] if hit else None

    res = {"cmd": cmd[1:], "pages": args.pages, "pages_written": done, "exit_code": proc.returncode,
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
