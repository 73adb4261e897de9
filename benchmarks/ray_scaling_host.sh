#!/usr/bin/env bash
# Ray scale-out on a quiet many-core host (the lent H200 machine's 16 CPU cores) in one call:
# the local job, and Ray with 1, 2, 4, 8 actors of one thread each, every actor pinned to a
# core of its own (core 0 left to the driver and Ray), two repetitions, pages/s next to
# CPU-seconds per page by role (driver, actors, Ray's workers, Ray's daemons).
# Installs nothing from the network. Expects, beside the working tree, .carry-ray/ (make it
# with `bash benchmarks/ray_scaling_host.sh --make-carry` on the dev VM):
#   site.tar.xz         Ray 2.60.0 for cp312 manylinux x86_64 unpacked (ray/jars and the
#                       dashboard's web build left out: 79 MB wheel -> 31 MB), jsonschema,
#                       jsonschema-specifications, referencing, rpds-py
#   whl/                ocrforge's own needs the GPU image lacks (pyclipper shapely rapidfuzz
#                       pydantic pydantic-core annotated-types typing-inspection platformdirs
#                       typing-extensions)
#   models-tiny.tar.xz  .models: ppocrv6 tiny det/rec + dict, v5 cls, page orientation
#   images/             52 pages of the dev set (those of 700 kB or less)
# Usage (device tool, carry [".carry-ray"]): bash benchmarks/ray_scaling_host.sh
#   env: OUT (results folder), N (pages per run, 64), REPS (2), BUDGET_S (no run starts after
#   it, 400), BENCH_TIMEOUT (470)
set -uo pipefail
c=.carry-ray
if [ "${1:-}" = --make-carry ]; then
  exec python3 benchmarks/ray_scaling_carry.py "$c"
fi
out=${OUT:-/tmp/ray_scaling_out}
mkdir -p "$out" /tmp/site /tmp/rsmodels
untar() {  # python's tarfile: no xz binary needed; file modes kept (raylet is a program)
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$1" "$2"
}
untar "$c/site.tar.xz" /tmp/site || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$c"/whl/*.whl || exit 1
untar "$c/models-tiny.tar.xz" /tmp/rsmodels || exit 1
export PYTHONPATH=/tmp/site:$PWD/src OCRFORGE_MODEL_DIR=/tmp/rsmodels/.models PYTHONUNBUFFERED=1
export RAY_USAGE_STATS_ENABLED=0
nproc
python3 -c "import ray, ray.data, psutil, ocrforge.ray; print('ray', ray.__version__)" || exit 1
timeout "${BENCH_TIMEOUT:-470}" python3 benchmarks/ray_scaling.py --host --images "$c/images" \
  --n "${N:-64}" --reps "${REPS:-2}" --model-set ppocrv6-tiny --budget-s "${BUDGET_S:-400}" \
  --out "$out/ray_scaling_host.json" 2>&1 | grep -v -e ' INFO ' -e 'core_worker.cc' \
  -e 'WARNING' | tee "$out/ray_scaling_host.log"
