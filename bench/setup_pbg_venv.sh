#!/usr/bin/env bash
# Build bench/.pbg-venv: PyPI's torchbiggraph==1.0.0 in its own virtualenv, for side-by-side
# benchmarks (bench/speed.py). No PBG code is copied into this repository.
#
# Idempotent: a stamp file records the pinned set; a second run with the stamp present does nothing.
#
# Why three separate pip calls: torch==2.13.0 (CPU) is a local wheel found through pip's find-links
# and resolving it together with "setuptools<70" fails on this machine; torchbiggraph 1.0.0 imports
# pkg_resources at import time, which setuptools>=70 no longer ships reliably. So: torch first,
# then setuptools<70, then torchbiggraph's declared dependencies, then torchbiggraph itself with
# --no-deps (its metadata asks for an unpinned "torch>=1" and "setuptools", which would let pip
# replace the two pins above). Always torch==2.13.0: a looser pin pulls a multi-GB CUDA build.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PBG_VENV:-$HERE/.pbg-venv}"
PYTHON="${PYTHON:-python3.11}"
PINS="torch==2.13.0 setuptools<70 torchbiggraph==1.0.0 attrs h5py numpy tqdm"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PINS" ]]; then
    echo "pbg-venv: up to date ($VENV)"
    exit 0
fi

command -v "$PYTHON" >/dev/null || { echo "pbg-venv: need $PYTHON on PATH" >&2; exit 1; }
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)

"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" "setuptools<70"
"${PIP[@]}" attrs h5py numpy tqdm
"${PIP[@]}" --no-deps "torchbiggraph==1.0.0"

# Smoke check: the package imports and the console scripts exist.
"$VENV/bin/python" -c "import torch, torchbiggraph; print('pbg-venv: torchbiggraph', torchbiggraph.__version__, 'torch', torch.__version__)"
for tool in torchbiggraph_train torchbiggraph_import_from_tsv torchbiggraph_eval; do
    test -x "$VENV/bin/$tool" || { echo "pbg-venv: missing $VENV/bin/$tool" >&2; exit 1; }
done
echo "$PINS" > "$STAMP"
