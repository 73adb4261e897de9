#!/usr/bin/env bash
# Set up everything the test suite needs in ./.venv, then run it.
# The README's test command and CI (.ci/run) both run exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: Chromium for the demo-page browser test, extra fonts for synthetic pages,
# qpdf for `qpdf --check` on exported PDFs, poppler-utils for pdftotext (word spaces in PDFs) (OCRmyPDF itself needs neither Tesseract nor
# Ghostscript with the ocrforge plugin). A held apt/dpkg lock (unattended-upgrades, another
# job) is waited for, not a failure.
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  . scripts/apt-wait.sh
  apt_get update -qq
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core fonts-wqy-zenhei qpdf poppler-utils >/dev/null
fi

python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# CPU build of PyTorch for the native-model parity tests (install it before the extras so
# nothing pulls a CUDA build)
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[dev,quant,bench,serve,ocrmypdf,ray,openvino]'
# the layering contract (docs/ARCHITECTURE.md) and lint, then the tests
lint-imports
ruff check src tests benchmarks
python -m pytest -q -p no:cacheprovider "$@"
