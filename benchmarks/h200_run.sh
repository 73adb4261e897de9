#!/usr/bin/env bash
# What was run on the lent H200 for docs/BENCHMARKS.md ("GPU, one engine core"): the GPU tests
# and the GPU benchmark in one call. Expects, beside the working tree: .whl (cp312 wheels the
# GPU image lacks: pyclipper shapely rapidfuzz pypdfium2 pydantic pydantic-core annotated-types
# typing-inspection platformdirs), .models (ppocrv6 small det/rec + dict, v5 cls + dict, a
# subset of simfang.ttf in fonts/) and .devset (the labeled dev set).
# Usage: bash benchmarks/h200_run.sh OUTDIR [gpu_bench sections] [e2e configs]
set -uo pipefail
out=${1:?output folder}
sections=${2:-e2e}
configs=${3:-fp16g,bf16g,fp32g}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src OCRFORGE_MODEL_DIR=$PWD/.models PYTHONUNBUFFERED=1
export OCRFORGE_TEST_FONT=$PWD/.models/fonts/simfang.ttf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/test_torch_runtime.py \
    tests/test_core_paths.py 2>&1 | tail -40 | tee "$out/pytest_gpu.log"
fi
python3 benchmarks/gpu_bench.py --model-dir .models --font .models/fonts/simfang.ttf \
  --dev .devset --pages 1000 --sections "$sections" --e2e-configs "$configs" \
  --budget-s "${BUDGET_S:-420}" --out "$out/gpu_bench.json" 2>&1 | tee "$out/gpu_bench.log" | tail -60
