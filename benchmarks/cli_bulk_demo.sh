#!/usr/bin/env bash
# The CLI on a 10-page PDF and a folder of 50 images, three of them broken on purpose.
# Usage: bash benchmarks/cli_bulk_demo.sh [WORKDIR]   (prints the CLI's stderr and a summary)
set -uo pipefail
W=${1:-bench-out/cli-demo}
rm -rf "$W"; mkdir -p "$W"
ocrforge synth "$W/synth" --pages 60 --seed 7 >/dev/null 2>&1
mkdir -p "$W/folder"
ls "$W"/synth/images/* | head -47 | xargs -I{} cp {} "$W/folder/"
printf '\x89PNG\r\n\x1a\nthis is not a png' > "$W/folder/broken.png"
: > "$W/folder/empty.jpg"
python - "$W" <<'PY'
import sys
from pathlib import Path
from PIL import Image
w = Path(sys.argv[1])
Image.new("1", (30000, 30000), 1).save(w / "folder" / "bomb.png")       # 900 Mpixel
imgs = [Image.open(p).convert("RGB") for p in sorted((w / "synth" / "images").iterdir())[47:57]]
imgs[0].save(w / "ten_pages.pdf", save_all=True, append_images=imgs[1:], resolution=150)
PY
echo "folder: $(ls "$W/folder" | wc -l) files; PDF: $W/ten_pages.pdf"
start=$(date +%s)
ocrforge read "$W/ten_pages.pdf" "$W/folder" -f json -o "$W/out.json" 2> "$W/stderr.txt"
rc=$?
end=$(date +%s)
cat "$W/stderr.txt"
python - "$W/out.json" <<'PY'
import json, sys
docs = json.load(open(sys.argv[1]))
pdf = [d for d in docs if d["source"].endswith(".pdf")]
print(f"pages written: {len(docs)} ({len(pdf)} PDF pages), lines: {sum(len(d['lines']) for d in docs)}")
PY
echo "exit code: $rc, wall time: $((end - start)) s"
